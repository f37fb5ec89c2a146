"""The fan-out's subscribers and their verdict, shared by the query benchmark (`benchmarks.queries`) and the
floor it is measured against (`benchmarks.sse_floor`): the same clients on both servers."""

from __future__ import annotations

import os
import re
import time
from typing import Any

import aiohttp
import numpy as np

TASK = "eq"
TOKEN = "windjoin-bench-queries"  # the benchmark's bearer token; the proxy's limits are lifted for its load
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p99_ms": None, "n": 0}
    arr = np.asarray(values)
    return {"p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99)), "n": len(values)}


_EVENT_END = b"\r\n\r\n"  # EventSourceResponse's default line separator is CRLF
_EMITTED_AT = b'"emitted_at":'
_EVENT_NAME = re.compile(rb"(?:^|\r\n)event: ([a-z]+)\r\n")
_INT = re.compile(rb"-?[0-9]+")


async def follow(base: str, where: str | None, stats: dict[str, Any]) -> None:
    """One SSE subscriber until cancelled: counts rows and the lag of every event's last row behind emitted_at.

    The clients cost CPU on the cores the proxy and the writer use, and share this process, so they must cost far
    less than the proxy's work for the measure to be the proxy's. Hence aiohttp (its HTTP parser is C; httpx's,
    pure Python, made 32 subscribers fall behind at 50k rows/s where 64 curl processes all kept up), and events
    read as bytes with their JSON not decoded: a whole result row holds the key "emitted_at" exactly once (the
    benchmark's streams have no field of that name and no string values), so the rows of an event are its number
    of occurrences and the last row's emitted_at is the integer after the last one."""
    params = {"where": where} if where else {}
    async with (
        aiohttp.ClientSession(base, headers=AUTH, timeout=aiohttp.ClientTimeout(total=None)) as session,
        session.get(f"/v1/tasks/{TASK}/stream", params=params) as resp,
    ):
        buffer = bytearray()
        async for piece in resp.content.iter_any():
            searched = max(len(buffer) - len(_EVENT_END) + 1, 0)
            buffer += piece
            while (end := buffer.find(_EVENT_END, searched)) >= 0:
                event = bytes(buffer[:end])
                del buffer[: end + len(_EVENT_END)]
                searched = 0
                name = _EVENT_NAME.search(event, 0, 1000)
                if name is None:  # a ping (comment)
                    continue
                if name.group(1) == b"ready":
                    stats["ready"] = True
                if name.group(1) == b"end":
                    stats["errors"] += 1
                    return
                if name.group(1) == b"results" and (last := event.rfind(_EMITTED_AT)) >= 0:
                    now = time.time() * 1000
                    stats["rows"] += event.count(_EMITTED_AT)
                    emitted_at = _INT.match(event, last + len(_EMITTED_AT))
                    assert emitted_at is not None, "an emitted_at without an integer"
                    stats["lags"].append(now - int(emitted_at.group()))


def round_result(stats: list[dict[str, Any]], k: int, expected: int, lag_limit_ms: float) -> dict[str, Any]:
    """A fan-out round's verdict from its subscribers' counts: kept up when each got every row it should, none
    was disconnected, and the p99 lag is under the limit."""
    lags = [lag for s in stats for lag in s["lags"]]
    received = [s["rows"] for s in stats]
    kept_up = (
        all(s["errors"] == 0 for s in stats)
        and min(received) == expected == max(received)
        and (quantiles(lags)["p99_ms"] or 0) < lag_limit_ms
    )
    return {
        "subscribers": k,
        "rows_expected": expected,
        "rows_received_min": min(received),
        "rows_received_max": max(received),
        "errors": sum(s["errors"] for s in stats),
        "lag": quantiles(lags),
        "kept_up": kept_up,
        "loadavg_1m": os.getloadavg()[0],  # other work on the machine competes for its cores
    }
