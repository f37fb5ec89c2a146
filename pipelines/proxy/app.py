"""The query proxy's HTTP interface (FastAPI): maps requests onto a `ResultStore` and its answers onto responses.

Endpoints (OpenAPI at /openapi.json, docs at /docs): task listing, field listing, one-time queries with cursor
paging, continuous queries as server-sent events (`proxy_feed` fans each task's feed out), snapshot listing,
/healthz, /readyz and /metrics. Every data endpoint needs a bearer token allowed to read the task (`proxy_access`:
401, 403, 429); /healthz and /readyz need none (probes). Every `QueryError` becomes the status of its type
(`STATUSES`, the one place they are mapped) with `{"detail": message}`; a store that cannot be reached becomes 503
naming the tier, never where it is or what it said (that goes to the log); FastAPI's own parameter validation answers
422. Store calls run on threads: queries on at most `Bounds.max_queries` at once, /readyz on its own, so that a
storm of queries never holds up the probes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from windjoin.connectors.results.result_query import ResultStore
from windjoin.operators.query import errors
from windjoin.operators.query.errors import QueryError
from windjoin.pipelines.proxy.access import Gate
from windjoin.pipelines.proxy.config import Access, Bounds
from windjoin.pipelines.proxy.feed import FeedConfig, FeedHub
from windjoin.pipelines.proxy.metrics import ProxyMetrics
from windjoin.pipelines.proxy.routes import caller, metrics_router, router
from windjoin.pipelines.proxy.state import ProxyState

log = logging.getLogger(__name__)

# The one place query errors become HTTP statuses; a subtype takes its nearest listed type's (QueryTooLarge: 400).
STATUSES: dict[type[QueryError], int] = {
    errors.BadQuery: 400,
    errors.NotFound: 404,
    errors.Gone: 410,
    errors.TryAgain: 503,
    errors.Damaged: 502,  # the stores behind the proxy hold what breaks their own index: not the client's fault
    QueryError: 400,
}


def create_app(
    store: ResultStore,
    feed: FeedConfig | None = None,
    send_timeout_s: float = 30.0,
    *,
    access: Access,
    bounds: Bounds | None = None,
) -> FastAPI:
    """The proxy app over `store`; `access` says who may read what (see `proxy_access`), `bounds` the largest
    one-time query; `feed` tunes the continuous-query fan-out (queue size, page size)."""
    metrics = ProxyMetrics()
    state = ProxyState(store, FeedHub(store, feed), Gate(access, metrics), metrics, bounds or Bounds(), send_timeout_s)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await state.hub.stop()

    app = FastAPI(
        title="windjoin query proxy",
        version="1",
        description="One-time and continuous queries over a windjoin pipeline's join results (Redis and Parquet).",
        lifespan=lifespan,
        docs_url="/docs" if access.docs else None,
        redoc_url="/redoc" if access.docs else None,
        openapi_url="/openapi.json" if access.docs else None,
    )
    app.state.proxy = state

    @app.exception_handler(QueryError)
    async def query_error(request: Request, err: QueryError) -> JSONResponse:
        status = status_of(err)
        kind = request.scope.get("windjoin.kind", "other")
        metrics.answered(kind, status)
        body: dict[str, str | None] = {"detail": str(err)}
        if isinstance(err, errors.Damaged):
            metrics.damaged.labels(kind).inc()
            log.warning("%s %s: %s", request.method, request.url.path, err)
        if isinstance(err, errors.Gone) or (isinstance(err, errors.Damaged) and err.cursor):
            body["cursor"] = err.cursor
        return JSONResponse(body, status_code=status)

    async def store_down(request: Request, err: Exception) -> JSONResponse:
        """Redis unreachable, or Parquet files gone while read (a snapshot expired twice during one query): the body
        names the tier only (addresses, paths and server messages go to the log)."""
        metrics.answered(request.scope.get("windjoin.kind", "other"), 503)
        tier = "Redis" if isinstance(err, redis.RedisError) else "Parquet"
        log.warning("%s %s: %s unavailable: %r", request.method, request.url.path, tier, err)
        return JSONResponse({"detail": f"store unavailable: {tier} did not answer; retry later"}, status_code=503)

    app.add_exception_handler(redis.RedisError, store_down)
    app.add_exception_handler(OSError, store_down)

    app.include_router(router)
    if access.metrics != "off":
        app.include_router(metrics_router, dependencies=[Depends(caller)] if access.metrics == "token" else [])
    return app


def status_of(err: QueryError) -> int:
    """The HTTP status of a query error: that of the nearest of its types in `STATUSES`."""
    return next(STATUSES[kind] for kind in type(err).__mro__ if kind in STATUSES)
