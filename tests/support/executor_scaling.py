"""Executor scaling runs on a Spark standalone cluster: events in waves, polling with the driver log's tail on
timeout, the oracle's pair count reached, and a watch of the master's running executors."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.local import processes
from windjoin.connectors.spark.cluster import StandaloneCluster
from windjoin.operators.testing.oracle import oracle_join

BASE_TS = 1_700_000_000_000


def scaling_events(start: int, n: int, rng: random.Random) -> list[dict]:
    """R (k, x) and S (k, a) events 1 ms apart from position `start`, 8 keys."""
    out = []
    for i in range(start, start + n):
        stream = "R" if rng.random() < 0.5 else "S"
        value = {"x": i} if stream == "R" else {"a": i}
        out.append({"stream": stream, "ts": BASE_TS + i, "k": rng.randrange(8), **value})
    return out


def wait(what: str, ok: Callable[[], bool], timeout_s: float, log: Path, since: float | None = None) -> float:
    """Poll `ok` until true; return the seconds since `since` (default: now), or fail naming `what` with the driver
    log's tail."""
    start = time.monotonic() if since is None else since
    while not ok():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"{what}: not within {timeout_s} s; driver log:\n{processes.log_tail(log, 40)}")
        time.sleep(0.5)
    return time.monotonic() - start


_EXPECTED: dict[tuple[str, int], int] = {}  # (checkpoint, events so far) -> the oracle's pair count


def joined(sink: ParquetSink, spec: dict, events: list[dict]) -> bool:
    """True once the Parquet sink holds as many pairs as the oracle finds in `events` (counted once per length:
    the oracle is quadratic and this is polled; `events` only grows)."""
    key = (spec["checkpoint"], len(events))
    if key not in _EXPECTED:
        _EXPECTED[key] = len(oracle_join(spec, events)[0])
    try:
        return sum(sink.read(task["name"]).num_rows for task in spec["tasks"]) >= _EXPECTED[key]
    except FileNotFoundError:  # no batch committed yet
        return False


class ExecutorWatch:
    """Polls the master's count of running executors in a thread; `changes` is the sequence of distinct counts."""

    def __init__(self, cluster: StandaloneCluster) -> None:
        self.cluster, self.changes, self.now = cluster, [], 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.now = self.cluster.executors_running()
            except OSError:
                pass
            else:
                if not self.changes or self.changes[-1] != self.now:
                    self.changes.append(self.now)
            self._stop.wait(0.25)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
