"""The query proxy's routes: plain functions over the app's `ProxyState` (`proxy(request)`), each answering one
endpoint (the module docstring of `pipelines.proxy.app` lists them and how errors become statuses)."""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any

import orjson
from anyio import move_on_after, to_thread
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sse_starlette import EventSourceResponse

from windjoin.connectors.redis.damage import PREFIX as DAMAGED
from windjoin.connectors.results.result_query import MAX_LIMIT, ResultStore
from windjoin.operators.query import errors
from windjoin.operators.query.conditions import parse_condition
from windjoin.operators.query.cursors import MAX_TIME
from windjoin.pipelines.proxy.admitted import while_admitted
from windjoin.pipelines.proxy.config import Bounds
from windjoin.pipelines.proxy.feed import SLOW_CONSUMER, Chunk, Subscription
from windjoin.pipelines.proxy.models import (
    DENIED,
    ERRORS,
    MAX_TEXT,
    FieldList,
    Fields,
    Gone,
    Health,
    Readiness,
    ResultPage,
    SnapshotInfo,
    SnapshotList,
    TaskList,
    TaskName,
    Where,
)
from windjoin.pipelines.proxy.probes import IN_FLIGHT
from windjoin.pipelines.proxy.sse import StreamResponse
from windjoin.pipelines.proxy.state import ProxyState
from windjoin.pipelines.proxy.tokens import Client

DEFAULT_LIMIT = 1000
READY_TIMEOUT_S = 1.0  # a probe answers within this, ready or not
TOKEN_WITHDRAWN = "token revoked or expired"  # the end event of a stream whose token no longer admits it

router = APIRouter()
bearer = HTTPBearer(auto_error=False, description="A token of the proxy's tokens file.")


def proxy(request: Request) -> ProxyState:
    """The state of the app serving `request` (`create_app` puts it there)."""
    return request.app.state.proxy


async def caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Client:
    """The authenticated client, within its request rate."""
    return proxy(request).gate.caller(request, credentials)


Caller = Annotated[Client, Depends(caller)]


async def reader(request: Request, task: TaskName, client: Caller) -> Client:
    """The authenticated client, allowed to read the task."""
    proxy(request).gate.check_task(client, task)
    return client


Reader = Annotated[Client, Depends(reader)]


@router.get("/v1/tasks", response_model=TaskList, responses=DENIED, tags=["queries"])
async def tasks(request: Request, client: Caller) -> TaskList:
    """The tasks whose results can be queried with this token."""
    state = proxy(request)
    names = await state.answer(request, "tasks", state.store.tasks)
    return TaskList(tasks=[name for name in names if client.may_read(name)])


@router.get("/v1/tasks/{task}/fields", response_model=FieldList, responses=ERRORS, tags=["queries"])
async def fields(request: Request, task: TaskName, _: Reader) -> FieldList:
    """The fields of a task's results, usable in `where` and `fields`."""
    state = proxy(request)
    return FieldList(task=task, fields=await state.answer(request, "fields", lambda: state.store.fields(task)))


@router.get("/v1/tasks/{task}/results", response_model=ResultPage, responses=ERRORS, tags=["queries"])
async def results(
    request: Request,
    task: TaskName,
    _: Reader,
    t_from: Annotated[
        int, Query(alias="from", ge=-MAX_TIME, le=MAX_TIME, description="Span start: result time, epoch ms.")
    ],
    t_to: Annotated[int, Query(alias="to", ge=-MAX_TIME, le=MAX_TIME, description="Span end (inclusive): epoch ms.")],
    where: Where = None,
    fields: Fields = None,
    limit: Annotated[
        int, Query(ge=1, le=MAX_LIMIT, description="Rows per page (the proxy may set a lower bound).")
    ] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(max_length=MAX_TEXT, description="`next_cursor` of the previous page.")] = None,
) -> Response:
    """One-time query: the task's results with result time in [from, to], in (result_time, batch_id, row)
    order, recent ones from Redis and older ones from the latest Parquet snapshot, merged without duplicates."""
    state = proxy(request)

    def query() -> Any:
        check_bounds(state.bounds, t_from, t_to, limit)
        conditions, names = parse_query(state.store, task, where, fields)
        page = state.store.one_time(task, t_from, t_to, conditions, names, limit, cursor)
        body = {"rows": page.rows, "next_cursor": page.next_cursor, "snapshot_id": page.snapshot_id}
        return len(page.rows), orjson.dumps(body)  # encoded on the thread, not the event loop

    _, body = await state.answer(request, "results", query, lambda answered: answered[0])
    return Response(body, media_type="application/json")


@router.get(
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
    client: Reader,
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
) -> EventSourceResponse:
    """Continuous query: new results of the task matching `where`, in commit order, as server-sent events."""
    state = proxy(request)
    after = last_event_id or cursor

    def first() -> tuple[Subscription, Chunk]:
        """Validate everything and read the first page, so that a bad query is a 4xx, not a broken stream."""
        conditions, names = parse_query(state.store, task, where, fields)
        start_ms = None if after else t_from
        config = state.hub.config
        rows, next_cursor = state.store.follow_table(task, after, start_ms, config.page_rows, 0, config.read_bytes)
        start = after if after else (None if rows.num_rows else next_cursor)
        return Subscription(state.hub, task, start, conditions, names), Chunk(rows, next_cursor)

    lease = state.gate.stream(client)
    try:
        subscription, chunk = await state.answer(request, "stream", first)
    except BaseException:
        lease.release()
        raise

    async def events() -> AsyncIterator[dict[str, str] | bytes]:
        state.metrics.subscribers.inc()
        sent = after  # the cursor of the last event sent: where the client resumes
        try:
            async with (
                aclosing(subscription.events(chunk)) as stream_events,
                aclosing(while_admitted(stream_events, lambda: state.gate.admits(client))) as admitted,
            ):
                async for event in admitted:
                    if event is None:  # revoked, rotated or expired since the stream began
                        end = {"error": TOKEN_WITHDRAWN, "cursor": sent}
                        yield {"event": "end", "data": orjson.dumps(end).decode()}
                        return
                    kind, data = event
                    if kind == "results":
                        state.metrics.rows.labels("stream").inc(data.rows)
                        sent = data.cursor
                        yield data.frame
                    elif kind == "ready":
                        sent = data["cursor"]
                        yield {"event": "ready", "id": data["cursor"], "data": orjson.dumps(data).decode()}
                    else:
                        if data["error"] == SLOW_CONSUMER:
                            state.metrics.slow_consumers.inc()
                        if data["error"].startswith(DAMAGED):
                            state.metrics.damaged.labels("stream").inc()
                        yield {"event": "end", "data": orjson.dumps(data).decode()}
        finally:
            state.metrics.subscribers.dec()
            lease.release()

    body = events()
    weakref.finalize(body, lease.release)  # also when the response never starts iterating it
    return StreamResponse(body, ping=15, send_timeout=state.send_timeout_s)


@router.get("/v1/tasks/{task}/snapshots", response_model=SnapshotList, responses=ERRORS, tags=["queries"])
async def snapshots(request: Request, task: TaskName, _: Reader) -> SnapshotList:
    """The task's committed Parquet snapshots, ascending by id."""
    state = proxy(request)
    found = await state.answer(request, "snapshots", lambda: state.store.snapshots(task))
    return SnapshotList(task=task, snapshots=[SnapshotInfo(**vars(s)) for s in found])


@router.get("/healthz", response_model=Health, tags=["operations"])
async def healthz() -> Health:
    """Liveness: the process answers."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "A configured tier does not answer."}},
    tags=["operations"],
)
async def readyz(request: Request) -> JSONResponse:
    """Readiness: every tier the spec configures (Redis, Parquet) answers, within a second (on its own thread:
    never behind queries; not ready at once while as many probes as `probes.IN_FLIGHT` still wait on a store)."""
    state = proxy(request)
    checks = dict.fromkeys(state.store.tiers(), False)
    with move_on_after(READY_TIMEOUT_S):
        found = await to_thread.run_sync(
            state.probes.run, state.store.ready, limiter=state.limiter("ready", IN_FLIGHT), abandon_on_cancel=True
        )
        checks = checks if found is None else found
    ready = all(checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


metrics_router = APIRouter()  # included by `create_app` when the access settings serve /metrics


@metrics_router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **DENIED},
    tags=["operations"],
)
async def prometheus(request: Request) -> Response:
    """Prometheus metrics: queries by kind and status, latency, rows served, open streams, refusals."""
    metrics = proxy(request).metrics
    return Response(metrics.exposition(), media_type=metrics.content_type)


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
