"""Answering one-time and continuous queries over a task's results, across the Redis and Parquet tiers.

A result row has one shape everywhere: `{<A>: {ts: int, field: value, ...}, <B>: {...}, ..., "batch_id": int,
"row": int, "emitted_at": int, "result_time": int}`, one object per stream the task joins (two or more), in join
order; the result time is the latest of their timestamps. The query language (names, conditions, cursors, errors)
is `operators/query`; this module reads the tiers with it.

One-time queries (`ResultStore.one_time`) read, for result times [from, to], both tiers in one scan
(`span_scan`): Redis' chunks of the batches newer than its recorded snapshot (the index read in short paced steps
at one boundary, `connectors.results.redis_tier.RedisSpan`) and Parquet's row groups of the batches covered by the
snapshots up to that id (snapshots outside the span pruned by their result-time ranges, row groups by their statistics,
`parquet_scan`), in the order of the earliest result time each can hold. A batch is in exactly one tier, so there
is no duplicate and no gap at the boundary. A page holds at most `limit` rows and about `page_bytes` of them, and
reads for at most `time_budget_s`: then it answers the rows known to be first and a cursor from where it stopped.
Paging: the cursor is the position (result_time, batch_id, row) of the last row served (or, for a page the budget
ended before any row, of the last result time read whole); the next page starts strictly after it, which stays
right when a snapshot moves rows from Redis to Parquet in between. With one tier configured, it alone serves.

Continuous queries (`ResultStore.follow`) read the Redis feed, in commit order (batch_id, row), after a cursor:
the pieces its entries name, a chunk at a time (`connectors.redis.feed`).

Redis lost (restarted without persistence, flushed): Redis then records no snapshot marker. A one-time query does
not take that as "Redis holds everything": Parquet answers for every committed batch up to its last one, Redis for
the newer ones (recovering the marker is the job's: its snapshot committer re-marks the boundary at the next batch;
the query side cannot wait for a job that may be stopped, and must not write to either tier). A continuous query
whose cursor needs batches the feed does not hold (`connectors.redis.feed.feed_coverage`) gets `Gone` with a resume
cursor (`Gone.cursor`) when Parquet still holds them: following with it reads those batches from Parquet in commit
order (`parquet_replay`), then hands over to the feed, so the subscriber misses nothing and sees nothing twice.

Every argument is validated before any I/O: task names against the spec (`NotFound`), field names against the
task's result schema, the span, limits and cursors (`BadQuery`; cursors are signed by the store's `CursorCodec`,
so a cursor it did not return is refused before it names any position); a cursor older than the feed gets `Gone`
(with a resume cursor when Parquet holds what the feed lost). The errors are typed (`operators/query/errors.py`);
the proxy maps them to HTTP statuses.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from windjoin.connectors.files.result_layout import ResultLayout
from windjoin.connectors.files.snapshots import Snapshot, SnapshotStore
from windjoin.connectors.redis import feed as redis_feed
from windjoin.connectors.redis.client import RedisAuth, redis_client, spec_auth
from windjoin.connectors.redis.damage import damaged
from windjoin.connectors.redis.keys import meta_key
from windjoin.connectors.redis.pieces import ChunkEntry, chunk_schema
from windjoin.connectors.results import redis_tier, span_scan
from windjoin.connectors.results.parquet_replay import ParquetReplay
from windjoin.connectors.results.parquet_scan import EARLIEST, Batches
from windjoin.connectors.results.span_scan import Found
from windjoin.operators.query.conditions import Condition, check_conditions
from windjoin.operators.query.cursors import FEED_END, MAX_TIME, CursorCodec, needed_batch
from windjoin.operators.query.errors import BadQuery, Gone, NotFound, TryAgain
from windjoin.operators.query.fields import (
    as_rows,
    check_projection,
    project,
    project_table,
    result_fields,
    row_position,
)
from windjoin.operators.query.selection import narrow_span, select_table
from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE, check_namespace
from windjoin.operators.result_table import WINDOW_COLUMNS, result_schema, stream_timestamps
from windjoin.operators.spec import JoinSpec

MAX_LIMIT = 10_000
MAX_PAGE_BYTES = 8 << 20  # bytes of row values a page holds at most (about: the first row always fits)
MAX_BLOCK_MS = 60_000
_ATTEMPTS = 5
DEFAULT_CALL_S = 30.0  # how long one Redis call may block a query without a time budget


@dataclass
class Page:
    """One page of a one-time query: rows in (result_time, batch_id, row) order, the cursor of the next page
    (None when this is the last), and the snapshot id the Parquet part was read at (None: Redis alone)."""

    rows: list[dict[str, Any]]
    next_cursor: str | None
    snapshot_id: int | None


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
        page_bytes: int = MAX_PAGE_BYTES,
        time_budget_s: float | None = None,
        cursors: CursorCodec | None = None,
    ) -> None:
        """`parquet_tail`: without Redis, one-time queries also read the committed batches no snapshot holds yet
        (a stand-in for an unreachable Redis; a Parquet-only store otherwise shows whole snapshots only).
        `redis_share`: the most of Redis' time this store's one-time queries take together
        (`connectors.results.redis_tier.Pace`);
        `page_bytes`: the bytes of row values a page holds at most (the first row always fits); `time_budget_s`:
        how long one page reads before it answers with what it knows (None: until done); `cursors`: signs the
        cursors it returns and checks those it is given (None: a random key, so its cursors read back with this
        store only; a service whose cursors outlive it, or go to another replica, passes one with a shared key)."""
        if redis_url is None and parquet_path is None:
            raise ValueError("a result store needs a Redis URL or a Parquet path (or both)")
        check_namespace(namespace)
        self.spec = spec
        self.namespace = namespace
        self._schemas = {task.name: result_schema(spec, task.name) for task in spec.tasks}
        self._fields = {name: result_fields(schema) for name, schema in self._schemas.items()}
        self._chunks = {name: chunk_schema(schema) for name, schema in self._schemas.items()}
        self._stamps = {
            name: [f"{stream}.{ts}" for stream, ts in stream_timestamps(schema).items()]
            for name, schema in self._schemas.items()
        }
        self.page_bytes, self.time_budget_s = page_bytes, time_budget_s
        self.cursors = cursors if cursors is not None else CursorCodec.random()
        # a Redis that stalls fails a query within its budget: one call blocks at most the budget, never retried
        call_s = DEFAULT_CALL_S if time_budget_s is None else time_budget_s
        once = Retry(NoBackoff(), 0)
        self.client = (
            None
            if redis_url is None
            else redis_client(redis_url, auth, socket_timeout=call_s, socket_connect_timeout=call_s, retry=once)
        )
        # blocking feed reads wait up to MAX_BLOCK_MS: their own client, with a longer timeout
        self.feed_client = (
            None
            if redis_url is None
            else redis_client(redis_url, auth, socket_timeout=MAX_BLOCK_MS / 1000 + 30, socket_connect_timeout=10)
        )
        # readiness probes: their own connections, answered within a second or counted as not ready
        self._probe = (
            None
            if redis_url is None
            else redis_client(redis_url, auth, socket_timeout=1.0, socket_connect_timeout=1.0, retry=once)
        )
        self._parquet = None if parquet_path is None else ResultLayout(parquet_path)
        self.snapshot_store = None if parquet_path is None else SnapshotStore(parquet_path)
        self._replay = None if self._parquet is None else ParquetReplay(self._parquet, self.snapshot_store)
        self.parquet_tail = parquet_tail
        self._pace = redis_tier.Pace(redis_share)

    @classmethod
    def from_spec(
        cls, spec: JoinSpec, namespace: str = DEFAULT_NAMESPACE, redis_share: float = 1.0, **options: Any
    ) -> ResultStore:
        """The store over the sinks the spec configures (Redis, Parquet, or both); ValueError when it has neither.
        `options`: the constructor's keywords (page_bytes, time_budget_s, cursors)."""
        redis, parquet = spec.sinks.redis, spec.sinks.parquet
        if redis is None and parquet is None:
            raise ValueError("no queryable sink in the spec (sinks.redis or sinks.parquet): nothing to query")
        return cls(
            spec,
            None if redis is None else redis.url,
            namespace,
            None if parquet is None else parquet.path,
            auth=spec_auth(redis),
            redis_share=redis_share,
            **options,
        )

    def close(self) -> None:
        for client in (self.client, self.feed_client, self._probe):
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
            raise NotFound(f"task: unknown task {str(task)[:100]!r} (one of {self.tasks()})")
        return task

    def fields(self, task: str) -> dict[str, str]:
        """Selectable and projectable names of the task's results and their types."""
        return dict(self._fields[self._task(task)])

    def _conditions(self, task: str, where: Sequence[Condition] | None) -> list[Condition]:
        return check_conditions(where, self._fields[task])

    def _projection(self, task: str, names: Sequence[str] | None) -> list[str] | None:
        return check_projection(names, self._fields[task])

    @staticmethod
    def _int(param: str, value: Any, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= value <= high:
            raise BadQuery(f"{param}: {str(value)[:40]!r} is not an integer in {low}..{high}")
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
        batch_id, row) order, at most `limit` and about `page_bytes` of them, after `cursor` (from a previous page
        of the same task). With a time budget, a read that reaches it returns the rows known to be first so far
        (maybe none) and a cursor from where the rest is read."""
        task = self._task(task)
        t_from = self._int("from", t_from, -MAX_TIME, MAX_TIME)
        t_to = self._int("to", t_to, -MAX_TIME, MAX_TIME)
        if t_from > t_to:
            raise BadQuery(f"from: {t_from} is after to: {t_to} (a span needs from <= to)")
        conditions = self._conditions(task, where)
        projection = self._projection(task, fields)
        limit = self._int("limit", limit, 1, MAX_LIMIT)
        after = None if cursor is None else self.cursors.page_position(cursor, task)
        lower, upper = narrow_span(t_from, t_to, conditions)
        if after is not None:
            lower = max(lower, after[0])
        if lower > upper:
            return Page([], None, None)
        deadline = None if self.time_budget_s is None else time.monotonic() + self.time_budget_s
        span = span_scan.Span(
            self._stamps[task],
            lower,
            upper,
            after,
            conditions,
            limit + 1,
            self.page_bytes,
            self._leaves(task, projection),
        )
        for attempt in range(_ATTEMPTS):
            try:
                found, snapshot_id = self._one_time_rows(task, span, deadline)
                break
            except (FileNotFoundError, redis_tier.SpanMoved):  # a snapshot moved or expired while being read
                if attempt == _ATTEMPTS - 1 or (deadline is not None and time.monotonic() > deadline):
                    raise TryAgain("the tiers kept changing during the query; retry") from None
        keyed = found.keyed[:limit]
        more = len(found.keyed) > limit or found.cut or found.frontier is not None
        if not more:
            next_cursor = None
        elif keyed:
            next_cursor = self.cursors.page_cursor(task, keyed[-1][0])
        else:  # the budget ran out before any row: every row before the frontier was read, and none matched
            assert found.frontier is not None
            next_cursor = self.cursors.page_cursor(task, (found.frontier - 1, MAX_TIME, MAX_TIME))
        return Page([project(row, projection) for _, row in keyed], next_cursor, snapshot_id)

    def _leaves(self, task: str, projection: list[str] | None) -> list[str]:
        """The leaves a page's rows hold (`stream.field`, and the window columns of a task that has them): the
        projected ones, each stream's timestamp with them."""
        every = [name for name in self._fields[task] if "." in name or name in WINDOW_COLUMNS]
        if projection is None:
            return every
        return [name for name in every if name in projection or name in self._stamps[task]]

    def _one_time_rows(self, task: str, span: span_scan.Span, deadline: float | None) -> tuple[Found, int | None]:
        """The first rows of both tiers in one scan (`span_scan`), and the snapshot the Parquet part is read at."""
        units: list[Any] = []
        snapshot_id = None
        fallback = None  # Parquet answers for every committed batch up to this one (no snapshot marker to go by)
        with_parquet = self.snapshot_store is not None
        if self.client is not None:
            redis_span = redis_tier.RedisSpan(
                self.client, task, self.namespace, span.lower, span.upper, self._pace, self._chunks[task]
            )
            boundary = redis_span.boundary
            below = boundary.snapshot_batch if with_parquet else None
            if with_parquet and below is None:
                assert self._parquet is not None
                fallback = below = self._parquet.last_committed(task)
            committed = boundary.committed

            def keep(entry: ChunkEntry) -> bool:
                # chunks of batches committed after the first step are left out: one consistent view
                return committed is not None and entry.batch <= committed and (below is None or entry.batch > below)

            units += redis_span.units(keep)
            snapshot_id = boundary.snapshot_id if with_parquet else None
        elif self.snapshot_store is not None:
            latest = self.snapshot_store.latest(task)
            snapshot_id = None if latest is None else latest.id
            fallback = self._parquet.last_committed(task) if self.parquet_tail and self._parquet else None
        if fallback is not None:
            units += self._parquet_units(task, span, None, fallback)
            latest = self.snapshot_store.latest(task) if self.snapshot_store is not None else None
            snapshot_id = None if latest is None else latest.id
        elif with_parquet and snapshot_id is not None:
            units += self._parquet_units(task, span, snapshot_id)
        return span_scan.first_rows(units, span, deadline), snapshot_id

    def _parquet_units(
        self, task: str, span: span_scan.Span, snapshot_id: int | None, upto_batch: int | None = None
    ) -> list[Batches]:
        """The batches covered by snapshots <= `snapshot_id`, or, given `upto_batch`, every retained committed batch
        up to it (snapshots then only prune), as scan units: one per snapshot overlapping the span, one for the
        batches no snapshot holds."""
        assert self.snapshot_store is not None and self._parquet is not None and self._replay is not None
        schema, bounds = self._schemas[task], (span.lower, span.upper)

        def overlaps(s: Snapshot) -> bool:
            times = (s.min_time, s.max_time)
            return bool(s.rows) and None not in times and s.min_time <= span.upper and s.max_time >= span.lower

        snapshots = self.snapshot_store.list(task)
        if upto_batch is None:
            snapshots = [s for s in snapshots if s.id <= snapshot_id]
            committed = set(self._parquet.committed_batches(task))
        else:
            snapshots = [s for s in snapshots if s.last_batch <= upto_batch]
            committed = {b for b in self._replay.retained(task) if b <= upto_batch}
        # a snapshot's batches by bisection of the committed ones, never by walking its range: a manifest may say
        # last_batch 2e8 (one query ran 4.3 s over its 1 s budget in that walk)
        ordered, units = sorted(committed), []
        for s in snapshots:
            held = ordered[bisect.bisect_left(ordered, s.first_batch) : bisect.bisect_right(ordered, s.last_batch)]
            committed.difference_update(held)
            if overlaps(s):
                units.append(Batches(s.min_time, self._replay.footers, task, held, schema, bounds))
        if upto_batch is not None and committed:  # batches no snapshot holds yet
            units.append(Batches(EARLIEST, self._replay.footers, task, sorted(committed), schema, bounds))
        return units

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
        max_bytes: int | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """New results of the task in commit order (batch_id, row), matching every condition, at most `count` and
        about `max_bytes` of row values (None: `page_bytes`) examined per call; and the cursor to pass back as
        `after` (it moves past rows the selection dropped).

        Start: after the cursor `after` when given (it wins over `from_ms`); else at the first batch emitted at or
        after `from_ms`; else "now" (after the last committed batch). Waits up to `block_ms` for a new batch.
        Gone when the feed does not hold rows after the cursor (or since `from_ms`): trimmed, or Redis
        lost them; its `cursor` resumes from Parquet when Parquet holds them (see the module docstring).
        """
        task = self._task(task)
        conditions = self._conditions(task, where)
        projection = self._projection(task, fields)
        rows, cursor = self.follow_table(task, after, from_ms, count, block_ms, max_bytes)
        return as_rows(project_table(select_table(rows, conditions), projection)), cursor

    def follow_table(
        self,
        task: str,
        after: str | None = None,
        from_ms: int | None = None,
        count: int = 1000,
        block_ms: int = 0,
        max_bytes: int | None = None,
    ) -> tuple[pa.Table, str]:
        """The rows `follow` reads, all of them, as a rows table (`fields.rows_table`), and the cursor after them:
        for the query proxy's feed, which selects, projects and encodes them a column at a time."""
        task = self._task(task)
        count = self._int("count", count, 1, MAX_LIMIT)
        block_ms = self._int("block_ms", block_ms, 0, MAX_BLOCK_MS)
        position: tuple[int, int] | None
        upto = None
        if after is not None:
            position, upto = self.cursors.follow_position(after, task)
        elif from_ms is not None:
            from_ms = self._int("from", from_ms, -MAX_TIME, MAX_TIME)
        if self.feed_client is None:
            raise NotFound("continuous queries need the Redis tier (sinks.redis), which is not configured")
        if upto is not None:
            assert position is not None
            rows, position, done = self._follow_parquet(task, position, upto, count, max_bytes or self.page_bytes)
            if rows.num_rows or not done:
                cursor = (
                    self.cursors.feed_cursor(task, position)
                    if done
                    else self.cursors.resume_cursor(task, position, upto)
                )
                return rows, cursor
        if after is not None:  # a feed cursor, or the end of a resume cursor's batches that had no rows
            self._check_feed(task, position)
        elif from_ms is not None:
            position = self._start_at(task, from_ms)
        else:
            position = self._now(task)
        needed = needed_batch(position)
        rows = self._read_feed(task, position, count, block_ms or None, max_bytes or self.page_bytes)
        if rows.num_rows and row_position(rows, 0)[0] > needed:  # skipped batches: empty ones, or lost meanwhile
            self._check_feed(task, position)
        if rows.num_rows:
            position = row_position(rows, -1)
        return rows, self.cursors.feed_cursor(task, position)

    def _read_feed(
        self, task: str, position: tuple[int, int] | None, count: int, block_ms: int | None, max_bytes: int
    ) -> pa.Table:
        """The feed's rows after `position`; Gone (or TryAgain) when a piece it names left Redis meanwhile, Damaged
        with the cursor past it when the next piece breaks its entries."""
        assert self.feed_client is not None
        try:
            return redis_feed.read_feed(
                self.feed_client, task, self.namespace, position, count, block_ms, max_bytes, self._chunks[task]
            )
        except redis_feed.PieceDamaged as err:
            cursor = None if err.after is None else self.cursors.feed_cursor(task, err.after)
            raise damaged(task, err.batch, f"piece {err.piece}: {err}", cursor) from None
        except redis_feed.PieceGone:
            self._check_feed(task, position)
            raise TryAgain("the feed moved while it was read; retry") from None

    def _now(self, task: str) -> tuple[int, int] | None:
        """After the last committed batch: Redis's, or Parquet's when Redis holds nothing of the task."""
        assert self.feed_client is not None
        committed = self.feed_client.hget(meta_key(task, self.namespace), "committed")
        if committed is None and self._parquet is not None:
            committed = self._parquet.last_committed(task)
        return None if committed is None else (int(committed), FEED_END)

    def _lost_upto(self, task: str, coverage: redis_feed.FeedCoverage) -> int | None:
        """The last batch the feed cannot serve (those after it, it holds all): from its coverage, or, when Redis
        holds nothing of the task, Parquet's last committed batch (None: nothing known to be missing)."""
        if coverage.serves_from is not None:
            return coverage.serves_from - 1
        if self._parquet is not None:
            return self._parquet.last_committed(task)
        return None

    def _check_feed(self, task: str, position: tuple[int, int] | None) -> None:
        """Gone when the feed does not hold every row after the cursor's position."""
        assert self.feed_client is not None
        coverage = redis_feed.feed_coverage(self.feed_client, task, self.namespace)
        needed = needed_batch(position)
        lost_upto = self._lost_upto(task, coverage)
        if coverage.committed is None and self._parquet is None:
            lost_upto = needed if position is not None and position[0] >= 0 else None  # it saw batches Redis lost
        if lost_upto is not None and needed <= lost_upto:
            start = (needed - 1, FEED_END) if position is None or position[0] < 0 else position
            raise self._gap(task, "cursor", "the results after this cursor", start, needed, lost_upto)

    def _start_at(self, task: str, from_ms: int) -> tuple[int, int] | None:
        """The feed position to follow from `from_ms` on; Gone when batches the feed does not hold may
        have been emitted since (with a resume cursor when Parquet holds them)."""
        assert self.feed_client is not None
        position, trimmed = redis_feed.feed_start_at(self.feed_client, task, self.namespace, from_ms)
        coverage = redis_feed.feed_coverage(self.feed_client, task, self.namespace)
        lost_upto = self._lost_upto(task, coverage)
        needed = needed_batch(position)
        first_held = redis_feed.feed_first_batch(self.feed_client, task, self.namespace)
        # batches before the feed's coverage matter only if no batch it holds was emitted before from_ms
        doubt = lost_upto is not None and lost_upto >= 0 and (first_held is None or first_held >= needed)
        if not (trimmed or doubt):
            return position
        start = None
        if self._replay is not None and lost_upto is not None:
            start = self._replay.first_emitted_at_or_after(task, from_ms, lost_upto + 1)
            if start is None:  # Parquet holds no batch the feed lacks emitted since from_ms: start after them
                return position if needed > lost_upto else (lost_upto, FEED_END)
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
    ) -> Gone:
        """The Gone of a continuous query the feed cannot serve: with the cursor reading `start`..`lost_upto` from
        Parquet when it holds them, else telling the client to re-query the span."""
        retained = [] if self._replay is None else self._replay.retained(task)
        if start is not None and needed is not None and lost_upto is not None and retained and retained[0] <= needed:
            return Gone(
                f"{param}: the feed does not hold {what} (Redis restarted empty or trimmed its feed); follow with "
                f"the returned cursor to read batches {needed}..{lost_upto} from Parquet, then the feed",
                cursor=self.cursors.resume_cursor(task, start, lost_upto),
            )
        return Gone(
            f"{param}: the feed no longer holds {what}; re-query the missed span with a one-time query, then "
            "follow from now",
        )

    def _follow_parquet(
        self, task: str, position: tuple[int, int], upto: int, count: int, max_bytes: int
    ) -> tuple[pa.Table, tuple[int, int], bool]:
        """Rows after `position` of batches up to `upto` (a rows table), from Parquet (a resume cursor), the position
        after them, and whether batch `upto` is read to its end (the feed takes over from there)."""
        if self._replay is None:
            raise NotFound("cursor: resuming from Parquet needs the Parquet tier (sinks.parquet)")
        last = self._parquet.last_committed(task) if self._parquet is not None else None
        if last is None or last < upto:
            self._check_committed(task, upto)  # before reading: a made-up cursor reads nothing
        read = self._replay.rows_after(task, position, upto, count, max_bytes)
        if read is None:
            if last is None or last < upto:
                raise TryAgain(f"cursor: Parquet has not committed batch {upto} of task {task!r} yet; retry")
            raise self._gap(task, "cursor", "the results after this cursor", None, None, None)
        rows, reached = read
        return rows, reached, reached[0] >= upto and reached[1] >= FEED_END

    def _check_committed(self, task: str, upto: int) -> None:
        """BadQuery when a resume cursor's last batch is past every batch Redis committed: this service bounds them by
        a committed batch (and signs them), so such a cursor is not this Redis' (another deployment's with the same
        cursor key, or a Redis restored from an older copy), and retrying it would never help. Redis without the task
        (restarted empty) cannot tell: then Parquet may be behind, and the caller retries."""
        assert self.feed_client is not None
        committed = self.feed_client.hget(meta_key(task, self.namespace), "committed")
        if committed is not None and int(committed) < upto:
            raise BadQuery(
                f"cursor: batch {upto} of task {task!r} was never committed (pass back a cursor this service returned)"
            )

    # -- the rest ---------------------------------------------------------------------------------------------

    def snapshots(self, task: str) -> list[Snapshot]:
        """The task's retained Parquet snapshots, ascending id ([] without a Parquet tier)."""
        task = self._task(task)
        return [] if self.snapshot_store is None else self.snapshot_store.list(task)

    def tiers(self) -> list[str]:
        """The configured tiers: "redis", "parquet" or both."""
        return [name for name, on in (("redis", self._probe), ("parquet", self._parquet)) if on is not None]

    def ready(self) -> dict[str, bool]:
        """Whether each configured tier can be read: {"redis": ..., "parquet": ...} (configured tiers only); a
        Redis that does not answer within a second is not ready."""
        state = {}
        if self._probe is not None:
            try:
                state["redis"] = bool(self._probe.ping())
            except (redis.RedisError, OSError):
                state["redis"] = False
        if self._parquet is not None:
            state["parquet"] = self._parquet.files.reachable()
        return state
