"""Answering one-time and continuous queries over a task's results, across the Redis and Parquet tiers.

A result row has one shape everywhere: `{<A>: {ts: int, field: value, ...}, <B>: {...}, ..., "batch_id": int,
"row": int, "emitted_at": int, "result_time": int}`, one object per stream the task joins (two or more), in join
order; the result time is the latest of their timestamps. Selectable and
projectable names: `<stream>.<field>` (the stream's timestamp field included), `result_time`, `batch_id`,
`emitted_at`.

One-time queries (`ResultStore.one_time`) read, for result times [from, to]: the Redis view (the snapshot
recorded as the tier boundary and the members of batches newer than it, read in short paced steps at one
snapshot, see `redis_tier.read_span`) and the Parquet part, the batches covered by the snapshots up to that id
(files outside the span are pruned by the snapshots' result-time ranges, then row groups by their statistics, one
row group read at a time, see `parquet_scan`). Each part keeps at most one page of rows. Both parts are ordered
by (result_time, batch_id, row) and merged; a batch is in exactly one of them, so there is no duplicate and no gap
at the boundary. Paging: the cursor is the position (result_time, batch_id, row) of the last row served; the next
page starts strictly after it, which stays right when a snapshot moves rows from Redis to Parquet in between.
With one tier configured, it alone serves.

Continuous queries (`ResultStore.follow`) read the Redis feed, in commit order (batch_id, row), after a cursor.

Redis lost (restarted without persistence, flushed): Redis then records no snapshot marker. A one-time query does
not take that as "Redis holds everything": Parquet answers for every committed batch up to its last one, Redis for
the newer ones (recovering the marker is the job's: its snapshot committer re-marks the boundary at the next batch;
the query side cannot wait for a job that may be stopped, and must not write to either tier). A continuous query
whose cursor needs batches the feed does not hold (`redis_tier.feed_coverage`) gets 410 with a resume cursor
(`QueryError.cursor`) when Parquet still holds them: following with it reads those batches from Parquet in commit
order (`parquet_replay`), then hands over to the feed, so the subscriber misses nothing and sees nothing twice.

Every argument is validated before any I/O: task names against the spec (404), field names against the task's
result schema, the span, limits and cursors (400); a cursor older than the feed gets 410 (with a resume cursor
when Parquet holds what the feed lost).
"""

from __future__ import annotations

import base64
import binascii
import heapq
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson
import pyarrow as pa
import redis

from windjoin.connectors import parquet_scan, redis_tier
from windjoin.connectors.parquet_replay import ParquetReplay
from windjoin.connectors.parquet_scan import RESULT_TIME, ROW
from windjoin.connectors.parquet_sink import ParquetSink
from windjoin.connectors.redis_client import RedisAuth, redis_client
from windjoin.connectors.redis_sink import NAMESPACE, meta_key
from windjoin.operators.result_table import ARROW_TYPES, BATCH_ID, EMITTED_AT, PIECE_ROW_BITS, result_schema
from windjoin.connectors.snapshots import Snapshot, SnapshotStore
from windjoin.operators.spec import JoinSpec

MAX_LIMIT = 10_000
MAX_BLOCK_MS = 60_000
MAX_TIME = 2**53 - 1  # result times must survive a round trip through a double (Redis scores)
MAX_CONDITION_CHARS = 4096
MAX_IN_VALUES = 1000
_ATTEMPTS = 5
_VECTOR_ROWS = 32  # below this many rows a selection is evaluated row by row
# Condition values numpy compares exactly as Python does, per column kind: int64, float64, bool.
_EXACT: dict[str, Callable[[Any], bool]] = {
    "i": lambda v: type(v) is int and -(2**63) <= v < 2**63,
    "f": lambda v: type(v) is float or (type(v) is int and abs(v) <= 2**53),
    "b": lambda v: type(v) is bool,
}
_SPECIAL_FIELDS = {RESULT_TIME: "int", BATCH_ID: "int", EMITTED_AT: "int"}
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
OPS = (*_OPS, "in")
_CONDITION = re.compile(
    r"\s*(?P<field>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)"
    r"(?:\s*(?P<op><=|>=|!=|=|<|>)|\s+(?P<in>in)(?=\s|\Z))\s*(?P<value>.*?)\s*",
    re.DOTALL,
)
_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)")
# one value of an `in` list and what follows it: a comma (more values) or the end of the text
_IN_ITEM = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^,"\s](?:[^,"]*[^,"\s])?))\s*(?:(,)|\Z)', re.DOTALL)
_INT = re.compile(r"[+-]?[0-9]+")
_BOOLS = {"true": True, "false": False, "1": True, "0": False}


class _Moved(Exception):
    """The Redis boundary moved while a query was reading: read again."""


class QueryError(ValueError):
    """A query that cannot be answered: `status` 400 (bad argument), 404 (no such task or tier), 410 (gone), or
    503 (the tiers kept moving under the query, or Parquet has not committed a batch yet: retry). `cursor`: with
    410, the cursor that resumes a continuous query from Parquet (None when the results are gone from both)."""

    def __init__(self, status: int, message: str, cursor: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.cursor = cursor


@dataclass(frozen=True)
class Condition:
    """`field op value`; op one of "=", "!=", "<", "<=", ">", ">=", "in" (then value is a list)."""

    field: str
    op: str
    value: Any


@dataclass
class Page:
    """One page of a one-time query: rows in (result_time, batch_id, row) order, the cursor of the next page
    (None when this is the last), and the snapshot id the Parquet part was read at (None: Redis alone)."""

    rows: list[dict[str, Any]]
    next_cursor: str | None
    snapshot_id: int | None


_Keyed = list[tuple[tuple[int, int, int], dict[str, Any]]]  # rows with their (result_time, batch_id, row) keys


class _Scan(NamedTuple):
    """What one read of a one-time query takes: the task's rows with result time in [lower, upper] meeting every
    condition, strictly after the position `after` (None: from the start), the first `n` of them; `names`: the
    fields the answer keeps (None: whole rows)."""

    task: str
    lower: int
    upper: int
    conditions: list[Condition]
    after: tuple[int, ...] | None
    n: int
    names: list[str] | None = None


def parse_condition(text: str, fields: Mapping[str, str]) -> Condition:
    """A condition such as "R.k=5", "R.k>=5", "R.name!=abc", 'R.name="a b"', "R.k in 1,2,3", typed by `fields`
    (name -> "int" | "float" | "string" | "bool"). Strings may be unquoted (trimmed) or "quoted" (JSON escapes).

    Raises QueryError(400) naming the problem: unknown field, bad operator, value not of the field's type.
    """
    if not isinstance(text, str) or len(text) > MAX_CONDITION_CHARS:
        raise QueryError(400, f"where: a condition is a text of at most {MAX_CONDITION_CHARS} characters")
    match = _CONDITION.fullmatch(text)
    if match is None:
        name = _NAME.match(text) if isinstance(text, str) else None
        if name is not None and name.group(1) not in fields:
            raise _unknown_field("where", name.group(1), fields)
        raise QueryError(
            400,
            f"where: {text[:100]!r} is not a condition 'field op value' (op one of {list(OPS)}; "
            "e.g. 'R.k=5', 'R.k in 1,2,3', 'R.name=\"a b\"')",
        )
    field = match.group("field")
    if field not in fields:
        raise _unknown_field("where", field, fields)
    op = "in" if match.group("in") else match.group("op")
    raw = match.group("value")
    kind = fields[field]
    if op == "in":
        items = _split_in(raw, field) if raw.strip() else []
        if not items or len(items) > MAX_IN_VALUES:
            raise QueryError(400, f"where: {field} in ...: between 1 and {MAX_IN_VALUES} comma-separated values")
        return Condition(field, op, [_typed(field, kind, item, quoted) for item, quoted in items])
    quoted = len(raw) >= 2 and raw[0] == raw[-1] == '"'
    if quoted:
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise QueryError(400, f"where: {field}: {raw[:100]!r} is not a well-formed quoted string") from None
    return Condition(field, op, _typed(field, kind, raw, quoted))


def _split_in(raw: str, field: str) -> list[tuple[str, bool]]:
    """The values of an `in` list, strictly: `v1,v2,...`, each unquoted (no comma or quote in it, not empty) or a
    JSON-quoted string; anything else (an unterminated quote, text after a quote, an empty or trailing item) is a
    QueryError(400), never a shorter list."""
    items: list[tuple[str, bool]] = []
    pos = 0
    while True:
        match = _IN_ITEM.match(raw, pos)
        if match is None:
            near = raw[pos : pos + 20]
            raise QueryError(
                400,
                f"where: {field} in ...: malformed list at {near!r} (values are separated by commas; a value is "
                'unquoted, without commas or quotes, or "quoted")',
            )
        if match.group(1) is not None:
            try:
                items.append((orjson.loads(f'"{match.group(1)}"'), True))
            except orjson.JSONDecodeError:
                raise QueryError(400, f"where: {field} in ...: a badly quoted value") from None
        else:
            items.append((match.group(2), False))
        if not match.group(3):
            return items
        pos = match.end()


def _typed(field: str, kind: str, text: str, quoted: bool) -> Any:
    """The condition value `text` as a value of the field's type, or QueryError(400)."""
    accepted = {
        "int": "an integer",
        "float": "a finite number",
        "string": 'a string (unquoted or "quoted")',
        "bool": "true or false",
    }[kind]
    bad = QueryError(400, f"where: {field} (type {kind}): {str(text)[:100]!r} is not accepted (accepted: {accepted})")
    if kind == "string":
        return text
    if quoted:
        raise bad
    text = text.strip()
    if kind == "int":
        if not _INT.fullmatch(text) or not -(2**63) <= int(text) < 2**63:
            raise bad
        return int(text)
    if kind == "float":
        try:
            value = float(text)
        except ValueError:
            raise bad from None
        if not math.isfinite(value):
            raise bad
        return value
    if text.lower() not in _BOOLS:
        raise bad
    return _BOOLS[text.lower()]


def _unknown_field(param: str, name: str, fields: Mapping[str, str]) -> QueryError:
    return QueryError(400, f"{param}: unknown field {str(name)[:100]!r} (one of {list(fields)})")


def encode_cursor(parts: list[Any]) -> str:
    """An opaque cursor token for `[kind, task, *ints]` (kind "t": one-time, "f": continuous); see `decode_cursor`."""
    return base64.urlsafe_b64encode(orjson.dumps(parts)).rstrip(b"=").decode()


def decode_cursor(token: Any, kind: str, task: str, size: int, param: str = "cursor") -> list[int]:
    """The `size` integers of a cursor token made by `encode_cursor([kind, task, *ints])`, or QueryError(400)
    naming `param`."""
    query = "one-time" if kind == "t" else "continuous"
    message = f"{param}: not a cursor of a {query} query of task {task!r} (pass back a cursor this service returned)"
    bad = QueryError(400, message)
    if not isinstance(token, str) or not 0 < len(token) <= 200:
        raise bad
    try:
        parts = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    if (
        not isinstance(parts, list)
        or len(parts) != size + 2
        or parts[:2] != [kind, task]
        or not all(type(v) is int and abs(v) <= 2**63 for v in parts[2:])
    ):
        raise bad
    return parts[2:]


def feed_cursor(task: str, position: tuple[int, int] | None) -> str:
    """The continuous-query cursor of a feed position (batch_id, row), the one `ResultStore.follow` returns after
    that row; None is the start of the feed."""
    return encode_cursor(["f", task, *(position if position is not None else (-1, -1))])


def resume_cursor(task: str, position: tuple[int, int], upto: int) -> str:
    """The continuous-query cursor "after `position`, reading from Parquet up to batch `upto`, then the feed"."""
    return encode_cursor(["p", task, *position, upto])


def follow_position(token: Any, task: str) -> tuple[tuple[int, int], int | None]:
    """The (batch_id, row) position of a continuous-query cursor and, for a resume cursor, the last batch to read
    from Parquet (None for a feed cursor); QueryError(400) for anything else."""
    try:
        batch, row = decode_cursor(token, "f", task, 2)
        upto = None
    except QueryError:
        batch, row, upto = decode_cursor(token, "p", task, 3)
        if not -1 <= upto <= MAX_TIME:
            raise QueryError(400, "cursor: out of range (pass back a cursor this service returned)") from None
    if not (-1 <= batch <= MAX_TIME and -1 <= row <= redis_tier.FEED_END):
        raise QueryError(400, "cursor: out of range (pass back a cursor this service returned)")
    return (batch, row), upto


def cursor_like(cursor: str, task: str, position: tuple[int, int]) -> str:
    """A cursor at `position` of the same kind as `cursor` (a resume cursor keeps its Parquet bound)."""
    _, upto = follow_position(cursor, task)
    return feed_cursor(task, position) if upto is None else resume_cursor(task, position, upto)


class ResultStore:
    """Queries over the results of a spec's tasks, kept by its Redis sink (`redis_url`, `namespace`) and/or its
    Parquet sink with snapshots (`parquet_path`); either may be None, not both."""

    def __init__(
        self,
        spec: JoinSpec,
        redis_url: str | None,
        namespace: str,
        parquet_path: str | None,
        *,
        parquet_tail: bool = False,
        auth: RedisAuth | None = None,
        redis_share: float = 1.0,
    ) -> None:
        """`parquet_tail`: without Redis, one-time queries also read the committed batches no snapshot holds yet
        (a stand-in for an unreachable Redis; a Parquet-only store otherwise shows whole snapshots only).
        `redis_share`: the most of Redis' time this store's one-time queries take together (`redis_tier.Pace`)."""
        if redis_url is None and parquet_path is None:
            raise ValueError("a result store needs a Redis URL or a Parquet path (or both)")
        if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):
            raise ValueError(f"namespace {namespace!r} is not accepted (accepted: {NAMESPACE.pattern})")
        self.spec = spec
        self.namespace = namespace
        self._schemas = {task.name: result_schema(spec, task.name) for task in spec.tasks}
        self._fields = {name: _schema_fields(schema) for name, schema in self._schemas.items()}
        self.client = None if redis_url is None else redis_client(redis_url, auth, socket_timeout=30.0)
        # blocking feed reads wait up to MAX_BLOCK_MS: their own client, with a longer timeout
        self.feed_client = (
            None
            if redis_url is None
            else redis_client(redis_url, auth, socket_timeout=MAX_BLOCK_MS / 1000 + 30, socket_connect_timeout=10)
        )
        self.parquet_path = None if parquet_path is None else Path(parquet_path)
        self.snapshot_store = None if parquet_path is None else SnapshotStore(parquet_path)
        self._parquet = None if parquet_path is None else ParquetSink(parquet_path)
        self._replay = None if self._parquet is None else ParquetReplay(self._parquet, self.snapshot_store)
        self.parquet_tail = parquet_tail
        self._pace = redis_tier.Pace(redis_share)

    def close(self) -> None:
        for client in (self.client, self.feed_client):
            if client is not None:
                client.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- validation -------------------------------------------------------------------------------------------

    def tasks(self) -> list[str]:
        return [task.name for task in self.spec.tasks]

    def _task(self, task: Any) -> str:
        if not isinstance(task, str) or task not in self._schemas:
            raise QueryError(404, f"task: unknown task {str(task)[:100]!r} (one of {self.tasks()})")
        return task

    def fields(self, task: str) -> dict[str, str]:
        """Selectable and projectable names of the task's results and their types."""
        return dict(self._fields[self._task(task)])

    def _conditions(self, task: str, where: Sequence[Condition] | None) -> list[Condition]:
        fields = self._fields[task]
        checked = []
        for condition in where or []:
            if not isinstance(condition, Condition):
                raise QueryError(400, "where: conditions are made by parse_condition")
            if condition.field not in fields:
                raise _unknown_field("where", condition.field, fields)
            if condition.op not in OPS:
                raise QueryError(400, f"where: operator {str(condition.op)[:20]!r} is not one of {list(OPS)}")
            kind = fields[condition.field]
            values = condition.value if condition.op == "in" else [condition.value]
            if not isinstance(values, list) or (condition.op == "in" and not 0 < len(values) <= MAX_IN_VALUES):
                raise QueryError(400, f"where: {condition.field} in ...: a list of 1..{MAX_IN_VALUES} values")
            for value in values:
                if not _fits(value, kind):
                    raise QueryError(400, f"where: {condition.field} (type {kind}): {value!r} is not of that type")
            checked.append(condition)
        return checked

    def _projection(self, task: str, names: Sequence[str] | None) -> list[str] | None:
        if names is None:
            return None
        fields = self._fields[task]
        if isinstance(names, str) or not names:
            raise QueryError(400, f"fields: a non-empty list of field names (from {list(fields)})")
        for name in names:
            if name not in fields:
                raise _unknown_field("fields", name, fields)
        return list(dict.fromkeys(names))

    @staticmethod
    def _int(param: str, value: Any, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= value <= high:
            raise QueryError(400, f"{param}: {str(value)[:40]!r} is not an integer in {low}..{high}")
        return int(value)

    # -- one-time queries -------------------------------------------------------------------------------------

    def one_time(
        self,
        task: str,
        t_from: int,
        t_to: int,
        where: Sequence[Condition] | None = None,
        fields: Sequence[str] | None = None,
        limit: int = 1000,
        cursor: str | None = None,
    ) -> Page:
        """The task's results with result time in [t_from, t_to] matching every condition, in (result_time,
        batch_id, row) order, at most `limit`, after `cursor` (from a previous page of the same task)."""
        task = self._task(task)
        t_from = self._int("from", t_from, -MAX_TIME, MAX_TIME)
        t_to = self._int("to", t_to, -MAX_TIME, MAX_TIME)
        if t_from > t_to:
            raise QueryError(400, f"from: {t_from} is after to: {t_to} (a span needs from <= to)")
        conditions = self._conditions(task, where)
        projection = self._projection(task, fields)
        limit = self._int("limit", limit, 1, MAX_LIMIT)
        after = None if cursor is None else tuple(decode_cursor(cursor, "t", task, 3))
        if after is not None and not (
            abs(after[0]) <= MAX_TIME and 0 <= after[1] <= MAX_TIME and 0 <= after[2] <= MAX_TIME
        ):
            raise QueryError(400, "cursor: out of range (pass back a cursor this service returned)")
        lower, upper = _narrow(t_from, t_to, conditions)
        if after is not None:
            lower = max(lower, after[0])
        if lower > upper:
            return Page([], None, None)
        for attempt in range(_ATTEMPTS):
            try:
                keyed, snapshot_id = self._one_time_rows(
                    _Scan(task, lower, upper, conditions, after, limit + 1, projection)
                )
                break
            except (FileNotFoundError, _Moved):  # a snapshot moved or expired while being read: read again
                if attempt == _ATTEMPTS - 1:
                    raise QueryError(503, "the tiers kept changing during the query; retry") from None
        more = len(keyed) > limit
        keyed = keyed[:limit]
        next_cursor = encode_cursor(["t", task, *keyed[-1][0]]) if more else None
        return Page([project(row, projection) for _, row in keyed], next_cursor, snapshot_id)

    def _one_time_rows(self, scan: _Scan) -> tuple[_Keyed, int | None]:
        """The first `n` matching rows of both tiers with their (result_time, batch_id, row) keys, merged."""
        task, n = scan.task, scan.n
        parts = []
        fallback = None  # Parquet answers for every committed batch up to this one (no snapshot marker to go by)
        if self.client is not None:
            selected, snapshot_id, fallback = self._redis_rows(scan)
            parts.append(selected)
        else:
            assert self.snapshot_store is not None and self._parquet is not None
            latest = self.snapshot_store.latest(task)
            snapshot_id = None if latest is None else latest.id
            fallback = self._parquet.last_committed(task) if self.parquet_tail else None
        if fallback is not None:
            parts.append(self._parquet_rows(scan, None, fallback))
            latest = self.snapshot_store.latest(task) if self.snapshot_store is not None else None
            snapshot_id = None if latest is None else latest.id
        elif self.snapshot_store is not None and snapshot_id is not None:
            parts.append(self._parquet_rows(scan, snapshot_id))
        merged = list(heapq.merge(*parts, key=lambda item: item[0]))[:n]
        return merged, snapshot_id

    def _redis_rows(self, scan: _Scan) -> tuple[_Keyed, int | None, int | None]:
        """The first `n` matching rows Redis serves (batches after its recorded snapshot when Parquet is read too),
        that snapshot's id, and the fallback boundary used when Redis recorded none (see the module docstring).
        Redis is read in capped steps keeping at most `n` rows (`redis_tier.read_span`); if the recorded snapshot
        moves between steps, raises _Moved (the Parquet part must be read at one snapshot)."""
        assert self.client is not None
        task, lower, upper, conditions, after, n, _ = scan
        with_parquet = self.snapshot_store is not None
        fallback: int | None = None
        while True:
            try:
                view = redis_tier.read_span(
                    self.client,
                    task,
                    self.namespace,
                    lower,
                    upper,
                    boundary=with_parquet,
                    after=after,
                    limit=n,
                    fallback_batch=fallback,
                    select=lambda rows: select(rows, conditions),
                    pace=self._pace,
                )
            except redis_tier.SpanMoved:
                raise _Moved from None
            if with_parquet and view.snapshot_batch is None and fallback is None:
                assert self._parquet is not None
                fallback = self._parquet.last_committed(task)
                if fallback is not None:  # read again, leaving out the batches Parquet answers for
                    continue
            selected = [(_key(row), row) for row in view.rows]
            return selected, view.snapshot_id if with_parquet else None, fallback

    def _parquet_rows(self, scan: _Scan, snapshot_id: int | None, upto_batch: int | None = None) -> _Keyed:
        """The first `n` matching rows of the batches covered by snapshots <= `snapshot_id`, or, given
        `upto_batch`, of every retained committed batch up to it (snapshots then only prune), with their keys."""
        assert self.snapshot_store is not None and self._parquet is not None and self._replay is not None
        task, lower, upper, conditions, after, n, _ = scan

        def overlaps(s: Snapshot) -> bool:
            return (
                bool(s.rows)
                and s.min_time is not None
                and s.max_time is not None
                and (s.min_time <= upper and s.max_time >= lower)
            )

        if upto_batch is None:
            snapshots = [s for s in self.snapshot_store.list(task) if s.id <= snapshot_id and overlaps(s)]
            committed = set(self._parquet.committed_batches(task))
            batches = [b for s in snapshots for b in range(s.first_batch, s.last_batch + 1) if b in committed]
        else:
            pruned = {
                b
                for s in self.snapshot_store.list(task)
                if s.last_batch <= upto_batch and not overlaps(s)
                for b in range(s.first_batch, s.last_batch + 1)
            }
            batches = [b for b in self._replay.retained(task) if b <= upto_batch and b not in pruned]
        pieces = [(str(f), p << PIECE_ROW_BITS) for b in batches for p, f in self._parquet.batch_pieces(task, b)]
        files, row_starts = [f for f, _ in pieces], [start for _, start in pieces]
        return parquet_scan.first_rows(
            files, self._schemas[task], lower, upper, after, conditions, n, scan.names, row_starts
        )

    # -- continuous queries -----------------------------------------------------------------------------------

    def follow(
        self,
        task: str,
        after: str | None = None,
        from_ms: int | None = None,
        where: Sequence[Condition] | None = None,
        fields: Sequence[str] | None = None,
        count: int = 1000,
        block_ms: int = 0,
    ) -> tuple[list[dict[str, Any]], str]:
        """New results of the task in commit order (batch_id, row), matching every condition, at most `count`
        examined per call; and the cursor to pass back as `after` (it moves past rows the selection dropped).

        Start: after the cursor `after` when given (it wins over `from_ms`); else at the first batch emitted at or
        after `from_ms`; else "now" (after the last committed batch). Waits up to `block_ms` for a new batch.
        QueryError(410) when the feed does not hold rows after the cursor (or since `from_ms`): trimmed, or Redis
        lost them; its `cursor` resumes from Parquet when Parquet holds them (see the module docstring).
        """
        task = self._task(task)
        conditions = self._conditions(task, where)
        projection = self._projection(task, fields)
        count = self._int("count", count, 1, MAX_LIMIT)
        block_ms = self._int("block_ms", block_ms, 0, MAX_BLOCK_MS)
        position: tuple[int, int] | None
        upto = None
        if after is not None:
            position, upto = follow_position(after, task)
        elif from_ms is not None:
            from_ms = self._int("from", from_ms, -MAX_TIME, MAX_TIME)
        if self.feed_client is None:
            raise QueryError(404, "continuous queries need the Redis tier (sinks.redis), which is not configured")
        if upto is not None:
            assert position is not None
            rows, position, done = self._follow_parquet(task, position, upto, count)
            if rows or not done:
                cursor = feed_cursor(task, position) if done else resume_cursor(task, position, upto)
                return [project(row, projection) for row in select(rows, conditions)], cursor
        if after is not None:  # a feed cursor, or the end of a resume cursor's batches that had no rows
            self._check_feed(task, position)
        elif from_ms is not None:
            position = self._start_at(task, from_ms)
        else:
            position = self._now(task)
        needed = redis_tier.needed_batch(position)
        rows = redis_tier.read_feed(self.feed_client, task, self.namespace, position, count, block_ms or None)
        if rows and rows[0][BATCH_ID] > needed:  # skipped batches: empty ones, or lost while the read waited
            self._check_feed(task, position)
        if rows:
            position = (rows[-1][BATCH_ID], rows[-1][ROW])
        return [project(row, projection) for row in select(rows, conditions)], feed_cursor(task, position)

    def _now(self, task: str) -> tuple[int, int] | None:
        """After the last committed batch: Redis's, or Parquet's when Redis holds nothing of the task."""
        assert self.feed_client is not None
        committed = self.feed_client.hget(meta_key(task, self.namespace), "committed")
        if committed is None and self._parquet is not None:
            committed = self._parquet.last_committed(task)
        return None if committed is None else (int(committed), redis_tier.FEED_END)

    def _lost_upto(self, task: str, coverage: redis_tier.FeedCoverage) -> int | None:
        """The last batch the feed cannot serve (those after it, it holds all): from its coverage, or, when Redis
        holds nothing of the task, Parquet's last committed batch (None: nothing known to be missing)."""
        if coverage.serves_from is not None:
            return coverage.serves_from - 1
        if self._parquet is not None:
            return self._parquet.last_committed(task)
        return None

    def _check_feed(self, task: str, position: tuple[int, int] | None) -> None:
        """QueryError(410) when the feed does not hold every row after the cursor's position."""
        assert self.feed_client is not None
        coverage = redis_tier.feed_coverage(self.feed_client, task, self.namespace)
        needed = redis_tier.needed_batch(position)
        lost_upto = self._lost_upto(task, coverage)
        if coverage.committed is None and self._parquet is None:
            lost_upto = needed if position is not None and position[0] >= 0 else None  # it saw batches Redis lost
        if lost_upto is not None and needed <= lost_upto:
            start = (needed - 1, redis_tier.FEED_END) if position is None or position[0] < 0 else position
            raise self._gap(task, "cursor", "the results after this cursor", start, needed, lost_upto)

    def _start_at(self, task: str, from_ms: int) -> tuple[int, int] | None:
        """The feed position to follow from `from_ms` on; QueryError(410) when batches the feed does not hold may
        have been emitted since (with a resume cursor when Parquet holds them)."""
        assert self.feed_client is not None
        position, trimmed = redis_tier.feed_start_at(self.feed_client, task, self.namespace, from_ms)
        coverage = redis_tier.feed_coverage(self.feed_client, task, self.namespace)
        lost_upto = self._lost_upto(task, coverage)
        needed = redis_tier.needed_batch(position)
        first_held = redis_tier.feed_first_batch(self.feed_client, task, self.namespace)
        # batches before the feed's coverage matter only if no batch it holds was emitted before from_ms
        doubt = lost_upto is not None and lost_upto >= 0 and (first_held is None or first_held >= needed)
        if not (trimmed or doubt):
            return position
        start = None
        if self._replay is not None and lost_upto is not None:
            start = self._replay.first_emitted_at_or_after(task, from_ms, lost_upto + 1)
            if start is None:  # Parquet holds no batch the feed lacks emitted since from_ms: start after them
                return position if needed > lost_upto else (lost_upto, redis_tier.FEED_END)
        what = f"every batch emitted since {from_ms}"
        raise self._gap(task, "from", what, None if start is None else (start, -1), start, lost_upto)

    def _gap(
        self,
        task: str,
        param: str,
        what: str,
        start: tuple[int, int] | None,
        needed: int | None,
        lost_upto: int | None,
    ) -> QueryError:
        """The 410 of a continuous query the feed cannot serve: with the cursor reading `start`..`lost_upto` from
        Parquet when it holds them, else telling the client to re-query the span."""
        retained = [] if self._replay is None else self._replay.retained(task)
        if start is not None and needed is not None and lost_upto is not None and retained and retained[0] <= needed:
            return QueryError(
                410,
                f"{param}: the feed does not hold {what} (Redis restarted empty or trimmed its feed); follow with "
                f"the returned cursor to read batches {needed}..{lost_upto} from Parquet, then the feed",
                cursor=resume_cursor(task, start, lost_upto),
            )
        return QueryError(
            410,
            f"{param}: the feed no longer holds {what}; re-query the missed span with a one-time query, then "
            "follow from now",
        )

    def _follow_parquet(
        self, task: str, position: tuple[int, int], upto: int, count: int
    ) -> tuple[list[dict[str, Any]], tuple[int, int], bool]:
        """Rows after `position` of batches up to `upto`, from Parquet (a resume cursor), the position after them,
        and whether batch `upto` is read to its end (the feed takes over from there)."""
        if self._replay is None:
            raise QueryError(404, "cursor: resuming from Parquet needs the Parquet tier (sinks.parquet)")
        read = self._replay.rows_after(task, position, upto, count)
        if read is None:
            last = self._parquet.last_committed(task) if self._parquet is not None else None
            if last is None or last < upto:
                raise QueryError(503, f"cursor: Parquet has not committed batch {upto} of task {task!r} yet; retry")
            raise self._gap(task, "cursor", "the results after this cursor", None, None, None)
        rows, reached = read
        return rows, reached, reached[0] >= upto and reached[1] >= redis_tier.FEED_END

    # -- the rest ---------------------------------------------------------------------------------------------

    def snapshots(self, task: str) -> list[Snapshot]:
        """The task's retained Parquet snapshots, ascending id ([] without a Parquet tier)."""
        task = self._task(task)
        return [] if self.snapshot_store is None else self.snapshot_store.list(task)

    def ready(self) -> dict[str, bool]:
        """Whether each configured tier can be read: {"redis": ..., "parquet": ...} (configured tiers only)."""
        state = {}
        if self.client is not None:
            try:
                state["redis"] = bool(self.client.ping())
            except (redis.RedisError, OSError):
                state["redis"] = False
        if self.parquet_path is not None:
            state["parquet"] = self.parquet_path.is_dir()
        return state


def _schema_fields(schema: pa.Schema) -> dict[str, str]:
    kinds = {str(arrow): name for name, arrow in ARROW_TYPES.items()}
    fields = {}
    for stream, _ in _timestamps(schema):
        for child in schema.field(stream).type:
            fields[f"{stream}.{child.name}"] = kinds[str(child.type)]
    return {**fields, **_SPECIAL_FIELDS}


def _timestamps(schema: pa.Schema) -> list[tuple[str, str]]:
    return list(orjson.loads(schema.metadata[b"windjoin.timestamps"]).items())


def _narrow(t_from: int, t_to: int, conditions: list[Condition]) -> tuple[int, int]:
    """The span narrowed by conditions on result_time (it may come out empty: lower > upper)."""
    lower, upper = t_from, t_to
    for c in conditions:
        if c.field != RESULT_TIME:
            continue
        if c.op in (">=", "="):
            lower = max(lower, math.ceil(c.value))
        if c.op == ">":
            lower = max(lower, math.floor(c.value) + 1)
        if c.op in ("<=", "="):
            upper = min(upper, math.floor(c.value))
        if c.op == "<":
            upper = min(upper, math.ceil(c.value) - 1)
        if c.op == "in":
            lower, upper = max(lower, min(c.value)), min(upper, max(c.value))
    return lower, upper


def _fits(value: Any, kind: str) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int)
    if kind == "float":
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, str)


def _key(row: Mapping[str, Any]) -> tuple[int, int, int]:
    return (row[RESULT_TIME], row[BATCH_ID], row[ROW])


def _value(row: Mapping[str, Any], field: str) -> Any:
    stream, dot, name = field.partition(".")
    return row[stream][name] if dot else row[field]


def matches(row: Mapping[str, Any], condition: Condition) -> bool:
    """Whether a result row meets a condition (Python comparison of the row's value with the condition's)."""
    value = _value(row, condition.field)
    if condition.op == "in":
        return any(value == v for v in condition.value)
    return _OPS[condition.op](value, condition.value)


def select(rows: Sequence[dict[str, Any]], conditions: Sequence[Condition]) -> list[dict[str, Any]]:
    """The rows meeting every condition (exactly those `matches` keeps), in their order.

    A condition on a column of plain ints, floats or bools is evaluated with numpy over the column at once; any
    other (strings, nulls, values numpy would not compare exactly) row by row with `matches`, and only on the rows
    the conditions before it kept, as `all(matches(row, c) for c in conditions)` would."""
    if not conditions:
        return list(rows)
    if len(rows) < _VECTOR_ROWS:
        return [row for row in rows if all(matches(row, c) for c in conditions)]
    keep = np.ones(len(rows), dtype=bool)
    for condition in conditions:
        mask = _vector_mask(rows, condition)
        if mask is not None:
            keep &= mask
            continue
        for i in np.flatnonzero(keep).tolist():
            keep[i] = matches(rows[i], condition)
    return [rows[i] for i in np.flatnonzero(keep).tolist()]


def _vector_mask(rows: Sequence[dict[str, Any]], condition: Condition) -> np.ndarray | None:
    """`matches(row, condition)` for every row with numpy, or None where numpy would not compare exactly as Python
    does (a column that is not all int64, float64 or bool; a value not of the column's kind or beyond its exact
    range)."""
    stream, dot, name = condition.field.partition(".")
    values = [row[stream][name] for row in rows] if dot else [row[condition.field] for row in rows]
    column = np.array(values)
    kind = column.dtype.kind
    if kind not in _EXACT or column.ndim != 1:
        return None
    if kind == "f" and not all(type(v) is float for v in values):  # ints beyond 2**53 would round
        return None
    wanted = condition.value if condition.op == "in" else [condition.value]
    if not all(_EXACT[kind](v) for v in wanted):
        return None
    if condition.op == "in":
        return np.isin(column, np.array(wanted, dtype=column.dtype))
    return np.asarray(_OPS[condition.op](column, condition.value), dtype=bool)


def project(row: dict[str, Any], names: list[str] | None) -> dict[str, Any]:
    """The row with only the named fields (in `fields` notation, nested by stream), or the row itself for None."""
    if names is None:
        return row
    out: dict[str, Any] = {}
    for name in names:
        stream, dot, field = name.partition(".")
        if dot:
            out.setdefault(stream, {})[field] = row[stream][field]
        else:
            out[name] = row[name]
    return out
