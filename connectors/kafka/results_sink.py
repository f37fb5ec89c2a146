"""Writing result rows to a Kafka topic, exactly once for `read_committed` consumers (on a broker that keeps
transactions: Apache Kafka; at least once on Tansu, which does not, see docs/streaming.md).

Records (`result_records`): one per result row of every task, into `topic` (one topic for all tasks): the row's
fields as in Parquet (JSON or Confluent-framed Avro), the task in the header `windjoin.task`, the result time as
the record timestamp, the task's equality key as the key (null for tasks over streams without keys), partitioned
by murmur2 of the key as Java clients do (`partitioner: murmur2_random`).

Exactly once, with the executors writing (no results pass through the driver):

- Stage (each slot's task on an executor, per task and piece): a transactional producer per (run, task, piece),
  `transactional.id` = the piece's consumer group `windjoin-results.<topic>.<task>@<run id>.<piece>`, writes the
  piece's records and, in the same transaction, commits that group's offset on partition 0 of `topic` to
  `batch_id + 1` (`send_offsets_to_transaction`, as Kafka Streams records its input offsets). Before writing, the
  group's committed offset is read (stable: an open transaction's offsets are waited for): at `batch_id + 1` the
  piece is written already (an earlier attempt, or the batch before a restart) and is skipped; above it,
  `StaleBatchError`. Producers are kept per worker process; a new producer's `init_transactions` fences any
  earlier producer of the same piece (an older attempt, a zombie executor) and aborts its open transaction.
- Visible: a piece is visible to `read_committed` consumers when its transaction commits, during staging, before
  the driver's commit and before Spark commits the batch. It can no longer be taken back then, because the only
  thing that can follow is a replay of the same batch (Spark replays the last planned batch after a crash, never
  an older one; the owner fence keeps other checkpoints out), and a replay reproduces the same pieces: the same
  offsets, control epoch and marks from the checkpoint, the same deterministic order (`output_order`, each slot
  sorting its own piece) - and it does not write them again anyway: the piece's record says it is written. What
  a replay cannot reproduce is a changed spec: a restart with a different window, lateness or tasks while a
  batch is in flight writes the rest of that batch with the new spec beside the pieces already written with the
  old one (Parquet and Redis keep only whole batches of one attempt: a spec change there takes effect at the
  next batch).
- Commit (the driver, once every slot staged): nothing becomes visible; it records the batch as committed per
  task in the ledger group `windjoin-results.<topic>.<task>@<run id>` (offset on partition 0 = batch + 1), so
  that a replay of a committed batch is reported as one and a batch below it refused, as by the other sinks.
- Owner (`pipelines.job.sink_fence`): the run id in the groups' names says which checkpoint writes the task (its
  path is kept in the ledger's offset metadata where the broker keeps metadata; Tansu does not). `clear` deletes
  the task's groups (a fresh start then writes its batches from 0 under its own run id); records already in the
  topic stay there: a topic is a log, and consumers saw them.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from windjoin.connectors.kafka.result_records import json_values, record_keys, record_timestamps
from windjoin.connectors.kafka.security import PLAINTEXT, KafkaSecurity
from windjoin.operators.result_table import check_batch_id, check_piece, check_result_table
from windjoin.operators.sink_owner import CheckpointId, OwnerRecordError, stale_batch

log = logging.getLogger(__name__)

GROUP_PREFIX = "windjoin-results"
TASK_HEADER = "windjoin.task"
UNKNOWN_PATH = "(path not kept: the broker keeps no offset metadata)"
_RETRIABLE = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.UNSTABLE_OFFSET_COMMIT,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TRANSPORT,
}
# The producer's batching for rate: large batches, lz4, a short linger (a piece is flushed by its commit anyway).
PRODUCER_SETTINGS: dict[str, object] = {
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "partitioner": "murmur2_random",
    "queue.buffering.max.kbytes": 1_048_576,
}

Encoder = Callable[[pa.Table], list[bytes]]


@dataclass(frozen=True)
class KafkaTarget:
    """Where and how the pieces are written (picklable: the password is read on the process that connects)."""

    bootstrap: str
    topic: str
    security: KafkaSecurity = PLAINTEXT
    queue_records: int = 1_000_000
    timeout_s: float = 60.0

    def client_config(self) -> dict[str, object]:
        return {"bootstrap.servers": self.bootstrap, **self.security.client_config()}


def task_prefix(topic: str, task: str) -> str:
    """The start of every consumer group of `task`'s results in `topic` (ledger and pieces, every run)."""
    return f"{GROUP_PREFIX}.{topic}.{task}@"


def ledger_group(topic: str, task: str, run_id: str) -> str:
    """The group recording the batches the driver committed for `task` in run `run_id`."""
    return f"{task_prefix(topic, task)}{run_id}"


def piece_group(topic: str, task: str, run_id: str, piece: int) -> str:
    """The group (and transactional id) recording which batch `piece` of `task` was last written in `run_id`."""
    return f"{ledger_group(topic, task, run_id)}.{check_piece(piece)}"


def _retrying(what: str, call: Callable[[], Any], timeout_s: float) -> Any:
    """`call()`, asked again while the broker answers with a retriable error (a coordinator moving or loading,
    an unstable offset: a transaction still open), until `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as err:
            error = err.args[0]
            if error.code() not in _RETRIABLE or time.monotonic() > deadline:
                log.warning("%s: %s", what, error)
                raise
        time.sleep(0.1)


class PieceWriter:
    """The transactional producer of one (run, task, piece), with the consumer that reads its group's offset."""

    def __init__(self, target: KafkaTarget, group: str) -> None:
        self.target, self.group = target, group
        config = target.client_config()
        self.producer = Producer(
            {
                **config,
                **PRODUCER_SETTINGS,
                "transactional.id": group,
                "queue.buffering.max.messages": target.queue_records,
                "transaction.timeout.ms": int(target.timeout_s * 1000),
            }
        )
        self.consumer = Consumer(
            {**config, "group.id": group, "isolation.level": "read_committed", "enable.auto.commit": False}
        )
        _retrying(f"init_transactions of {group}", lambda: self.producer.init_transactions(target.timeout_s), 60)

    def written(self) -> int | None:
        """The batch this piece was last written for (stable: waits for an open transaction), or None."""
        tp = TopicPartition(self.target.topic, 0)
        [found] = _retrying(
            f"committed offset of {self.group}", lambda: self.consumer.committed([tp], self.target.timeout_s), 60
        )
        return found.offset - 1 if found.offset > 0 else None

    def write(
        self,
        batch_id: int,
        values: Sequence[bytes],
        keys: Sequence[bytes] | None,
        timestamps: Sequence[int],
        headers: list[tuple[str, bytes]],
    ) -> None:
        """The records and the piece's record of `batch_id`, in one transaction."""
        producer, topic, timeout = self.producer, self.target.topic, self.target.timeout_s
        producer.begin_transaction()
        try:
            produce = producer.produce
            i, n = 0, len(values)
            while i < n:  # records by index, so that a full queue resumes where it stopped
                try:
                    if keys is None:
                        while i < n:
                            produce(topic, values[i], None, timestamp=timestamps[i], headers=headers)
                            i += 1
                    else:
                        while i < n:
                            produce(topic, values[i], keys[i], timestamp=timestamps[i], headers=headers)
                            i += 1
                except BufferError:  # the local queue is full: let deliveries drain
                    producer.poll(0.05)
            marker = [TopicPartition(topic, 0, batch_id + 1)]
            producer.send_offsets_to_transaction(marker, self.consumer.consumer_group_metadata(), timeout)
            producer.commit_transaction(timeout)
        except KafkaException as err:
            if err.args[0].txn_requires_abort():
                producer.abort_transaction(timeout)
            raise

    def close(self) -> None:
        """Close both clients (a fenced producer's close raises: it has nothing left to abort)."""
        self.consumer.close()
        self.producer.purge()
        with contextlib.suppress(KafkaException):
            self.producer.close()


# One writer per (target, piece group) per Python worker process, kept across batches (an init costs ~0.1-1 s).
_WRITERS: dict[tuple[KafkaTarget, str], PieceWriter] = {}


def _writer(target: KafkaTarget, group: str) -> PieceWriter:
    key = (target, group)
    if key not in _WRITERS:
        _WRITERS[key] = PieceWriter(target, group)
    return _WRITERS[key]


def _drop_writer(target: KafkaTarget, group: str) -> None:
    writer = _WRITERS.pop((target, group), None)
    if writer is not None:
        try:
            writer.close()
        except Exception:  # noqa: BLE001 - a fenced or broken client: nothing to keep
            log.debug("closing %s failed", group, exc_info=True)


def close_writers() -> None:
    """Close this process's piece writers (tests, tools: a writer left open blocks the interpreter's exit once its
    broker is gone)."""
    for target, group in list(_WRITERS):
        _drop_writer(target, group)


class KafkaResultsSink:
    """Each task's result rows as records of `topic`, exactly once per (task, batch id) for `read_committed`
    consumers (see the module docstring). `bootstrap` None: the job's broker, bound by `bind_broker`."""

    def __init__(
        self,
        topic: str,
        bootstrap: str | None = None,
        *,
        security: KafkaSecurity = PLAINTEXT,
        keys: Mapping[str, Mapping[str, str] | None] | None = None,
        encoders: Mapping[str, Encoder] | None = None,
        queue_records: int = 1_000_000,
        timeout_s: float = 60.0,
    ) -> None:
        """`keys`: per task the `{stream: key field}` its keys come from (`result_records.key_fields`; a task
        missing: no key); `encoders`: per task the values' encoder (a task missing: JSON)."""
        self.topic, self.bootstrap, self.security = topic, bootstrap, security
        self.keys = dict(keys or {})
        self.encoders = dict(encoders or {})
        self.queue_records, self.timeout_s = queue_records, timeout_s
        self._runs: dict[str, str] = {}  # run id per task, from the owner fence (pickled to the executors)
        self._meta: dict[str, str] = {}  # the ledger's metadata per task: the owner record
        self._admin: AdminClient | None = None
        self._last: dict[str, int | None] = {}  # the ledger's last committed batch per task, on the driver

    def __getstate__(self) -> dict[str, Any]:
        """Pickled into the slots without the driver's client."""
        return {**self.__dict__, "_admin": None, "_last": {}}

    def bind_broker(self, bootstrap: str) -> None:
        """Use the job's broker when the spec names none."""
        if self.bootstrap is None:
            self.bootstrap = bootstrap

    @property
    def name(self) -> str:
        return f"Kafka {self.bootstrap} topic {self.topic}"

    def location(self, task: str) -> str:
        return (
            f"Kafka {self.bootstrap} topic {self.topic} task {task} (consumer groups {task_prefix(self.topic, task)}*)"
        )

    def _target(self) -> KafkaTarget:
        if self.bootstrap is None:
            raise RuntimeError(
                f"Kafka sink of topic {self.topic}: no broker (sinks.kafka.bootstrap, or the job's own via bind_broker)"
            )
        return KafkaTarget(self.bootstrap, self.topic, self.security, self.queue_records, self.timeout_s)

    # --- the executors' side -----------------------------------------------------------------------------------

    def stage(self, batch_id: int, piece: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Write one slot's piece of `batch_id` per task, each in its own transaction (see the module docstring);
        returns rows written per task by this call (a piece written before is skipped)."""
        batch_id, piece = check_batch_id(batch_id), check_piece(piece)
        staged = {}
        for task, table in tables.items():
            check_result_table(table, batch_id, task)
            if table.num_rows and self._stage(task, batch_id, piece, table):
                staged[task] = table.num_rows
        return staged

    def _stage(self, task: str, batch_id: int, piece: int, table: pa.Table) -> bool:
        target = self._target()
        group = piece_group(self.topic, task, self._run(task), piece)
        values = self.encoders.get(task, json_values)(table)
        keys = record_keys(table, self.keys.get(task))
        timestamps = record_timestamps(table)
        headers = [(TASK_HEADER, task.encode())]
        for attempt in range(3):
            writer = _writer(target, group)
            try:
                done = writer.written()
                if done is not None and done > batch_id:
                    raise stale_batch(self.name, task, batch_id, done)
                if done == batch_id:
                    return False
                writer.write(batch_id, values, keys, timestamps, headers)
                return True
            except KafkaException as err:
                error = err.args[0]
                if not (error.fatal() or error.retriable() or error.txn_requires_abort()) or attempt == 2:
                    raise
                if error.fatal():  # fenced (the piece went to another worker process and back): a new producer
                    _drop_writer(target, group)
                log.warning("%s: piece %d of batch %d again after %s", self.location(task), piece, batch_id, error)
        return False  # not reached

    def _run(self, task: str) -> str:
        """The run writing `task`: the fence's (pickled from the driver), else the owner record's."""
        run = self._runs.get(task)
        if run is None:
            owner = self.owner(task)
            if owner is None:
                raise RuntimeError(f"{self.location(task)}: not claimed by a run (start the job through start_job)")
            run = owner.run_id
        return run

    # --- the driver's side -------------------------------------------------------------------------------------

    def _client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self._target().client_config())
        return self._admin

    def _groups(self, task: str) -> list[str]:
        """Every consumer group of `task` in this topic (every run's ledger and pieces)."""
        prefix = task_prefix(self.topic, task)
        listed = _retrying(
            "list consumer groups", lambda: self._client().list_consumer_groups().result(self.timeout_s), 60
        )
        return sorted(g.group_id for g in listed.valid if g.group_id.startswith(prefix))

    def _offset(self, group: str) -> TopicPartition | None:
        """`group`'s committed offset on partition 0 (stable), or None when it has none."""
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(self.topic, 0)])]

        def ask() -> TopicPartition:
            futures = self._client().list_consumer_group_offsets(request, require_stable=True)
            [found] = futures[group].result(self.timeout_s).topic_partitions
            if found.error is not None:
                raise KafkaException(found.error)
            return found

        found = _retrying(f"committed offset of {group}", ask, 60)
        return found if found.offset >= 0 else None

    def _set_offset(self, group: str, offset: int, metadata: str) -> None:
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(self.topic, 0, offset, metadata)])]

        def alter() -> None:
            [result] = self._client().alter_consumer_group_offsets(request).values()
            for tp in result.result(self.timeout_s).topic_partitions:
                if tp.error is not None:
                    raise KafkaException(tp.error)

        _retrying(f"commit of {group}", alter, 60)

    def _ledgers(self, task: str) -> list[tuple[str, str]]:
        """(group, run id) of each run's ledger of `task` (names without a piece)."""
        found = []
        for group in self._groups(task):
            run = group[len(task_prefix(self.topic, task)) :]
            if "." not in run:
                found.append((group, run))
        return found

    def owner(self, task: str) -> CheckpointId | None:
        """The checkpoint that claimed `task` in this topic, or None when none did."""
        ledgers = self._ledgers(task)
        if not ledgers:
            return None
        if len(ledgers) > 1:
            raise OwnerRecordError(
                f"{self.location(task)}: several runs claim the task ({', '.join(g for g, _ in ledgers)}); delete "
                "the groups of the runs that no longer write it"
            )
        [(group, run)] = ledgers
        offset = self._offset(group)
        path = UNKNOWN_PATH
        if offset is not None and offset.metadata:
            try:
                path = str(orjson.loads(offset.metadata)["checkpoint"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                path = UNKNOWN_PATH
        try:
            owner = CheckpointId(run, path)
        except ValueError:
            raise OwnerRecordError(f"consumer group {group}: {run!r} is not a run id; delete the group") from None
        self._runs[task] = owner.run_id
        self._meta[task] = orjson.dumps({"run_id": owner.run_id, "checkpoint": owner.path}).decode()
        return owner

    def holds_results(self, task: str) -> bool:
        """Whether any run committed a batch or wrote a piece of `task` here (groups with an offset past 0)."""
        for group in self._groups(task):
            offset = self._offset(group)
            if offset is not None and offset.offset > 0:
                return True
        return False

    def clear(self, task: str) -> None:
        """Delete `task`'s groups (every run's ledger and pieces); the records in the topic stay."""
        self._last.pop(task, None)
        groups = self._groups(task)
        if groups:
            for future in self._client().delete_consumer_groups(groups, request_timeout=self.timeout_s).values():
                future.result(self.timeout_s)

    def claim(self, task: str, checkpoint: CheckpointId) -> None:
        """Record `checkpoint`'s run as the writer of `task` (its ledger at offset 0), removing other runs' groups
        (the fence claims only tasks that hold nothing, or that it cleared)."""
        others = [g for g in self._groups(task) if not g.startswith(ledger_group(self.topic, task, checkpoint.run_id))]
        if others:
            for future in self._client().delete_consumer_groups(others, request_timeout=self.timeout_s).values():
                future.result(self.timeout_s)
        metadata = orjson.dumps({"run_id": checkpoint.run_id, "checkpoint": checkpoint.path}).decode()
        self._set_offset(ledger_group(self.topic, task, checkpoint.run_id), 0, metadata)
        self._runs[task], self._meta[task] = checkpoint.run_id, metadata
        self._last[task] = None

    def last_committed(self, task: str) -> int | None:
        """The last batch id the driver committed for `task` (this run), or None."""
        offset = self._offset(ledger_group(self.topic, task, self._run(task)))
        return offset.offset - 1 if offset is not None and offset.offset > 0 else None

    def written(self, task: str) -> dict[int, int]:
        """Per piece, the last batch this run wrote of `task` (what the executors' transactions committed)."""
        prefix = f"{ledger_group(self.topic, task, self._run(task))}."
        found = {}
        for group in self._groups(task):
            if group.startswith(prefix):
                offset = self._offset(group)
                if offset is not None and offset.offset > 0:
                    found[int(group[len(prefix) :])] = offset.offset - 1
        return found

    def commit(
        self,
        batch_id: int,
        pieces: Mapping[str, Collection[int]],
        *,
        schemas: Mapping[str, pa.Schema] | None = None,
        batch_max: Mapping[str, int] | None = None,
    ) -> list[str]:
        """Record `batch_id` per task as committed (its pieces are visible since their transactions committed);
        returns the tasks committed by this call. A task whose last committed batch is `batch_id` is skipped (a
        replay); StaleBatchError when above."""
        batch_id = check_batch_id(batch_id)
        committed = []
        for task in pieces:
            if task not in self._last:
                self._last[task] = self.last_committed(task)
            last = self._last[task]
            if last is not None and batch_id < last:
                raise stale_batch(self.name, task, batch_id, last)
            if last == batch_id:
                continue
            run = self._run(task)
            metadata = self._meta.get(task) or orjson.dumps({"run_id": run, "checkpoint": UNKNOWN_PATH}).decode()
            self._set_offset(ledger_group(self.topic, task, run), batch_id + 1, metadata)
            self._last[task] = batch_id
            committed.append(task)
        return committed

    def close(self) -> None:
        self._admin = None


def new_run_id() -> str:
    """A run id for tools and tests that write the sink without a job's checkpoint."""
    return str(uuid.uuid4())


def spec_kafka_sink(config: Any, spec: Any) -> KafkaResultsSink:
    """The sink of a spec's `sinks.kafka` (`operators.kafka_sink_spec.KafkaSinkSpec`): keys per task, and for
    Avro each task's schema registered in the spec's schema registry under `<topic>-windjoin.results.<task>`
    (TopicRecordNameStrategy: one topic holds several tasks' record schemas)."""
    from windjoin.connectors.formats.schema_registry import RegistryConnection
    from windjoin.connectors.kafka.result_records import avro_encoder, avro_schema, key_fields
    from windjoin.operators.result_table import result_schema

    tasks = [t.name for t in spec.tasks]
    encoders: dict[str, Encoder] = {}
    if config.format == "avro":
        if spec.schema_registry is None:
            raise ValueError("sinks.kafka.format: 'avro' needs the spec's schema_registry (accepted: json, avro)")
        registry = RegistryConnection.from_spec(spec.schema_registry)
        for task in tasks:
            schema = avro_schema(spec, task, result_schema(spec, task))
            schema_id = registry.register(f"{config.topic}-{schema['namespace']}.{task}", schema)
            encoders[task] = avro_encoder(schema, schema_id)
    return KafkaResultsSink(
        config.topic,
        config.bootstrap,
        security=KafkaSecurity.from_spec(spec.kafka),
        keys={task: key_fields(spec, task) for task in tasks},
        encoders=encoders,
        queue_records=config.queue_records,
        timeout_s=config.timeout_s,
    )
