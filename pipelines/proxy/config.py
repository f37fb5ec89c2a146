"""The query proxy's configuration: who may use it (`Access`), how much (`Limits`), the largest query (`Bounds`).

Validated once, here: every error names the setting, the bad value and what is accepted.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field

from windjoin.pipelines.proxy.tokens import Tokens

METRICS_MODES = ("token", "open", "off")
MAX_PAGE = 10_000  # rows of one page, the most a one-time query returns at once (result_query.MAX_LIMIT)
MAX_PAGE_BYTES = 8 << 20  # bytes of row values of one page (result_query.MAX_PAGE_BYTES)
DAY_MS = 86_400_000
FEED_QUEUE_CHUNKS = 1000  # result chunks a stream subscriber may have pending (feed.FeedConfig.queue_size)
FEED_QUEUE_MB = 64  # MiB of result rows a stream subscriber may have pending (feed.FeedConfig.queue_bytes)
_MAX_TIME = 2**53 - 1


@dataclass(frozen=True)
class Limits:
    """`rate`: requests per second a client may sustain; `burst`: how many it may send at once; `streams`:
    continuous queries it may hold open at a time."""

    rate: float = 20.0
    burst: int = 40
    streams: int = 4

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"rate limit: {self.rate!r} is not accepted (accepted: requests per second > 0)")
        if self.burst < 1:
            raise ValueError(f"rate burst: {self.burst!r} is not accepted (accepted: an integer >= 1)")
        if self.streams < 1:
            raise ValueError(f"max streams: {self.streams!r} is not accepted (accepted: an integer >= 1)")


@dataclass(frozen=True)
class Bounds:
    """The largest one-time query the proxy answers: `max_span_ms` between from and to, `max_limit` rows and about
    `max_page_bytes` of row values a page, `query_budget_ms` of reading a page (then it answers what it knows with a
    cursor for the rest), and `max_queries` read at once (the rest wait): memory stays about `max_queries` pages."""

    max_span_ms: int = 31 * DAY_MS
    max_limit: int = MAX_PAGE
    max_page_bytes: int = MAX_PAGE_BYTES
    query_budget_ms: int = 10_000
    max_queries: int = 8

    def __post_init__(self) -> None:
        if not 1 <= self.max_span_ms <= 2 * _MAX_TIME:
            raise ValueError(f"max span: {self.max_span_ms!r} is not accepted (accepted: 1..{2 * _MAX_TIME} ms)")
        if not 1 <= self.max_limit <= MAX_PAGE:
            raise ValueError(f"max limit: {self.max_limit!r} is not accepted (accepted: 1..{MAX_PAGE})")
        if not 1024 <= self.max_page_bytes <= MAX_PAGE_BYTES * 16:
            raise ValueError(
                f"max page bytes: {self.max_page_bytes!r} is not accepted (accepted: 1024..{MAX_PAGE_BYTES * 16})"
            )
        if not 100 <= self.query_budget_ms <= 600_000:
            raise ValueError(f"query budget: {self.query_budget_ms!r} is not accepted (accepted: 100..600000 ms)")
        if not 1 <= self.max_queries <= 256:
            raise ValueError(f"max queries: {self.max_queries!r} is not accepted (accepted: 1..256)")


@dataclass(frozen=True)
class Access:
    """`tokens`: the token table, or the tokens file followed while the proxy runs (None: no authentication at all,
    only by explicit choice); `limits`: per client; `metrics`: "token" (any valid token may read /metrics), "open"
    (no token needed) or "off" (not served); `docs`: serve /docs, /redoc and /openapi.json."""

    tokens: Tokens | None
    limits: Limits = field(default_factory=Limits)
    metrics: str = "token"
    docs: bool = True

    def __post_init__(self) -> None:
        if self.metrics not in METRICS_MODES:
            raise ValueError(f"metrics: {self.metrics!r} is not accepted (accepted: {list(METRICS_MODES)})")


def trusted_proxies(text: str) -> list[str]:
    """The reverse proxies whose X-Forwarded-For the proxy believes, from a comma-separated list of IP addresses
    and CIDR networks (empty: none, so a forged header never picks a client's address or rate-limit bucket)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(
                f"--forwarded-allow-ips: {item[:100]!r} is not accepted (accepted: IP addresses or CIDR networks, "
                "comma-separated, e.g. 10.0.0.0/8,127.0.0.1; empty: trust no proxy)"
            ) from None
    return items
