"""A real `windjoin proxy` process over a real redis-server that stalls (SIGSTOP: connections open, nothing answers)
(issue 47): /readyz keeps a bounded number of probes in flight (before: the proxy's threads piled up 17 -> 78), and
a one-time query answers 503 about its budget after it began (before: after 30 s against a 10 s budget)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.pipelines.proxy_helpers import AUTH, ProxyProcess, Results, make_spec, new_namespace
from windjoin.connectors.local import services

BUDGET_MS = 2000
PROBING_S = 15


@pytest.fixture
def stalling_redis(tmp_path: Path, redis_login: Path) -> Iterator[tuple[str, int]]:
    """An embedded redis-server of this test alone: its URL and PID (to stop and continue it)."""
    state_dir = tmp_path / "redis"
    state_dir.mkdir()
    shutil.copy(redis_login, state_dir / services.REDIS_PASSWORD_FILE)
    try:
        [started] = services.up(services.ServicesConfig(state_dir=state_dir, kafka=False, redis=True))
        yield started.service.url, started.service.pid
    finally:
        services.down(state_dir)


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no Threads in /proc/{pid}/status")


@pytest.fixture
def stalled(stalling_redis: tuple[str, int], tmp_path: Path) -> Iterator[ProxyProcess]:
    """A proxy process (query budget BUDGET_MS) over a Redis that answered, then stopped (SIGSTOP) until the end."""
    url, redis_pid = stalling_redis
    results = Results(make_spec(url, None), new_namespace(), url, None)
    results.write(10, t0=0)
    args = ["--query-budget-ms", str(BUDGET_MS), "--namespace", results.namespace]
    with ProxyProcess(results.spec, tmp_path, args) as proxy, httpx.Client(headers=AUTH, timeout=20) as client:
        assert client.get(f"{proxy.url}/readyz").status_code == 200
        assert client.get(f"{proxy.url}/v1/tasks/a/results", params={"from": 0, "to": 100}).status_code == 200
        os.kill(redis_pid, signal.SIGSTOP)
        try:
            yield proxy
        finally:
            os.kill(redis_pid, signal.SIGCONT)
        deadline = time.monotonic() + 5  # Redis back: ready again once the probes that waited on it returned
        while client.get(f"{proxy.url}/readyz").status_code != 200:
            assert time.monotonic() < deadline, "not ready 5 s after Redis came back"
            time.sleep(0.2)


def test_a_query_of_a_stalled_redis_is_503_within_its_budget(stalled: ProxyProcess) -> None:
    started = time.monotonic()
    page = httpx.get(f"{stalled.url}/v1/tasks/a/results", params={"from": 0, "to": 200}, headers=AUTH, timeout=20)
    took = time.monotonic() - started
    print(f"a one-time query of a stalled Redis: {page.status_code} after {took:.1f} s (budget {BUDGET_MS} ms)")
    assert page.status_code == 503 and "Redis did not answer" in page.text, page.text
    assert took < BUDGET_MS / 1000 + 2, took


def test_probes_of_a_stalled_redis_stay_few(stalled: ProxyProcess) -> None:
    """Ten clients probe /readyz for PROBING_S: the threads waiting on the stalled Redis stay bounded."""
    before = threads(stalled.pid)
    until = time.monotonic() + PROBING_S

    def probe(_: int) -> list[tuple[int, float]]:
        answers = []
        while time.monotonic() < until:
            began = time.monotonic()
            answers.append((httpx.get(f"{stalled.url}/readyz", timeout=20).status_code, time.monotonic() - began))
        return answers

    with ThreadPoolExecutor(10) as pool:
        answers = [answer for client in pool.map(probe, range(10)) for answer in client]
    during = threads(stalled.pid)
    print(f"proxy threads: {before} before, {during} after {len(answers)} probes of a stalled Redis in {PROBING_S} s")
    assert {status for status, _ in answers} == {503}
    assert max(seconds for _, seconds in answers) < 4.0, answers  # 503 after /readyz's 1 s, plus a busy machine
    assert during <= before + 6, (before, during)
