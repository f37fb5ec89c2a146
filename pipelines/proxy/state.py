"""What the query proxy's routes share: the result store, the feed fan-out, the access gate, the bounds and the
metrics, and how a store call runs (on a thread, at most `Bounds.max_queries` at once, counted and timed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from anyio import CapacityLimiter, to_thread
from fastapi import Request

from windjoin.connectors.results.result_query import ResultStore
from windjoin.pipelines.proxy.access import Gate
from windjoin.pipelines.proxy.config import Bounds
from windjoin.pipelines.proxy.feed import FeedHub
from windjoin.pipelines.proxy.metrics import ProxyMetrics
from windjoin.pipelines.proxy.probes import Probes

T = TypeVar("T")


@dataclass
class ProxyState:
    """One proxy app's parts (`create_app` builds it)."""

    store: ResultStore
    hub: FeedHub
    gate: Gate
    metrics: ProxyMetrics
    bounds: Bounds
    send_timeout_s: float
    limiters: dict[str, CapacityLimiter] = field(default_factory=dict)  # made on the event loop that uses them
    probes: Probes = field(default_factory=Probes)  # /readyz's store probes in flight

    def limiter(self, name: str, tokens: int) -> CapacityLimiter:
        if name not in self.limiters:
            self.limiters[name] = CapacityLimiter(tokens)
        return self.limiters[name]

    async def answer(
        self, request: Request, kind: str, call: Callable[[], T], rows: Callable[[T], int] | None = None
    ) -> T:
        """Run a store call in a thread (at most `max_queries` at once), counted and timed under `kind`."""
        request.scope["windjoin.kind"] = kind
        with self.metrics.timed(kind):
            result = await to_thread.run_sync(call, limiter=self.limiter("queries", self.bounds.max_queries))
        self.metrics.answered(kind, 200, rows(result) if rows else 0)
        return result
