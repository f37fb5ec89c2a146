"""The query proxy's request parameters and response bodies, as its OpenAPI description shows them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import BaseModel, Field

from windjoin.operators.spec import IDENTIFIER

MAX_CONDITIONS = 32
MAX_TEXT = 1000  # characters of one condition, of the field list, of a cursor


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
    502: {
        "model": Problem,
        "description": "Stored results cannot be read (a damaged Parquet file, a Redis chunk or index entry that "
        "breaks what it says): names the task and batch; none of its rows is served.",
    },
    503: {"model": Problem, "description": "The store (Redis or Parquet) cannot be reached."},
}
