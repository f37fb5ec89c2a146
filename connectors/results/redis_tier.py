"""Reading the Redis tier of a task's results consistently with its Parquet snapshots: the snapshot boundary and a
time span's chunks, in short paced calls.

The keys are the ones `connectors.redis.sink` writes (see its docstring). When Parquet snapshots are configured, the
Redis sink does not drop anything (RedisSink(trim=False)); instead, after a snapshot's manifest is committed, the
driver calls `connectors.redis.retention.advance_snapshot`, which records `snapshot` / `snapshot_batch` in the meta
hash and then drops the pieces that are both inside the snapshot (batch id <= its last batch) and wholly older than
the Redis retention (or the oldest beyond `max_bytes`, or, after Redis refused a batch for memory, all of them).
Hence the invariant readers rely on: Redis holds every result of every batch newer than the recorded
`snapshot_batch`, and the recorded snapshot's manifest exists. A one-time query reads the chunk entries of the span
in steps (`RedisSpan`: at most `SPAN_STEP` entries a Lua call, each with the recorded snapshot; a snapshot that
moves between steps, or a chunk dropped meanwhile, makes it read again: `SpanMoved`), then the chunks it needs,
one per call.

Redis lost (restarted without persistence, flushed) or full: the meta hash comes back without the snapshot marker,
and `since` names the first batch this database holds whole. Readers then never trust Redis for what it did not
see: a one-time query lets Parquet answer for every committed batch up to its last one (`fallback`), Redis for the
newer ones.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import redis

from windjoin.connectors.redis.damage import damaged, member_batch
from windjoin.connectors.redis.functions import fcall
from windjoin.connectors.redis.keys import index_key, meta_key, piece_key
from windjoin.connectors.redis.pieces import ChunkDamaged, ChunkEntry, decode_chunk
from windjoin.connectors.results.span_scan import Part
from windjoin.operators.query.fields import as_rows, table_rows
from windjoin.operators.result_table import result_times, row_bytes

T = TypeVar("T")
SPAN_STEP = 1000  # chunk entries per index step: a step holds Redis for well under a millisecond
# Redis' time to write a reply, per byte, after the script that made it (copies and socket writes): measured here
# ~0.2 ns (HGET of a 1 MiB field: 227 us of Redis CPU against 30 us for a tiny one); five times that, so that
# pacing errs on the side of the job's writes.
REPLY_S_PER_BYTE = 1e-9
# Redis' own CPU for a call beyond what its script measures (the request, entering Lua, the socket, the reply): a
# span scan of 200k members made 210 calls that took 144 ms of Redis CPU over 3 s (INFO cpu; 8 ms of it idle
# work), their scripts measured 103 ms: ~160 us a call (an EVAL of `return 1` alone costs ~40 us).
CALL_S = 160e-6
KEEP_CHUNKS = 4  # chunks a span read keeps (each about 1 MiB at most)


class SpanMoved(Exception):
    """The recorded snapshot changed between two steps of one read, or a chunk left meanwhile: read again."""


class Pace:
    """Keeps a process's span reads to at most `share` of Redis' time: one call at a time, each followed by a pause
    (the lock still held) so that the time Redis spent on the calls (as the scripts measured it, plus `CALL_S` a
    call) fills at most `share` of the wall time. A sink write that arrives meanwhile waits for at most one call,
    and only `share` of the time; a storm of queries slows itself, not the job."""

    def __init__(self, share: float) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"Redis read share {share!r} is not accepted (accepted: 0 < share <= 1)")
        self.share = share
        self._lock = threading.Lock()

    def call(self, read: Callable[[], tuple[T, float]]) -> T:
        """Run one call (returning its answer and the seconds Redis took), then pause as the share demands."""
        with self._lock:
            answer, redis_s = read()
            if self.share < 1:
                time.sleep((redis_s + CALL_S) * (1 / self.share - 1))
        return answer


@dataclass(frozen=True)
class Boundary:
    """What one span read goes by, from its first step: the recorded snapshot (None: none recorded) and the last
    committed batch (None: nothing committed)."""

    snapshot_id: int | None
    snapshot_batch: int | None
    committed: int | None


@dataclass
class _Step:
    boundary: Boundary
    lost: bool
    entries: list[ChunkEntry]
    done: bool  # the span has no entry after these


class RedisSpan:
    """The chunk entries of a task's committed results that may hold result times in [lower, upper], read in
    paced steps at one boundary (`boundary`, from the first step), and their chunks, each checked against its
    entry and the task's chunk schema (`pieces.chunk_schema`; None: the chunk's own): `Damaged` when one breaks
    it."""

    def __init__(
        self,
        client: redis.Redis,
        task: str,
        namespace: str,
        lower: int,
        upper: int,
        pace: Pace,
        schema: pa.Schema | None = None,
    ) -> None:
        self.client, self.task, self.namespace, self.pace, self.schema = client, task, namespace, pace, schema
        self.lower, self.upper = lower, upper
        self._keys = [index_key(task, namespace), meta_key(task, namespace)]
        self._resume: bytes | None = None
        self._recent: OrderedDict[ChunkEntry, bytes] = OrderedDict()  # the last chunks read: a page reads its
        self._first = self._step()  # winners' chunks again at the end, and they are most often the last ones
        self.boundary = self._first.boundary

    def _step(self) -> _Step:
        args = [self.lower, self.upper, self._resume or b"", SPAN_STEP]

        def read() -> tuple[Any, float]:
            reply = fcall(self.client, "windjoin_index_step", self._keys, args, read_only=True)
            return reply, reply[3] / 1e6

        (snapshot, snapshot_batch, committed, _), lost, members, _took = self.pace.call(read)
        boundary = Boundary(_int(snapshot), _int(snapshot_batch), _int(committed))
        if members:
            self._resume = members[-1]
        entries = []
        for member in members:
            try:
                entries.append(ChunkEntry.parse(member))
            except ChunkDamaged as err:
                raise damaged(self.task, member_batch(member), str(err)) from None
        return _Step(boundary, bool(lost), entries, len(members) < SPAN_STEP)

    def units(self, keep: Callable[[ChunkEntry], bool]) -> list[RedisChunk | RedisSteps]:
        """The span's chunks that `keep` accepts as `span_scan` units: the first step's, and a group for the rest."""
        return self._units(self._first, keep)

    def _units(self, step: _Step, keep: Callable[[ChunkEntry], bool]) -> list[RedisChunk | RedisSteps]:
        moved = (step.boundary.snapshot_id, step.boundary.snapshot_batch) != (
            self.boundary.snapshot_id,
            self.boundary.snapshot_batch,
        )
        if step.lost or moved:
            raise SpanMoved
        units: list[RedisChunk | RedisSteps] = [
            RedisChunk(e.min_time, self, e)
            for e in step.entries
            if keep(e) and e.min_time <= self.upper and e.max_time >= self.lower
        ]
        if not step.done:
            units.append(RedisSteps(step.entries[-1].min_time, self, keep))
        return units

    def chunk(self, entry: ChunkEntry) -> bytes:
        """A chunk's bytes; SpanMoved when its piece left meanwhile (retention, a snapshot that moved), `Damaged`
        when it is longer than its entry allows (then it is not sent). Paced by the time the script took plus what
        writing the reply costs Redis after it (`REPLY_S_PER_BYTE`). The last `KEEP_CHUNKS` chunks are kept, not
        read again."""
        if entry in self._recent:
            self._recent.move_to_end(entry)
            return self._recent[entry]
        key = piece_key(self.task, entry.batch, entry.piece, self.namespace)

        def read() -> tuple[Any, float]:
            reply = fcall(self.client, "windjoin_chunk", [key], [f"c{entry.seq}", entry.max_stored], read_only=True)
            return reply, reply[1] / 1e6 + len(reply[0] or b"") * REPLY_S_PER_BYTE

        data, _, size = self.pace.call(read)
        if data is None and int(size):
            raise damaged(self.task, entry.batch, f"a chunk of {int(size)} bytes, more than its entry allows")
        if data is None:
            raise SpanMoved
        self._recent[entry] = data
        if len(self._recent) > KEEP_CHUNKS:
            self._recent.popitem(last=False)
        return data


@dataclass
class RedisSteps:
    """The span's entries after those listed so far (a `span_scan` group: read when the scan reaches them)."""

    lower: int
    span: RedisSpan
    keep: Callable[[ChunkEntry], bool]

    def expand(self) -> list[RedisChunk | RedisSteps]:
        return self.span._units(self.span._step(), self.keep)


@dataclass
class RedisChunk:
    """One chunk (a `span_scan` leaf): read from Redis each time it is read."""

    lower: int
    span: RedisSpan
    entry: ChunkEntry

    def read(self, columns: Sequence[str], sized: Sequence[str] | None) -> Part:
        data = self.span.chunk(self.entry)
        try:
            table = decode_chunk(data, self.entry, self.span.schema)
        except ChunkDamaged as err:
            raise damaged(self.span.task, self.entry.batch, str(err)) from None
        rows = self.entry.first_row + np.arange(table.num_rows, dtype=np.int64)
        sizes = None if sized is None else row_bytes(table, list(sized))
        return Part(table.flatten().select(list(columns)), rows, sizes)


def read_all(client: redis.Redis, task: str, namespace: str, t_from: int, t_to: int) -> list[dict[str, Any]]:
    """Every committed row with result time in [t_from, t_to], in (result time, batch id, row) order, whole (for
    tests and tools; queries page with `result_query`)."""
    span = RedisSpan(client, task, namespace, t_from, t_to, Pace(1.0))
    committed = span.boundary.committed
    units = span.units(lambda entry: committed is not None and entry.batch <= committed)
    rows: list[dict[str, Any]] = []
    while units:
        unit = units.pop()
        if isinstance(unit, RedisSteps):
            units += unit.expand()
            continue
        table = decode_chunk(span.chunk(unit.entry), unit.entry)
        times = result_times(table)
        keep = np.flatnonzero((times >= t_from) & (times <= t_to))
        rows += as_rows(table_rows(table.take(keep), unit.entry.first_row + keep, times[keep]))
    rows.sort(key=lambda r: (r["result_time"], r["batch_id"], r["row"]))
    return rows


def _int(value: bytes | None) -> int | None:
    return None if value is None else int(value)
