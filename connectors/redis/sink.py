"""Keeping each task's recent results in Redis as pieces, written at most once per (task, batch id).

Data layout per task (key names: `connectors.redis.keys`; `ns:{T}:` is the task's prefix):

- `ns:{T}:piece:<batch>:<piece>` - hash, one slot's results of one batch: fields `c0`, `c1`, ... the piece's
  chunks (compressed Arrow IPC of bounded size, `redis.pieces`), then what describes them: `batch`, `emitted_at`,
  `rows`, `bytes` (the chunks' total), `max` (largest result time), `width` (widest chunk's time range),
  `chunks`, `index` (the chunks' entries, space-separated). The fields after the chunks are written last: a piece
  is staged once they are there.
- `ns:{T}:index` - sorted set of the committed chunks' entries
  (`batch:piece:seq:min:max:offset:rows:emitted_at:bytes`, `redis.pieces`), scored by their smallest result time:
  a time span's chunks are one range read from (from - width) to `to`.
- `ns:{T}:pieces` - sorted set of the committed pieces (`batch:piece`) scored by their largest result time: what
  retention walks (`redis.retention`).
- `ns:{T}:meta` - hash: `committed` (last committed batch id), `max_time` (largest result time seen), `since`
  (the batch of the first commit into this database: a Redis that restarted empty, was flushed, or refused a
  batch for memory holds the task's batches from there on), `bytes` and `rows` held, `width` (widest committed
  chunk), `dropped_upto` (newest batch retention dropped a piece of), `full_batches` (batches Redis refused for
  memory); with Parquet snapshots also `snapshot` / `snapshot_batch` (`connectors.redis.retention.advance_snapshot`).
- `ns:{T}:feed` - stream, the continuous-query feed: one entry per committed piece, id `<batch_id>-<piece + 1>`
  (commit order; a (batch, row) cursor maps onto entry ids), fields `emitted_at`, `rows`, `chunks`; readers take
  the rows from the piece hash. Capped with `MAXLEN ~ feed_batches * pieces`.
- `ns:{T}:staged` - set of the pieces staged and not committed yet (`batch:piece`), added before a piece's first
  write and removed by its commit: with `pieces`, what names every piece hash (`clear_task` needs no SCAN).
- `ns:{T}:owner` - hash: `run_id`, `checkpoint`, the checkpoint whose batches the task's keys hold
  (`sink_owner.CheckpointId`), set when a job claims the task (`pipelines.job.sink_fence`).

A result's `row` is `piece << 32 | position in the piece` (`result_table.piece_rows`), as in Parquet.

Two phases, exactly once. Stage (`stage`, each slot's task on an executor, per task and piece): nothing is done when
`committed` is the batch id (a replay) or the piece hash is already staged (an earlier attempt, which a replay
repeats exactly); else the chunks go in one pipelined HSET each (every call moves at most a chunk), then the
describing fields. Commit (`commit`, on the driver once every slot staged, one library function per task,
`connectors.redis.functions`): unless
`committed` is the batch id already (a replay), add each reported piece's entries to the index and the pieces set,
append it to the feed, and set `committed`, `max_time`, `bytes`, `rows`, `width` (and `since`). Readers go by the
index and the feed, so a staged piece is invisible until its batch commits, and an answer is a union of whole
committed batches. A batch id below `committed` is refused (`StaleBatchError`). Without Parquet (`trim=True`) the
sink then drops the pieces wholly older than `max_time - retain_ms` and the oldest beyond `max_bytes`; with Parquet
the snapshot committer does (`connectors.redis.retention.advance_snapshot`).

Redis full (maxmemory reached, `noeviction`): a slot whose piece Redis refuses removes what it wrote and marks the
batch refused in the task's meta hash (`refused`, a few bytes, allowed past maxmemory); the commit then leaves the
whole batch to Parquet as after a Redis loss (`since` moves past it, the snapshot marker goes, `full_batches`
counts it, a warning names it) and the snapshot committer's recovery snapshot empties Redis of every batch Parquet
holds. A commit Redis refuses for memory leaves its batch to Parquet alike (`windjoin_leave`: the commit itself is
not allowed past maxmemory, it adds index entries). Without Parquet, a refused piece or commit is an error naming
maxmemory and `max_bytes`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import redis

from windjoin.connectors.redis.client import RedisAuth, redis_client
from windjoin.connectors.redis.functions import fcall
from windjoin.connectors.redis.keys import (
    feed_key,
    index_key,
    meta_key,
    owner_key,
    piece_key,
    pieces_key,
    staged_key,
    task_keys,
)
from windjoin.connectors.redis.pieces import encode_piece
from windjoin.connectors.redis.retention import drop_pieces
from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE, check_namespace
from windjoin.operators.result_table import (
    EMITTED_AT,
    check_batch_id,
    check_identifier,
    check_piece,
    check_result_table,
    result_times,
)
from windjoin.operators.sink_owner import CheckpointId, OwnerRecordError, stale_batch

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 256 << 20


class RedisFullError(RuntimeError):
    """Redis refused a piece for memory and there is no Parquet tier to leave the batch to."""


class RedisSink:
    """The recent results of each task, in Redis as pieces, idempotent per (task, batch id); the last `retain_ms`
    (of result time) and at most about `max_bytes` of them are kept (see the module docstring)."""

    def __init__(
        self,
        url: str,
        retain_ms: int,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        socket_timeout: float = 60.0,
        trim: bool = True,
        feed_batches: int = 10_000,
        max_bytes: int = DEFAULT_MAX_BYTES,
        auth: RedisAuth | None = None,
    ) -> None:
        """`trim=False`: Parquet holds every batch, so the sink drops nothing itself (Parquet snapshots move results
        out, see `connectors.redis.retention.advance_snapshot`) and a batch Redis refuses for memory is left to
        Parquet;
        `feed_batches`: how many batches the continuous-query feed keeps (about: Redis trims whole stream nodes)."""
        for key, value in (("retain_ms", retain_ms), ("feed_batches", feed_batches), ("max_bytes", max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"sinks.redis.{key}: {value!r} is not accepted (accepted: a positive int)")
        self.retain_ms = retain_ms
        self.max_bytes = max_bytes
        self.trim = bool(trim)
        self.feed_batches = feed_batches
        self.namespace = check_namespace(namespace)
        # redis-py's default (5 s) is too short on a busy machine; the URL's `?socket_timeout=` still wins.
        self.url, self.socket_timeout, self.auth = url, socket_timeout, auth
        self.client = redis_client(url, auth, socket_timeout=socket_timeout)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled into the join's slots (they stage on the executors) without the client."""
        return {k: v for k, v in self.__dict__.items() if k != "client"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.client = _worker_client(self.url, self.socket_timeout, self.auth)

    def close(self) -> None:
        self.client.close()

    @property
    def name(self) -> str:
        """The sink (server and namespace, never credentials), for messages and metric labels."""
        return f"Redis {self._server()} namespace {self.namespace}"

    def location(self, task: str) -> str:
        """Where `task`'s results are, for messages."""
        return f"Redis {self._server()} keys {meta_key(task, self.namespace)[: -len('meta')]}*"

    def _server(self) -> str:
        kwargs = self.client.connection_pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
        return f"{where}/{kwargs.get('db', 0)}"

    def __enter__(self) -> RedisSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, batch_id: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Stage each task's result table for `batch_id` as piece 0 and commit it; returns rows written per task
        committed by this call (a task whose committed batch id is `batch_id` is skipped: a replay).
        StaleBatchError when one's is above it."""
        batch_id = check_batch_id(batch_id)
        for task, table in tables.items():
            check_identifier("task name", task)
            check_result_table(table, batch_id, task)
        self.stage(batch_id, 0, {task: table for task, table in tables.items() if table.num_rows})
        batch_max = {task: int(result_times(t).max()) for task, t in tables.items() if t.num_rows}
        pieces = {t: [0] if x.num_rows else [] for t, x in tables.items()}
        committed = self.commit(batch_id, pieces, batch_max=batch_max)
        return {task: tables[task].num_rows for task in committed}

    def stage(self, batch_id: int, piece: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Stage one slot's piece of `batch_id` per task (see the module docstring); returns rows staged per task
        by this call. Tasks of a committed batch, and pieces an earlier attempt staged, are left as they are."""
        batch_id, piece = check_batch_id(batch_id), check_piece(piece)
        staged = {}
        for task, table in tables.items():
            check_result_table(table, batch_id, task)
            if table.num_rows and self._stage(task, batch_id, piece, table):
                staged[task] = table.num_rows
        return staged

    def _stage(self, task: str, batch_id: int, piece: int, table: pa.Table) -> bool:
        key = piece_key(task, batch_id, piece, self.namespace)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hget(meta_key(task, self.namespace), "committed")
            pipe.hget(key, "chunks")
            committed, staged = pipe.execute()
        if committed is not None and int(committed) > batch_id:
            raise stale_batch(self.name, task, batch_id, int(committed))
        if (committed is not None and int(committed) == batch_id) or staged is not None:
            return False
        emitted_at = int(table.column(EMITTED_AT)[0].as_py())
        encoded = encode_piece(table, batch_id, piece, emitted_at)
        width = max(e.max_time - e.min_time for e in encoded.entries)
        described = {
            "batch": batch_id,
            "emitted_at": emitted_at,
            "rows": encoded.rows,
            "bytes": encoded.nbytes,
            "max": encoded.max_time,
            "width": width,
            "chunks": len(encoded.chunks),
            "index": " ".join(e.member() for e in encoded.entries),
        }
        try:
            with self.client.pipeline(transaction=False) as pipe:
                pipe.sadd(staged_key(task, self.namespace), f"{batch_id}:{piece}")  # first: clear_task finds it
                for seq, chunk in enumerate(encoded.chunks):
                    pipe.hset(key, f"c{seq}", chunk)
                pipe.hset(key, mapping=described)
                pipe.execute()
        except redis.exceptions.OutOfMemoryError as err:
            self._refused(task, batch_id, piece, err)
            return False
        return True

    def _refused(self, task: str, batch_id: int, piece: int, err: Exception) -> None:
        """Redis refused a piece for memory: mark its batch refused for the commit, or fail without Parquet."""
        self.client.unlink(piece_key(task, batch_id, piece, self.namespace))
        if self.trim:
            raise self._full(task, batch_id) from err
        fcall(self.client, "windjoin_refuse", [meta_key(task, self.namespace)], [batch_id])
        log.warning("%s: Redis is full (maxmemory): batch %d's piece is left to Parquet", self.location(task), batch_id)

    def _full(self, task: str, batch_id: int) -> RedisFullError:
        return RedisFullError(
            f"{self.location(task)}: Redis refused batch {batch_id}'s results: its maxmemory is reached and "
            f"there is no Parquet tier to leave them to; keep sinks.redis.max_bytes ({self.max_bytes}) well "
            "below Redis' maxmemory, or add sinks.parquet"
        )

    def commit(
        self,
        batch_id: int,
        pieces: Mapping[str, Sequence[int]],
        *,
        batch_max: Mapping[str, int],
        schemas: Mapping[str, pa.Schema] | None = None,
    ) -> list[str]:
        """Close `batch_id` for each task from its staged `pieces` (the slots that reported results), with the
        batch's largest result time per task that has rows (`batch_max`); returns the tasks committed by this
        call (`schemas` is for sinks that write empty batches out). A task whose committed batch id is `batch_id`
        is skipped (a replay); StaleBatchError when above.

        A reported piece that is not staged: when the task's commit record is gone too, Redis lost the task since
        the batch staged (restarted empty, flushed). The pieces left are dropped and the batch stays uncommitted
        here, so Redis holds whole batches only, from the next one on (`since`); the task counts as committed by
        this call, and a warning says so. A piece refused for memory leaves the batch to Parquet alike (see the
        module docstring). With the commit record there (keys evicted or deleted), RuntimeError: the batch is not
        closed."""
        batch_id = check_batch_id(batch_id)
        committed = []
        for task, slots in pieces.items():
            slots = sorted(check_piece(p) for p in slots)
            keys = [f(task, self.namespace) for f in (meta_key, index_key, pieces_key, feed_key, staged_key)]
            keys += [piece_key(task, batch_id, p, self.namespace) for p in slots]
            top = batch_max.get(task)
            kept = self.feed_batches * max(1, len(slots))  # about `feed_batches` batches of as many pieces
            args = [batch_id, "" if top is None else int(top), kept, *slots]
            try:
                reply = fcall(self.client, "windjoin_commit", keys, args)
            except redis.exceptions.OutOfMemoryError as err:  # the commit adds entries: left to Parquet
                if self.trim:
                    raise self._full(task, batch_id) from err
                reply = fcall(self.client, "windjoin_leave", keys, [batch_id, "", "", *slots])
            status = int(reply[0])
            if status == -1:
                raise stale_batch(self.name, task, batch_id, int(reply[1]))
            if status == -2:
                raise RuntimeError(
                    f"{self.location(task)}: batch {batch_id} cannot be committed, staged piece missing: "
                    f"{reply[1].decode()} while the commit record survived (keys evicted or deleted: run Redis "
                    "with maxmemory-policy noeviction)"
                )
            if status == -3:
                log.warning(
                    "%s: Redis lost batch %d's staged results (%s gone with the commit record: restarted empty or "
                    "flushed since the batch staged); Redis holds this task's batches from %d on, Parquet answers "
                    "for the earlier ones",
                    self.location(task),
                    batch_id,
                    reply[1].decode(),
                    batch_id + 1,
                )
            if status == -4:
                log.warning(
                    "%s: Redis is full (maxmemory): batch %d is left to Parquet (as after a Redis loss); Redis "
                    "holds this task's batches from %d on and gives up the older ones at the next snapshot",
                    self.location(task),
                    batch_id,
                    batch_id + 1,
                )
            if status == 1 and self.trim and reply[1] is not None:
                cutoff = int(reply[1]) - self.retain_ms
                drop_pieces(self.client, task, self.namespace, cutoff_ms=cutoff, max_bytes=self.max_bytes)
            if status != 0:
                committed.append(task)
        return committed

    def last_committed(self, task: str) -> int | None:
        """The last batch id committed for `task`, or None before its first batch."""
        value = self.client.hget(meta_key(task, self.namespace), "committed")
        return None if value is None else int(value)

    def owner(self, task: str) -> CheckpointId | None:
        """The checkpoint that claimed `task`'s keys, or None when none did."""
        key = owner_key(task, self.namespace)
        record = self.client.hgetall(key)
        if not record:
            return None
        try:
            return CheckpointId(record[b"run_id"].decode(), record[b"checkpoint"].decode())
        except (KeyError, ValueError) as err:
            raise OwnerRecordError(
                f"Redis key {key}: not an owner record ({err}); delete it to let a job claim the task"
            ) from None

    def holds_results(self, task: str) -> bool:
        """Whether `task` has anything committed (results, commit record, feed), whoever wrote it."""
        keys = (index_key(task, self.namespace), meta_key(task, self.namespace), feed_key(task, self.namespace))
        return bool(self.client.exists(*keys))

    def clear(self, task: str) -> None:
        """Delete every key of `task`: results, commit record (with its snapshot marker), feed, owner, pieces."""
        clear_task(self.client, task, self.namespace)

    def claim(self, task: str, checkpoint: CheckpointId) -> None:
        """Record `checkpoint` as the writer of `task`'s keys."""
        key = owner_key(task, self.namespace)
        with self.client.pipeline(transaction=True) as pipe:  # the old record or the new one, never a mix
            pipe.delete(key)
            pipe.hset(key, mapping={"run_id": checkpoint.run_id, "checkpoint": checkpoint.path})
            pipe.execute()

    def max_time(self, task: str) -> int | None:
        """The largest result time seen for `task` (the retention bound is this minus retain_ms)."""
        value = self.client.hget(meta_key(task, self.namespace), "max_time")
        return None if value is None else int(value)

    def count(self, task: str) -> int:
        """How many committed results of `task` Redis holds."""
        return int(self.client.hget(meta_key(task, self.namespace), "rows") or 0)

    def held_bytes(self, task: str) -> int:
        """The bytes of `task`'s committed chunks Redis holds."""
        return int(self.client.hget(meta_key(task, self.namespace), "bytes") or 0)


def clear_task(client: redis.Redis, task: str, namespace: str) -> None:
    """Delete every key of `task` in `namespace` (as a Redis restarted empty holds nothing of it): its fixed keys
    and the piece hashes its `pieces` and `staged` sets name (a piece is in one of them from its first write)."""
    with client.pipeline(transaction=False) as pipe:
        pipe.zrange(pieces_key(task, namespace), 0, -1)
        pipe.smembers(staged_key(task, namespace))
        committed, staged = pipe.execute()
    pieces = [piece_key(task, *map(int, m.split(b":")), namespace) for m in {*committed, *staged}]
    for start in range(0, len(pieces), 1000):
        client.unlink(*pieces[start : start + 1000])
    client.unlink(*task_keys(task, namespace))


# One client (and connection pool) per Redis per Python worker process, kept across batches.
_CLIENTS: dict[tuple[str, float, RedisAuth | None], redis.Redis] = {}  # per worker process, by server and user


def _worker_client(url: str, socket_timeout: float, auth: RedisAuth | None) -> redis.Redis:
    """One client per worker process and server (the password is read here, on the executor, from its file)."""
    key = (url, socket_timeout, auth)
    if key not in _CLIENTS:
        _CLIENTS[key] = redis_client(url, auth, socket_timeout=socket_timeout)
    return _CLIENTS[key]
