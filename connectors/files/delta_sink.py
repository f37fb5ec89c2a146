"""Writing result tables into one Delta Lake table (delta-rs, no JVM): the executors write the files, the driver
makes one Delta commit per batch carrying the checkpoint's run id and the batch id as its application transaction.

The table: `<path>` (a folder or an object store's URL, `result_files`; the log's store configured from the same
environment variables as the files', `storage_options`), partitioned by `task` (a string column, in the log only, as
Delta keeps partition values). Its columns are the union over the spec's tasks of their result tables' columns
(`result_table.result_schema`: one struct column per stream any task joins, in the spec's stream order; the window
columns when the window kind has them; `batch_id`, `emitted_at`): a task's rows hold null in the streams it does not
join. A stream's struct is the same in every task, so the union never conflicts. Readers select a task by the
partition column: `pl.scan_delta(path).filter(pl.col("task") == "eq")`.

Stage (`stage`, on an executor): each slot's piece of a task is written whole (locally: temporary file, fsync,
rename; on an object store: one request) to `task=<task>/batch-<batch_id>-part-<piece>-<run_id>.parquet` with the
table's columns. No reader sees it before a commit adds it. A file already there (an earlier attempt of the batch,
which a replay repeats exactly) is kept. The run id in the name keeps a new checkpoint's batch 0 off the names an
older run's versions still reference (time travel).
Commit (`commit`, on the driver, once every slot staged): one Delta commit of the batch's files (an `add` per
piece: size, the partition value, statistics from the file's footer: row count, min and max of int64 leaves) with
the application transaction `txn(appId=<run id>, version=<batch id>)`, also when the batch has no results: each
batch is one table version. Before it, the table's last transaction version for the run decides: equal, a replay
(nothing is committed, nothing twice); greater, `StaleBatchError`. A commit a concurrent writer beat (delta-rs'
conflict check) is re-read: committed meanwhile is a replay. A piece written by a killed attempt and never
committed (a replay that found fewer slots with results) is never referenced; `DeltaTable.vacuum` removes such
files, and those of versions older than its retention.

Owner (`sink_fence.OwnedSink`): the table property `windjoin.owner.<task>` (JSON: `run_id`, `checkpoint`) names the
checkpoint whose batches the task's rows are; a start's fence reads and claims it. Clearing a task (`--fresh-sinks`)
commits `remove` actions for its files: readers of the current version no longer see them, time travel still does,
vacuum deletes them past retention. A sink writes for the run the fence found or made owner of its tasks (kept in
the sink before it is pickled to the executors); a sink used without a fence has no run and refuses to write.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from windjoin.connectors.files.parquet_sink import dictionary_columns, group_rows
from windjoin.connectors.files.result_files import ResultFiles, result_files
from windjoin.operators.delta_sink_config import PATH_KEY
from windjoin.operators.result_table import check_batch_id, check_identifier, check_piece, check_result_table
from windjoin.operators.sink_owner import CheckpointId, OwnerRecordError, StaleBatchError

TASK_COLUMN = "task"
OWNER_PROPERTY = "windjoin.owner."  # + task name
CHECKPOINT_INTERVAL = 100  # delta.checkpointInterval's default: versions between the log's checkpoints
HTTP_ENDPOINTS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # what pyarrow's S3 reads; delta-rs wants allow_http


def table_schema(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """The table's columns (without the partition column) from the tasks' result schemas, in the order they come:
    each column once, where it first appears, without the schemas' metadata. ValueError naming a column two tasks
    type differently."""
    fields: dict[str, pa.Field] = {}
    for schema in schemas:
        for field in schema:
            known = fields.setdefault(field.name, field.remove_metadata())
            if not known.type.equals(field.type):
                raise ValueError(f"result column {field.name!r} is {known.type} in one task, {field.type} in another")
    return pa.schema(list(fields.values()))


def spec_table_schema(spec: Any) -> pa.Schema:
    """`table_schema` of the spec's tasks, columns of streams in the spec's stream order."""
    from windjoin.operators.result_table import result_schema

    schemas = [result_schema(spec, task.name) for task in spec.tasks]
    order = {name: i for i, name in enumerate(spec.streams)}
    union = table_schema(schemas)
    streams = sorted((f for f in union if f.name in order), key=lambda f: order[f.name])
    return pa.schema(streams + [f for f in union if f.name not in order])


def storage_options(url: str, environ: Mapping[str, str] = os.environ) -> dict[str, str] | None:
    """delta-rs' options for the table at `url`: None (its own reading of the environment), but for an S3 endpoint
    over plain http, which pyarrow accepts from AWS_ENDPOINT_URL and delta-rs only with allow_http."""
    if urlsplit(url).scheme not in ("s3", "s3a"):
        return None
    endpoint = next((environ[name] for name in HTTP_ENDPOINTS if environ.get(name)), "")
    return {"AWS_ALLOW_HTTP": "true"} if endpoint.startswith("http://") else None


def piece_name(task: str, batch_id: int, piece: int, run_id: str) -> str:
    """A piece's file, relative to the table (see the module docstring)."""
    task = check_identifier("task name", task)
    return f"{TASK_COLUMN}={task}/batch-{check_batch_id(batch_id)}-part-{check_piece(piece)}-{run_id}.parquet"


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with the table's columns in its order: null columns for streams the task does not join."""
    rows = table.num_rows
    columns = [table.column(f.name) if f.name in table.column_names else pa.nulls(rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def file_stats(metadata: pq.FileMetaData) -> dict[str, Any]:
    """Delta statistics of a Parquet file from its footer: numRecords, min and max of each int64 leaf over the row
    groups that hold values (a leaf without statistics in a row group with values gets none)."""
    lows: dict[str, int] = {}
    highs: dict[str, int] = {}
    unknown: set[str] = set()
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            path = column.path_in_schema
            if column.physical_type != "INT64" or column.statistics is None:
                unknown.add(path)
                continue
            stats = column.statistics
            if not stats.has_min_max:
                if stats.null_count != group.num_rows:
                    unknown.add(path)
                continue
            lows[path] = min(lows.get(path, stats.min), stats.min)
            highs[path] = max(highs.get(path, stats.max), stats.max)
    known = sorted(set(lows) - unknown)
    return {
        "numRecords": metadata.num_rows,
        "minValues": _nested({p: lows[p] for p in known}),
        "maxValues": _nested({p: highs[p] for p in known}),
    }


def _nested(flat: Mapping[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        *parents, leaf = path.split(".")
        node = out
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return out


class DeltaSink:
    """Result tables of `tasks` into one Delta table at `path`, partitioned by task; one commit per batch id,
    exactly once per (run, batch id)."""

    def __init__(self, path: str | os.PathLike[str], schema: pa.Schema, tasks: Sequence[str]) -> None:
        self.files: ResultFiles = result_files(path, PATH_KEY)
        self.uri = self.files.root if "://" not in self.files.url else self.files.url.rstrip("/")
        self.storage = storage_options(self.uri)
        self.schema = schema  # the table's columns without the partition column
        self.tasks = [check_identifier("task name", t) for t in tasks]
        self.runs: dict[str, str] = {}  # the run id per task, as the fence found or claimed it
        self._table: Any = None  # the DeltaTable, on the driver only (not pickled)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_table": None}

    @property
    def name(self) -> str:
        """The sink, for messages and metric labels."""
        return f"Delta {self.files.url}"

    def location(self, task: str) -> str:
        return f"Delta {self.files.url} ({TASK_COLUMN}={task})"

    def run_id(self) -> str:
        """The run this sink writes for (its tasks' owner); RuntimeError before a fence set it."""
        runs = {self.runs.get(task) for task in self.tasks}
        if len(runs) != 1 or None in runs:
            raise RuntimeError(
                f"{self.name}: no single checkpoint owns its tasks ({self.runs or 'none recorded'}); a job's start "
                "fences the sinks (claim) before writing"
            )
        [run] = runs
        return run

    # -- the executors' part

    def stage(self, batch_id: int, piece: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Write one slot's piece of `batch_id` per task (see the module docstring); returns rows written per task
        by this call. Pieces an earlier attempt wrote are kept; tables without rows are not written."""
        batch_id, run = check_batch_id(batch_id), self.run_id()
        staged = {}
        for task, table in tables.items():
            check_result_table(table, batch_id, task)
            if not table.num_rows:
                continue
            path = self.files.join(piece_name(task, batch_id, piece, run))
            if self.files.is_file(path):
                continue
            self.files.make_dir(path.rpartition("/")[0])
            full = conform(table, self.schema)
            self.files.write_parquet(
                path, full, row_group_size=group_rows(table), use_dictionary=dictionary_columns(full.schema)
            )
            staged[task] = table.num_rows
        return staged

    # -- the driver's part

    def commit(
        self,
        batch_id: int,
        pieces: Mapping[str, Collection[int]],
        *,
        schemas: Mapping[str, pa.Schema] | None = None,
        batch_max: Mapping[str, int] | None = None,
    ) -> list[str]:
        """One Delta commit of `batch_id`'s staged `pieces` (the slots that reported results per task); returns
        the tasks committed by this call: all of them, or none when the run's transaction holds the batch already
        (a replay). StaleBatchError below it; RuntimeError when a reported piece is missing."""
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import CommitProperties, PostCommitHookProperties, Transaction

        batch_id, run = check_batch_id(batch_id), self.run_id()
        table = self._open()
        table.update_incremental()
        if self._committed(table, run, batch_id):
            return []
        actions = [self._add(task, batch_id, p, run) for task, slots in pieces.items() for p in sorted(slots)]
        properties = CommitProperties(
            custom_metadata={"windjoin.run_id": run, "windjoin.batch_id": batch_id},
            app_transactions=[Transaction(app_id=run, version=batch_id)],
        )
        # Expired log entries are looked for only when the commit makes a checkpoint: looking lists the whole log,
        # which after every commit made a commit at 2,000 versions cost twice as much (measured, docs/streaming.md).
        interval = int(table.metadata().configuration.get("delta.checkpointInterval") or CHECKPOINT_INTERVAL)
        checkpoint = (table.version() + 1) % interval == 0
        hooks = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=None if checkpoint else False)
        try:
            table.create_write_transaction(
                actions,
                "append",
                self._delta_schema(),
                partition_by=[TASK_COLUMN],
                commit_properties=properties,
                post_commithook_properties=hooks,
            )
        except CommitFailedError:
            table.update_incremental()
            if self._committed(table, run, batch_id):  # a concurrent writer committed this batch: a replay
                return []
            raise
        return list(pieces)  # the table object stays at the version before: the next commit updates it first

    def _committed(self, table: Any, run: str, batch_id: int) -> bool:
        last = table.transaction_version(run)
        if last is not None and batch_id < last:
            raise StaleBatchError(
                f"{self.name}: batch {batch_id} is below the last committed batch {last} of run {run}; batch ids of "
                "one checkpoint only grow and a replay repeats the last batch, so another writer shares this table"
            )
        return last == batch_id

    def _add(self, task: str, batch_id: int, piece: int, run: str) -> Any:
        from deltalake.transaction import AddAction

        relative = piece_name(task, batch_id, piece, run)
        path = self.files.join(relative)
        info = self.files.info(path)
        if info.size is None:
            raise RuntimeError(f"{self.location(task)}: batch {batch_id} cannot be committed, piece {path} missing")
        stats = file_stats(self.files.read_metadata(path))
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else int(time.time() * 1000)
        return AddAction(relative, info.size, {TASK_COLUMN: task}, mtime, True, json.dumps(stats))

    def _delta_schema(self) -> pa.Schema:
        return self.schema.append(pa.field(TASK_COLUMN, pa.string()))

    def _exists(self) -> bool:
        from deltalake import DeltaTable

        return self._table is not None or DeltaTable.is_deltatable(self.uri, self.storage)

    def _open(self) -> Any:
        """The table, created when missing, its columns extended by this spec's new ones (once per process);
        ValueError naming a column the table types otherwise."""
        from deltalake import DeltaTable, Field, Schema

        if self._table is not None:
            return self._table
        table = DeltaTable.create(
            self.uri, self._delta_schema(), mode="ignore", partition_by=[TASK_COLUMN], storage_options=self.storage
        )
        if table.metadata().partition_columns != [TASK_COLUMN]:
            raise ValueError(
                f"{PATH_KEY}: the Delta table at {self.files.url} is partitioned by "
                f"{table.metadata().partition_columns}, not [{TASK_COLUMN!r}]: not a windjoin results table"
            )
        have = {f.name: f for f in table.schema().fields}
        wanted = Schema.from_arrow(self._delta_schema())
        missing = []
        for field in wanted.fields:
            known = have.get(field.name)
            if known is None:
                missing.append(Field(field.name, field.type, nullable=True))
            elif known.type != field.type:
                raise ValueError(
                    f"{PATH_KEY}: column {field.name!r} of the Delta table at {self.files.url} is {known.type}, the "
                    f"spec's results need {field.type}; write to a new table path (accepted: columns the spec adds)"
                )
        if missing:
            table.alter.add_columns(missing)
        self._table = table
        return table

    # -- the owner fence (sink_fence.OwnedSink)

    def owner(self, task: str) -> CheckpointId | None:
        """The checkpoint that claimed `task`'s rows, or None when none did (or no table is there)."""
        if not self._exists():
            return None
        table = self._open()
        key = OWNER_PROPERTY + check_identifier("task name", task)
        value = table.metadata().configuration.get(key)
        if value is None:
            return None
        try:
            record = json.loads(value)
            owner = CheckpointId(record["run_id"], record["checkpoint"])
        except (ValueError, TypeError, KeyError) as err:
            raise OwnerRecordError(
                f"{self.files.url}: table property {key} is not an owner record ({err}); unset it to let the next "
                "job claim the task"
            ) from None
        self.runs[task] = owner.run_id
        return owner

    def _task_files(self, task: str) -> list[tuple[str, int]]:
        """(path, size) of the files of `task` in the current version."""
        actions = pa.table(self._open().get_add_actions(flatten=True)).to_pydict()
        found = zip(actions["path"], actions["size_bytes"], actions[f"partition.{TASK_COLUMN}"], strict=True)
        return [(path, size) for path, size, value in found if value == task]

    def holds_results(self, task: str) -> bool:
        """Whether the current version holds rows of `task`, whoever wrote them."""
        return self._exists() and bool(self._task_files(task))

    def clear(self, task: str) -> None:
        """Remove `task`'s rows from the table (one commit of remove actions; the files stay for time travel)."""
        from deltalake.transaction import CommitProperties, RemoveAction

        self.runs.pop(task, None)
        if not self._exists():
            return
        now = int(time.time() * 1000)
        removes = [RemoveAction(p, True, now, size, {TASK_COLUMN: task}) for p, size in self._task_files(task)]
        if removes:
            table = self._open()
            table.create_write_transaction(
                removes,
                "append",
                self._delta_schema(),
                partition_by=[TASK_COLUMN],
                commit_properties=CommitProperties(custom_metadata={"windjoin.cleared": task}),
            )
            table.update_incremental()

    def claim(self, task: str, checkpoint: CheckpointId) -> None:
        """Record `checkpoint` as the writer of `task`'s rows (a table property, one commit)."""
        table = self._open()
        record = json.dumps({"run_id": checkpoint.run_id, "checkpoint": checkpoint.path})
        key = OWNER_PROPERTY + check_identifier("task name", task)
        table.alter.set_table_properties({key: record}, raise_if_not_exists=False)
        table.update_incremental()
        self.runs[task] = checkpoint.run_id
