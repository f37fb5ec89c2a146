"""The query proxy's metrics as the tests read them: one value from the text format, and waiting for subscribers."""

from __future__ import annotations

import time

import httpx

from tests.pipelines.proxy_helpers import AUTH, Server


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in metrics")


def wait_subscribers(server: Server, n: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if metric(httpx.get(f"{server.url}/metrics", headers=AUTH).text, "windjoin_proxy_subscribers") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"never {n} subscribers")
