"""Who may use the query proxy and how much: bearer-token authentication (401: none, unknown or expired; the
tokens file is re-read when it changes), task scopes (403), per-client request rate and open-stream limits (429 with
Retry-After), and whether /metrics and the API docs are served.

`Gate` turns an `Access` configuration into the checks the endpoints depend on. Limits apply per token (its name),
whatever address the request claims. Without a token table (only by the explicit `--insecure-no-auth` choice)
every caller may read every task, and limits apply per client address: the connection's, or the one a trusted
reverse proxy forwards (`--forwarded-allow-ips`, none by default), never an X-Forwarded-For a client wrote.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime

from fastapi import HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials

from windjoin.pipelines.proxy.config import Access
from windjoin.pipelines.proxy.limits import Lease, RateLimiter, StreamSlots
from windjoin.pipelines.proxy.metrics import ProxyMetrics
from windjoin.pipelines.proxy.tokens import Client, Tokens

log = logging.getLogger("windjoin.proxy")

STREAM_RETRY_S = 5  # Retry-After when a client holds all the streams it may: streams last, retry later


class Gate:
    """The access checks of one app: `caller` authenticates and rate-limits, `reader` also checks the task's
    scope, `stream` holds one of the caller's stream slots."""

    def __init__(self, access: Access, metrics: ProxyMetrics) -> None:
        self.access = access
        self.metrics = metrics
        self.rate = RateLimiter(access.limits)
        self.streams = StreamSlots(access.limits.streams)
        if access.tokens is None:
            log.warning("AUTHENTICATION IS OFF (--insecure-no-auth): anyone who reaches the proxy reads every task")

    def caller(self, request: Request, credentials: HTTPAuthorizationCredentials | None) -> Client:
        """The authenticated client of a request (401 without or with a bad token; 429 over its request rate)."""
        if self.access.tokens is None:
            host = request.client.host if request.client is not None else "unknown"
            client = Client(f"anonymous@{host}", None)
        else:
            client = self._authenticated(self.access.tokens, credentials)
        wait = self.rate.take(client.name)
        if wait > 0:
            self._refuse("rate")
            limits = self.access.limits
            raise HTTPException(
                429,
                f"too many requests: at most {limits.rate:g} per second (bursts of {limits.burst}) per client",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        return client

    def admits(self, client: Client) -> bool:
        """Whether an open stream's client may still be served: its token is still in the (re-read) tokens file,
        unchanged, and has not expired. Always without authentication."""
        tokens = self.access.tokens
        if tokens is None:
            return True
        self._refresh(tokens)
        if tokens.admits(client) and not client.expired(datetime.now(UTC)):
            return True
        self._refuse("withdrawn")
        return False

    def _authenticated(self, tokens: Tokens, credentials: HTTPAuthorizationCredentials | None) -> Client:
        """The client of a bearer token, once `tokens` had its chance to re-read its file (401 for none, an unknown
        or an expired one)."""
        self._refresh(tokens)
        found = None if credentials is None else tokens.client(credentials.credentials)
        if found is None:
            self._refuse("unauthenticated")
            raise _unauthorized("a valid bearer token is required (Authorization: Bearer <token>)")
        if found.expired(datetime.now(UTC)):
            self._refuse("expired")
            raise _unauthorized(f"this bearer token expired at {found.expires:%Y-%m-%dT%H:%M:%SZ}; ask for a new one")
        return found

    def check_task(self, client: Client, task: str) -> None:
        """403 when the client may not read the task."""
        if not client.may_read(task):
            self._refuse("scope")
            raise HTTPException(403, f"task: this token may not read task {task[:100]!r}")

    def stream(self, client: Client) -> Lease:
        """One of the client's stream slots (429 when it holds all it may)."""
        lease = self.streams.open(client.name)
        if lease is None:
            self._refuse("streams")
            raise HTTPException(
                429,
                f"too many open streams: at most {self.access.limits.streams} continuous queries per client",
                headers={"Retry-After": str(STREAM_RETRY_S)},
            )
        return lease

    def _refresh(self, tokens: Tokens) -> None:
        reloaded = tokens.refresh()
        if reloaded is not None:
            self.metrics.token_reloads.labels(reloaded).inc()

    def _refuse(self, reason: str) -> None:
        self.metrics.refused.labels(reason).inc()


def _unauthorized(why: str) -> HTTPException:
    return HTTPException(401, f"Authorization: {why}", headers={"WWW-Authenticate": "Bearer"})
