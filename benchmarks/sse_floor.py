"""The machine's floor for the query benchmark's fan-out: a server that does nothing per row.

It serves the same stream path with the same server (uvicorn, sse_starlette's EventSourceResponse) and the same
events as the proxy (1000-row "results" events of the benchmark's rows, framed by `Kept.frame`), but each second's
events are one pre-encoded event sent `rate / 1000` times, its emitted_at stamped once per batch: no store read, no
row decoding, no selection, no JSON encoding. The clients are the fan-out's (`sse_clients.follow`, in the benchmark's
process). Where this floor cannot keep K subscribers up at a rate, the proxy cannot either: what is left is the
sockets, the event loops and the clients on the same cores.

    python -m benchmarks.sse_floor --port P   (the server; `floor_round` starts it)
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from benchmarks.sse_clients import follow, round_result

PAGE_ROWS = 1000  # rows per event, the proxy's default page
_STAMP = b"9999999999999"  # a 13-digit emitted_at placeholder, replaced by each batch's time in ms


def _template() -> bytes:
    """A results event of PAGE_ROWS rows shaped as the benchmark's (two 3-field streams and the 4 row keys)."""
    from windjoin.pipelines.proxy.feed import Kept

    rows = [
        {
            "R": {"ts": 1_795_000_000_000 + i, "k": i * 37 % 100_000, "x": i % 9973},
            "S": {"ts": 1_795_000_000_000 - i, "k": i * 37 % 100_000, "a": i % 7919},
            "batch_id": 123_456,
            "row": i,
            "emitted_at": int(_STAMP),
            "result_time": 1_795_000_000_000 + i,
        }
        for i in range(PAGE_ROWS)
    ]
    return Kept(orjson.dumps(rows), PAGE_ROWS, "123456.999").frame


def app(rate: float, seconds: int) -> Any:
    """The floor's app: GET /v1/tasks/{task}/stream (a "ready" event, then the batches); POST /start begins
    `seconds` batches, one a second, of `rate` rows for every stream open."""
    from sse_starlette.sse import EventSourceResponse
    from starlette.applications import Starlette
    from starlette.routing import Route

    template = _template()
    events_per_batch = max(1, round(rate / PAGE_ROWS))
    batches: list[bytes] = []  # each batch's event, stamped
    new_batch = asyncio.Condition()

    async def produce() -> None:
        for _ in range(seconds):
            started = time.time()
            async with new_batch:
                batches.append(template.replace(_STAMP, b"%d" % int(started * 1000)))
                new_batch.notify_all()
            await asyncio.sleep(max(0.0, 1.0 - (time.time() - started)))

    async def stream(request: Any) -> Any:
        async def events() -> AsyncIterator[Any]:
            yield {"event": "ready", "data": "{}"}
            sent = len(batches)
            while True:
                async with new_batch:
                    await new_batch.wait_for(lambda have=sent: len(batches) > have)
                event = batches[sent]
                sent += 1
                for _ in range(events_per_batch):
                    yield event

        return EventSourceResponse(events(), ping=15)

    producer: list[asyncio.Task] = []

    async def start(request: Any) -> Any:
        from starlette.responses import Response

        if not producer:
            producer.append(asyncio.create_task(produce()))
        return Response(status_code=204)

    return Starlette(routes=[Route("/v1/tasks/{task}/stream", stream), Route("/start", start, methods=["POST"])])


async def floor_round(port: int, rate: float, k: int, seconds: float, lag_limit_ms: float) -> dict[str, Any]:
    """K of the benchmark's subscribers on a fresh floor server for `seconds` batches; the fan-out's verdict."""
    import aiohttp

    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.sse_floor", "--port", str(port), "--rate", str(rate)]
        + ["--seconds", str(int(seconds))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(base) as session:
            deadline = time.monotonic() + 30
            while True:
                try:
                    async with session.get("/v1/tasks/eq/stream", timeout=aiohttp.ClientTimeout(total=2)) as r:
                        if r.status == 200:
                            break
                except (TimeoutError, aiohttp.ClientError):
                    pass
                assert time.monotonic() < deadline, "the floor server did not start"
                await asyncio.sleep(0.2)
            stats = [{"rows": 0, "errors": 0, "lags": [], "ready": False} for _ in range(k)]
            tasks = [asyncio.create_task(follow(base, None, s)) for s in stats]
            while not all(s["ready"] for s in stats):
                await asyncio.sleep(0.1)
            async with session.post("/start"):
                pass
            await asyncio.sleep(int(seconds) + lag_limit_ms / 1000)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        server.kill()
        server.wait()
    events_per_batch = max(1, round(rate / PAGE_ROWS))
    return round_result(stats, k, int(seconds) * events_per_batch * PAGE_ROWS, lag_limit_ms)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(app(args.rate, args.seconds), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
