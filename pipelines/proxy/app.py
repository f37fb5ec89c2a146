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
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Annotated, Any, TypeVar

import orjson
import redis
from anyio import CapacityLimiter, move_on_after, to_thread
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse

from windjoin.connectors.results.result_query import MAX_LIMIT, ResultStore
from windjoin.operators.query import errors
from windjoin.operators.query.conditions import parse_condition
from windjoin.operators.query.cursors import MAX_TIME
from windjoin.operators.query.errors import QueryError
from windjoin.operators.spec import IDENTIFIER
from windjoin.pipelines.proxy.access import Gate
from windjoin.pipelines.proxy.config import Access, Bounds
from windjoin.pipelines.proxy.feed import SLOW_CONSUMER, Chunk, FeedConfig, FeedHub, Subscription
from windjoin.pipelines.proxy.metrics import ProxyMetrics
from windjoin.pipelines.proxy.tokens import Client

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 1000
READY_TIMEOUT_S = 1.0  # a probe answers within this, ready or not
TOKEN_WITHDRAWN = "token revoked or expired"  # the end event of a stream whose token no longer admits it
MAX_CONDITIONS = 32
MAX_TEXT = 1000  # characters of one condition, of the field list, of a cursor

T = TypeVar("T")
# The one place query errors become HTTP statuses; a subtype takes its nearest listed type's (QueryTooLarge: 400).
STATUSES: dict[type[QueryError], int] = {
    errors.BadQuery: 400,
    errors.NotFound: 404,
    errors.Gone: 410,
    errors.TryAgain: 503,
    errors.Damaged: 500,
    QueryError: 400,
}


class Problem(BaseModel):
    detail: str = Field(description="What is wrong with the request, naming the parameter and what is accepted.")


class Gone(Problem):
    cursor: str | None = Field(
        None,
        description="Follow with this cursor to read the results the feed lost from Parquet, then the feed; null "
        "when they are gone from both tiers (then re-query the span with a one-time query).",
    )


class TaskList(BaseModel):
    tasks: list[str] = Field(description="The spec's task names, in spec order.")


class FieldList(BaseModel):
    task: str
    fields: dict[str, str] = Field(
        description='Selectable and projectable fields and their types ("int", "float", "string", "bool"): '
        '"<stream>.<field>" for each joined stream (its timestamp field included), "result_time", "batch_id", '
        '"emitted_at".'
    )


class ResultPage(BaseModel):
    rows: list[dict[str, Any]] = Field(
        description='Result rows in (result_time, batch_id, row) order: {"<A>": {...}, "<B>": {...}, "batch_id", '
        '"row", "emitted_at", "result_time"}, or only the requested fields.'
    )
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")
    snapshot_id: int | None = Field(description="The Parquet snapshot the older part of the answer was read from.")


class SnapshotInfo(BaseModel):
    task: str
    id: int = Field(description="Commit identifier, ascending per task.")
    first_batch: int
    last_batch: int
    rows: int
    min_time: int | None = Field(description="Smallest result time of its rows (null when it has none).")
    max_time: int | None = Field(description="Largest result time of its rows (null when it has none).")
    committed_at_ms: int
    reason: str = Field(description='"periodic", "punctuation" or "recovery" (Redis had lost the boundary).')


class SnapshotList(BaseModel):
    task: str
    snapshots: list[SnapshotInfo]


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, bool] = Field(description="Each tier the spec configures, and whether it answers.")


TaskName = Annotated[
    str, Path(description="A task of the spec (see /v1/tasks).", pattern=IDENTIFIER, min_length=1, max_length=200)
]
Where = Annotated[
    list[Annotated[str, Field(max_length=MAX_TEXT)]] | None,
    Query(
        description='Condition on a result field, repeatable (all must hold): "<field><op><value>" with op one of '
        '=, !=, <, <=, >, >=, or "<field> in v1,v2,..."; e.g. "R.k=5", "R.name!=abc", "R.k in 1,2,3". Strings may '
        "be double-quoted.",
        max_length=MAX_CONDITIONS,
    ),
]
Fields = Annotated[
    str | None,
    Query(
        description='Comma-separated fields to return, e.g. "R.k,S.t,result_time" (default: whole rows).',
        max_length=MAX_TEXT,
    ),
]
DENIED: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "No bearer token, or one the proxy does not know."},
    429: {
        "model": Problem,
        "description": "Over the client's request rate or open-stream limit; retry after Retry-After seconds.",
    },
}
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "Malformed query (bad field, condition, time span or cursor)."},
    **DENIED,
    403: {"model": Problem, "description": "The token may not read this task."},
    404: {"model": Problem, "description": "Unknown task (for streams also: no Redis tier configured)."},
    500: {"model": Problem, "description": "Stored results cannot be read (a damaged file): names the task and batch."},
    503: {"model": Problem, "description": "The store (Redis or Parquet) cannot be reached."},
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
    hub = FeedHub(store, feed)
    metrics = ProxyMetrics()
    gate = Gate(access, metrics)
    bounds = bounds or Bounds()
    bearer = HTTPBearer(auto_error=False, description="A token of the proxy's tokens file.")

    # dependencies as defaults: closures cannot be resolved from postponed annotations (strings)
    bearer_token = Depends(bearer)

    async def caller(request: Request, credentials: HTTPAuthorizationCredentials | None = bearer_token) -> Client:
        """The authenticated client, within its request rate."""
        return gate.caller(request, credentials)

    needs_token = Depends(caller)

    async def reader(task: TaskName, client: Client = needs_token) -> Client:
        """The authenticated client, allowed to read the task."""
        gate.check_task(client, task)
        return client

    needs_task = Depends(reader)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await hub.stop()

    app = FastAPI(
        title="windjoin query proxy",
        version="1",
        description="One-time and continuous queries over a windjoin pipeline's join results (Redis and Parquet).",
        lifespan=lifespan,
        docs_url="/docs" if access.docs else None,
        redoc_url="/redoc" if access.docs else None,
        openapi_url="/openapi.json" if access.docs else None,
    )
    app.state.store, app.state.hub, app.state.metrics = store, hub, metrics

    @app.exception_handler(QueryError)
    async def query_error(request: Request, err: QueryError) -> JSONResponse:
        status = status_of(err)
        metrics.answered(request.scope.get("windjoin.kind", "other"), status)
        body = {"detail": str(err), "cursor": err.cursor} if isinstance(err, errors.Gone) else {"detail": str(err)}
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

    limiters: dict[str, CapacityLimiter] = {}  # made on the event loop that uses them

    def limiter(name: str, tokens: int) -> CapacityLimiter:
        if name not in limiters:
            limiters[name] = CapacityLimiter(tokens)
        return limiters[name]

    async def answer(request: Request, kind: str, call: Callable[[], T], rows: Callable[[T], int] | None = None) -> T:
        """Run a store call in a thread (at most `max_queries` at once), counted and timed under `kind`."""
        request.scope["windjoin.kind"] = kind
        with metrics.timed(kind):
            result = await to_thread.run_sync(call, limiter=limiter("queries", bounds.max_queries))
        metrics.answered(kind, 200, rows(result) if rows else 0)
        return result

    @app.get("/v1/tasks", response_model=TaskList, responses=DENIED, tags=["queries"])
    async def tasks(request: Request, client: Client = needs_token) -> TaskList:
        """The tasks whose results can be queried with this token."""
        names = await answer(request, "tasks", store.tasks)
        return TaskList(tasks=[name for name in names if client.may_read(name)])

    @app.get("/v1/tasks/{task}/fields", response_model=FieldList, responses=ERRORS, tags=["queries"])
    async def fields(request: Request, task: TaskName, _: Client = needs_task) -> FieldList:
        """The fields of a task's results, usable in `where` and `fields`."""
        return FieldList(task=task, fields=await answer(request, "fields", lambda: store.fields(task)))

    @app.get("/v1/tasks/{task}/results", response_model=ResultPage, responses=ERRORS, tags=["queries"])
    async def results(
        request: Request,
        task: TaskName,
        t_from: Annotated[
            int, Query(alias="from", ge=-MAX_TIME, le=MAX_TIME, description="Span start: result time, epoch ms.")
        ],
        t_to: Annotated[
            int, Query(alias="to", ge=-MAX_TIME, le=MAX_TIME, description="Span end (inclusive): epoch ms.")
        ],
        where: Where = None,
        fields: Fields = None,
        limit: Annotated[
            int, Query(ge=1, le=MAX_LIMIT, description="Rows per page (the proxy may set a lower bound).")
        ] = DEFAULT_LIMIT,
        cursor: Annotated[
            str | None, Query(max_length=MAX_TEXT, description="`next_cursor` of the previous page.")
        ] = None,
        _: Client = needs_task,
    ) -> Response:
        """One-time query: the task's results with result time in [from, to], in (result_time, batch_id, row)
        order, recent ones from Redis and older ones from the latest Parquet snapshot, merged without duplicates."""

        def query() -> Any:
            check_bounds(bounds, t_from, t_to, limit)
            conditions, names = parse_query(store, task, where, fields)
            page = store.one_time(task, t_from, t_to, conditions, names, limit, cursor)
            body = {"rows": page.rows, "next_cursor": page.next_cursor, "snapshot_id": page.snapshot_id}
            return len(page.rows), orjson.dumps(body)  # encoded on the thread, not the event loop

        _, body = await answer(request, "results", query, lambda answered: answered[0])
        return Response(body, media_type="application/json")

    @app.get(
        "/v1/tasks/{task}/stream",
        responses={
            **ERRORS,
            410: {
                "model": Gone,
                "description": "The feed does not hold the results after the cursor (or since `from`): trimmed, or "
                "Redis restarted empty. `cursor` resumes from Parquet when it holds them.",
            },
            200: {
                "description": 'Server-sent events: "ready" first (data: {"cursor": ...}; id: the start cursor) unless '
                'the first results come at once, then "results" (data: JSON array of rows in commit order; id: the '
                'cursor after them), and a last "end" (data: {"error": ..., "cursor": ...}) when the client was too '
                'slow, the feed failed, or the token was revoked or expired ("token revoked or expired"). '
                "Reconnect with the last id (Last-Event-ID) or the end's cursor.",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
        },
        response_class=EventSourceResponse,
        tags=["queries"],
    )
    async def stream(
        request: Request,
        task: TaskName,
        where: Where = None,
        fields: Fields = None,
        t_from: Annotated[
            int | None,
            Query(
                alias="from",
                ge=-MAX_TIME,
                le=MAX_TIME,
                description="Start with the first batch emitted (committed) at or after this time, epoch ms "
                "(default: now, i.e. after the last committed batch); 410 when the feed no longer holds it.",
            ),
        ] = None,
        cursor: Annotated[
            str | None, Query(max_length=MAX_TEXT, description="Resume after this cursor (an event's id).")
        ] = None,
        last_event_id: Annotated[
            str | None,
            Header(alias="Last-Event-ID", max_length=MAX_TEXT, description="Set by browsers on reconnect; wins."),
        ] = None,
        client: Client = needs_task,
    ) -> EventSourceResponse:
        """Continuous query: new results of the task matching `where`, in commit order, as server-sent events."""
        after = last_event_id or cursor

        def first() -> tuple[Subscription, Chunk]:
            """Validate everything and read the first page, so that a bad query is a 4xx, not a broken stream."""
            conditions, names = parse_query(store, task, where, fields)
            start_ms = None if after else t_from
            config = hub.config
            rows, next_cursor = store.follow_table(task, after, start_ms, config.page_rows, 0, config.read_bytes)
            start = after if after else (None if rows.num_rows else next_cursor)
            return Subscription(hub, task, start, conditions, names), Chunk(rows, next_cursor)

        lease = gate.stream(client)
        try:
            subscription, chunk = await answer(request, "stream", first)
        except BaseException:
            lease.release()
            raise

        async def events() -> AsyncIterator[dict[str, str] | bytes]:
            metrics.subscribers.inc()
            sent = after  # the cursor of the last event sent: where the client resumes
            try:
                async with aclosing(subscription.events(chunk)) as stream_events:
                    async for kind, data in stream_events:
                        if kind != "end" and not gate.admits(client):  # revoked or expired since the stream began
                            end = {"error": TOKEN_WITHDRAWN, "cursor": sent}
                            yield {"event": "end", "data": orjson.dumps(end).decode()}
                            return
                        if kind == "results":
                            metrics.rows.labels("stream").inc(data.rows)
                            sent = data.cursor
                            yield data.frame
                        elif kind == "ready":
                            sent = data["cursor"]
                            yield {"event": "ready", "id": data["cursor"], "data": orjson.dumps(data).decode()}
                        else:
                            if data["error"] == SLOW_CONSUMER:
                                metrics.slow_consumers.inc()
                            yield {"event": "end", "data": orjson.dumps(data).decode()}
            finally:
                metrics.subscribers.dec()
                lease.release()

        body = events()
        weakref.finalize(body, lease.release)  # also when the response never starts iterating it
        return EventSourceResponse(body, ping=15, send_timeout=send_timeout_s)

    @app.get("/v1/tasks/{task}/snapshots", response_model=SnapshotList, responses=ERRORS, tags=["queries"])
    async def snapshots(request: Request, task: TaskName, _: Client = needs_task) -> SnapshotList:
        """The task's committed Parquet snapshots, ascending by id."""
        found = await answer(request, "snapshots", lambda: store.snapshots(task))
        return SnapshotList(task=task, snapshots=[SnapshotInfo(**vars(s)) for s in found])

    @app.get("/healthz", response_model=Health, tags=["operations"])
    async def healthz() -> Health:
        """Liveness: the process answers."""
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Readiness,
        responses={503: {"model": Readiness, "description": "A configured tier does not answer."}},
        tags=["operations"],
    )
    async def readyz() -> JSONResponse:
        """Readiness: every tier the spec configures (Redis, Parquet) answers, within a second (on its own thread:
        never behind queries)."""
        checks = dict.fromkeys(store.tiers(), False)
        with move_on_after(READY_TIMEOUT_S):
            checks = await to_thread.run_sync(store.ready, limiter=limiter("ready", 1), abandon_on_cancel=True)
        ready = all(checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    if access.metrics != "off":
        guard = [needs_token] if access.metrics == "token" else []

        @app.get(
            "/metrics",
            response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **DENIED},
            dependencies=guard,
            tags=["operations"],
        )
        async def prometheus() -> Response:
            """Prometheus metrics: queries by kind and status, latency, rows served, open streams, refusals."""
            return Response(metrics.exposition(), media_type=metrics.content_type)

    return app


def status_of(err: QueryError) -> int:
    """The HTTP status of a query error: that of the nearest of its types in `STATUSES`."""
    return next(STATUSES[kind] for kind in type(err).__mro__ if kind in STATUSES)


def check_bounds(bounds: Bounds, t_from: int, t_to: int, limit: int) -> None:
    """QueryTooLarge naming the parameter and its bound when a one-time query is larger than the proxy serves."""
    if t_to - t_from > bounds.max_span_ms:
        raise errors.QueryTooLarge(
            f"to: the span from..to is {t_to - t_from} ms; this proxy answers spans of at most "
            f"{bounds.max_span_ms} ms (query a longer span in several parts)",
        )
    if limit > bounds.max_limit:
        raise errors.QueryTooLarge(f"limit: {limit} is above this proxy's bound of {bounds.max_limit} rows a page")


def parse_query(
    store: ResultStore, task: str, where: list[str] | None, fields: str | None
) -> tuple[list[Any], list[str] | None]:
    """The conditions and the field list of a query, checked against the task's fields (QueryError when bad)."""
    known = store.fields(task)
    conditions = [parse_condition(text, known) for text in where or []]
    if fields is None:
        return conditions, None
    names = [name.strip() for name in fields.split(",")]
    bad = [name for name in names if name not in known]
    if bad or not names:
        raise errors.BadQuery(f"fields: {bad} not among the task's fields {sorted(known)}")
    return conditions, names
