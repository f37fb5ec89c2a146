"""The query proxy's Prometheus metrics, in a registry of their own (one per app, so apps in one process differ)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Latency buckets (seconds): one-time queries run from ~1 ms (Redis only) to seconds (large Parquet spans).
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ProxyMetrics:
    """Queries by kind and status, latency by kind, rows served by kind, active stream subscribers, refusals,
    tokens file reloads."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.queries = Counter(
            "windjoin_proxy_queries",
            "Queries answered, by kind (results, stream, tasks, fields, snapshots) and HTTP status.",
            ["kind", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "windjoin_proxy_query_seconds",
            "Time to answer a query (for a stream: to validate it and read its first catch-up page).",
            ["kind"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.rows = Counter(
            "windjoin_proxy_rows_served", "Result rows sent to clients, by kind.", ["kind"], registry=self.registry
        )
        self.subscribers = Gauge(
            "windjoin_proxy_subscribers", "Continuous queries (SSE streams) open now.", registry=self.registry
        )
        self.slow_consumers = Counter(
            "windjoin_proxy_slow_consumers",
            "Streams closed because their client did not keep up (queue full).",
            registry=self.registry,
        )
        self.refused = Counter(
            "windjoin_proxy_refused",
            "Requests refused before any query, by reason: unauthenticated and expired (401), scope (403), rate and "
            "streams (429); and open streams ended because their token was revoked, changed or expired (withdrawn).",
            ["reason"],
            registry=self.registry,
        )
        self.damaged = Counter(
            "windjoin_proxy_damaged_results",
            "Reads that met stored results breaking their index entry (a Redis chunk or index member, a Parquet "
            "file that cannot be read), by kind (results, stream): none of those rows served.",
            ["kind"],
            registry=self.registry,
        )
        self.token_reloads = Counter(
            "windjoin_proxy_token_reloads",
            "Re-reads of the changed tokens file, by outcome: reloaded, failed (the last good tokens kept), or revoked "
            "(the file is gone: no token accepted until it is back).",
            ["outcome"],
            registry=self.registry,
        )

    @contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        """Observe the latency of the enclosed block under `kind`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.latency.labels(kind).observe(time.perf_counter() - start)

    def answered(self, kind: str, status: int, rows: int = 0) -> None:
        self.queries.labels(kind, str(status)).inc()
        if rows:
            self.rows.labels(kind).inc(rows)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
