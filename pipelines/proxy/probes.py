"""Readiness probes with a bounded number in flight. /readyz answers within a second, so a probe of a stalled
store is abandoned while its thread still waits on the store; without a bound every later probe would start
another such thread (17 -> 78 threads while Redis stalled). Here a probe holds its slot until its call returns,
and a probe that finds every slot held answers "not ready" at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

IN_FLIGHT = 2  # probes of the store at once (one stalled, one more to find out whether it recovered)


class Probes:
    """At most `most` probe calls running at once, across threads."""

    def __init__(self, most: int = IN_FLIGHT) -> None:
        self._slots = threading.BoundedSemaphore(most)

    def run(self, probe: Callable[[], T]) -> T | None:
        """`probe()` on this thread when a slot is free, else None (every slot held by probes still running)."""
        if not self._slots.acquire(blocking=False):
            return None
        try:
            return probe()
        finally:
            self._slots.release()
