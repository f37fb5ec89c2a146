"""Per-client limits of the query proxy: a request rate (token bucket) and a number of open streams.

Both answer how long to wait when a client is over its limit, for the 429's Retry-After.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from windjoin.pipelines.proxy.config import Limits

_MAX_CLIENTS = 10_000  # buckets kept; beyond it, full (idle) ones are forgotten


class RateLimiter:
    """A token bucket per client name: `take(name)` is 0 when the request may go, else seconds to wait."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, at)

    def take(self, name: str) -> float:
        now = self._clock()
        rate, burst = self.limits.rate, self.limits.burst
        tokens, at = self._buckets.get(name, (float(burst), now))
        tokens = min(float(burst), tokens + (now - at) * rate)
        if tokens < 1.0:
            self._buckets[name] = (tokens, now)
            return (1.0 - tokens) / rate
        self._buckets[name] = (tokens - 1.0, now)
        if len(self._buckets) > _MAX_CLIENTS:
            self._forget_idle(now)
        return 0.0

    def _forget_idle(self, now: float) -> None:
        rate, burst = self.limits.rate, self.limits.burst
        for name, (tokens, at) in list(self._buckets.items()):
            if tokens + (now - at) * rate >= burst:
                del self._buckets[name]


class StreamSlots:
    """Open continuous queries per client: `open(name)` gives a `Lease` or None when the client holds its limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def open(self, name: str) -> Lease | None:
        if self._open.get(name, 0) >= self.limit:
            return None
        self._open[name] = self._open.get(name, 0) + 1
        return Lease(self, name)

    def held(self, name: str) -> int:
        return self._open.get(name, 0)

    def _close(self, name: str) -> None:
        left = self._open[name] - 1
        if left:
            self._open[name] = left
        else:
            del self._open[name]


class Lease:
    """One open stream of a client; `release()` frees it (once, however often it is called)."""

    def __init__(self, slots: StreamSlots, name: str) -> None:
        self._slots: StreamSlots | None = slots
        self._name = name

    def release(self) -> None:
        if self._slots is not None:
            self._slots._close(self._name)
            self._slots = None
