"""The streaming join job: Kafka source → adapter → stateful join per slot → sinks, exactly once per batch.

Wiring only: the join is `operators`, the state handling `join_state`, the sinks `connectors`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mmh3
import orjson
from pyspark.sql import DataFrame, SparkSession

from windjoin.connectors.files.batch_costs import BatchCosts
from windjoin.connectors.files.checkpoint_layout import check_layout
from windjoin.connectors.files.mark_reports import MarkReports
from windjoin.connectors.files.snapshots import Snapshot
from windjoin.connectors.kafka.login_check import check_login
from windjoin.connectors.kafka.security import KafkaSecurity
from windjoin.connectors.redis.client import RedisAuth
from windjoin.connectors.redis.move_store import MoveStore
from windjoin.operators.batch_budget import batch_budget, spark_parts
from windjoin.operators.batch_delays import Delays
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE
from windjoin.operators.result_table import result_schema
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.adapted_source import (
    CONTROL_NAMESPACE_OPTION,
    CONTROL_REDIS_OPTION,
    COSTS_OPTION,
    MARKS_OPTION,
    read_adapted,
)
from windjoin.pipelines.job.adapter import Adapter
from windjoin.pipelines.job.checkpoint_identity import checkpoint_identity, predates_run_ids
from windjoin.pipelines.job.control_feed import REFUSALS_OPTION, auth_options
from windjoin.pipelines.job.join_state import OUTPUT_DDL, JoinProcessor
from windjoin.pipelines.job.sink_fence import fence_sinks
from windjoin.pipelines.job.sinks import AfterCommit, Sink, bind_job_broker, split_sinks
from windjoin.pipelines.job.slot_output import DeadLetterTarget, SlotOutputs
from windjoin.pipelines.job.slot_stats import SlotReport

log = logging.getLogger(__name__)

QUERY_NAME = "windjoin"
# Held while a batch runs (its Spark job and the sinks' commit): executor scaling removes executors only between
# batches (pipelines.job.executor_scaling).
BATCH_RUNNING = threading.Lock()

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB,  # transformWithState needs RocksDB
    # Commit a batch by appending its changes to a changelog instead of uploading a RocksDB checkpoint.
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


class JobConfigError(ValueError):
    """The spec lacks something needed to run on Kafka; the message names the key."""


def check_runnable(spec: JoinSpec) -> None:
    """Raise JobConfigError naming every key the job needs and the spec lacks (before Spark starts).

    Tasks of any number of streams run (MJoin per hash partition when one joins three or more). Each partition
    joins only its own tuples, which is exact because the spec already refuses keyed streams that are not linked
    by `eq` between their keys (every combination then shares one key value, so one partition); unkeyed
    streams all go to partition 0.
    """
    problems = [f"streams.{n}.topic: required to run on Kafka" for n, s in spec.streams.items() if not s.topic]
    if not spec.checkpoint:
        problems.append("checkpoint: required to run (a folder for Spark's offsets and state)")
    if problems:
        raise JobConfigError("\n".join(problems))


def slot_labels(spark: SparkSession, slots: int) -> tuple[int, ...]:
    """Grouping-key values for the slots that Spark's hash partitioner sends to distinct partitions."""
    return hash_partition_labels(int(spark.conf.get("spark.sql.shuffle.partitions")), slots)


@functools.cache
def hash_partition_labels(partitions: int, slots: int) -> tuple[int, ...]:
    """Slot s gets the (s div n)-th smallest int landing on partition (s mod n) of n `partitions`.

    Spark places an int key on pmod(hash(key), n), its Murmur3Hash with seed 42 over the key's four little-endian
    bytes: murmur3_x86_32, which mmh3 computes without a Spark job (one cost a new process ~4 s). Labels 0..n-1
    can collide; slots beyond n share Spark partitions (and run after one another there), never a label.
    """
    by_partition: dict[int, list[int]] = defaultdict(list)
    for label in range(64 * max(partitions, slots)):
        by_partition[mmh3.hash(label.to_bytes(4, "little", signed=True), SPARK_HASH_SEED) % partitions].append(label)
    return tuple(by_partition[s % partitions][s // partitions] for s in range(slots))


SPARK_HASH_SEED = 42  # org.apache.spark.sql.catalyst.expressions.Murmur3Hash's default seed


@dataclass(frozen=True)
class ControlSource:
    """Follow the controller's decisions (routing moves, shed ratio) recorded in Redis at `url`."""

    url: str
    namespace: str = DEFAULT_NAMESPACE
    auth: RedisAuth | None = None  # where the job's Redis credentials are (files, variable names: no secret)
    refusals: str | None = None  # the file counting refused decisions (control_feed.RefusalCounts)

    def options(self) -> dict[str, str]:
        refusals = {} if self.refusals is None else {REFUSALS_OPTION: self.refusals}
        return {
            CONTROL_REDIS_OPTION: self.url,
            CONTROL_NAMESPACE_OPTION: self.namespace,
            **auth_options(self.auth),
            **refusals,
        }


@dataclass
class BatchOutcome:
    """What one micro-batch did, as the sinks saw it."""

    batch_id: int
    pairs: dict[str, int] = field(default_factory=dict)
    dead: int = 0
    punctuations: int = 0  # punctuation records in the batch (each closes a snapshot of every task)
    snapshots: list[Snapshot] = field(default_factory=list)  # snapshots closed after this batch
    dead_by_reason: dict[str, int] = field(default_factory=dict)  # refused rows by reason, dead-lettered or not
    stats: list[SlotReport] = field(default_factory=list)  # each slot's report (`slot_stats.SlotReport`)
    # Production delay of the batch's pairs: emission minus the later tuple's event time (ms), as an exact
    # histogram. With event time stamped at arrival (as the generator does) this is the paper's production delay.
    delays_ms: Delays = field(default_factory=Delays)
    finished_at: float = 0.0  # wall clock, seconds
    routing_version: int = 0  # the routing table version the batch was routed by (control epoch)
    shed_ratio: float = 0.0  # the shed ratio applied to the batch's records (control epoch)
    shed: dict[str, int] = field(default_factory=dict)  # records shed by the adapter, per stream
    order_seconds: float = 0.0  # time the slots spent putting their results in the spec's output_order
    commit_seconds: float = 0.0  # the driver's time committing the batch to the sinks
    # Event time (operators.event_time): the watermark the batch judged lateness by, the (oldest, newest) event
    # time it read per input partition, and the widest event-time span of any partition's state after it: of its
    # live tuples, and of all it holds (segments expire whole).
    watermark: int | None = None
    input_marks: dict[str, tuple[int, int]] = field(default_factory=dict)
    state_span_ms: int = 0
    held_span_ms: int = 0
    # Sinks that had already committed the batch (a replay after a restart) and skipped it: sink name -> tasks.
    replayed: dict[str, list[str]] = field(default_factory=dict)
    # Where the batch's time went (operators.batch_budget, ms), and Spark's planning and commit of the batch
    # before it (a batch's own exist only once it ended).
    budget: dict[str, float] = field(default_factory=dict)
    batch_limit: int | None = None  # the record limit the source planned the batch with (None: none)
    waiting: int = 0  # records the topics held beyond the batch when it was planned (the job's backlog)
    previous_spark: dict[str, Any] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(s["rows"] for s in self.stats)

    @property
    def emitted_at_ms(self) -> int | None:
        """When the earliest slot stamped its pairs (epoch ms): delays to the batch's end are measured from it."""
        return min((s["emitted_at"] for s in self.stats if "emitted_at" in s), default=None)

    @property
    def window_tuples(self) -> int:
        return sum(s["window_tuples"] for s in self.stats)


@dataclass
class BatchSink:
    """foreachBatch: the slots staged their results in the sinks; close the batch from their summaries.

    Only the slots' summaries reach the driver (small: counts, a delay histogram, marks). After every slot
    staged, each sink commits the batch, then the after-commit steps run (the snapshot committer closes
    snapshots), then the marks are written, all before Spark commits the batch; a replayed batch is skipped by
    the sinks that had committed it.
    """

    spec: JoinSpec
    sinks: Sequence[Sink | AfterCommit]  # as `build_sinks` makes them (see `sinks.split_sinks`)
    on_batch: Callable[[BatchOutcome], None] | None = None
    move_root: str | None = None
    pruned_below: int = 0  # handed-over states of routing versions below this are deleted
    marks: MarkReports | None = None  # where the batch's input marks go for the next batch's plan
    costs: BatchCosts | None = None  # where the batch's size and time go for the next batch's size
    query: Any = field(default=None, init=False)  # the running query, for Spark's progress reports

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with BATCH_RUNNING:
            outcome = self._run(df, batch_id)
        if self.on_batch is not None:
            self.on_batch(outcome)

    def _run(self, df: DataFrame, batch_id: int) -> BatchOutcome:
        outcome = BatchOutcome(batch_id)
        started = time.perf_counter()
        summaries = df.collect()  # runs the batch's Spark job: read, adapt, shuffle, join, the slots' staging
        executed = time.perf_counter()
        outcome.stats = [{"slot": row["slot"], **orjson.loads(row["stats"])} for row in summaries]
        outcome.punctuations = sum(s.get("punctuations", 0) for s in outcome.stats)
        self._note_control(outcome)
        clock_seq = self._note_event_time(outcome)
        pieces: dict[str, list[int]] = {t.name: [] for t in self.spec.tasks}
        batch_max: dict[str, int] = {}
        for stat in outcome.stats:
            for task, (rows, top) in stat.get("pairs", {}).items():
                pieces[task].append(int(stat["slot_index"]))
                outcome.pairs[task] = outcome.pairs.get(task, 0) + rows
                batch_max[task] = max(batch_max.get(task, top), top)
            for reason, n in stat.get("dead_by_reason", {}).items():
                outcome.dead_by_reason[reason] = outcome.dead_by_reason.get(reason, 0) + n
            outcome.dead += stat.get("dead_letters", 0)
            outcome.order_seconds += stat.get("order_seconds", 0.0)
        outcome.delays_ms = Delays.merge(s["delays"] for s in outcome.stats if "delays" in s)
        schemas = {task: result_schema(self.spec, task) for task in pieces}
        committing = time.perf_counter()
        staged, steps = split_sinks(self.sinks)
        for sink in staged:
            committed = sink.commit(batch_id, pieces, schemas=schemas, batch_max=batch_max)
            note_replay(outcome, sink, pieces, committed)
        outcome.commit_seconds = time.perf_counter() - committing
        for step in steps:
            outcome.snapshots += step.after_batch(batch_id, outcome.punctuations)
        if self.marks is not None and clock_seq is not None:  # after the sinks, before Spark commits the batch
            self.marks.write(clock_seq, outcome.input_marks)
        outcome.previous_spark = spark_parts(_progress_json(self.query))
        ended = time.perf_counter()
        outcome.budget = batch_budget(
            outcome.stats,
            (executed - started) * 1000,
            outcome.commit_seconds * 1000,
            (ended - executed - outcome.commit_seconds) * 1000,
        )
        spark_s = (outcome.previous_spark.get("plan", 0.0) + outcome.previous_spark.get("commit", 0.0)) / 1000
        if self.costs is not None:  # before Spark commits the batch, like the marks
            self.costs.record(batch_id, outcome.records, sum(outcome.budget.values()) / 1000 + spark_s)
        outcome.finished_at = time.time()
        return outcome

    def _note_event_time(self, outcome: BatchOutcome) -> int | None:
        """The batch's watermark, input marks (maxima over slots) and state span; returns its clock's seq."""
        for stat in outcome.stats:
            for key, (oldest, newest) in stat.get("marks", {}).items():
                lo, hi = outcome.input_marks.get(key, (oldest, newest))
                outcome.input_marks[key] = (min(lo, oldest), max(hi, newest))
        watermarks = [s["watermark"] for s in outcome.stats if s.get("watermark") is not None]
        outcome.watermark = max(watermarks, default=None)
        outcome.state_span_ms = max((s.get("state_span_ms", 0) for s in outcome.stats), default=0)
        outcome.held_span_ms = max((s.get("held_span_ms", 0) for s in outcome.stats), default=0)
        outcome.batch_limit = max((s["batch_limit"] for s in outcome.stats if s.get("batch_limit")), default=None)
        outcome.waiting = max((s.get("batch_waiting") or 0 for s in outcome.stats), default=0)
        seqs = [s["clock_seq"] for s in outcome.stats if s.get("clock_seq") is not None]
        return max(seqs, default=None)

    def _note_control(self, outcome: BatchOutcome) -> None:
        """The batch's control epoch as its slots saw it; prune handed-over states no batch can need again."""
        if not outcome.stats:
            return
        outcome.routing_version = max(s.get("routing_version", 0) for s in outcome.stats)
        outcome.shed_ratio = max(s.get("shed_ratio", 0.0) for s in outcome.stats)
        for s in outcome.stats:
            for stream, n in s.get("shed", {}).items():
                outcome.shed[stream] = outcome.shed.get(stream, 0) + n
        # States of earlier versions were installed by committed batches (this one runs, so those committed);
        # pruned once per routing version, not every batch (on an object store a listing is a request).
        if self.move_root is not None and outcome.routing_version > self.pruned_below:
            MoveStore(self.move_root).prune(below_version=outcome.routing_version)
            self.pruned_below = outcome.routing_version


def _progress_json(query: Any) -> dict[str, Any] | None:
    """The query's last finished batch's progress report as a dict (pyspark 4 gives an object with `.json`)."""
    progress = query.lastProgress if query is not None else None
    if progress is None:
        return None
    return orjson.loads(progress.json) if hasattr(progress, "json") else dict(progress)


def note_replay(outcome: BatchOutcome, sink: Sink, tasks: Iterable[str], committed: Iterable[str]) -> None:
    """Log and record the tasks a sink skipped because it had committed the batch before (a replay after a
    restart). Sinks raise on an older batch id, so nothing else is ever skipped."""
    skipped = sorted(set(tasks) - set(committed))
    if skipped:
        log.warning(
            "batch %d: a replay, committed before to %s for %s; skipped there",
            outcome.batch_id,
            sink.name,
            ", ".join(skipped),
        )
        outcome.replayed[sink.name] = skipped


def move_root(spec: JoinSpec) -> str:
    """Where moved partitions' state is handed over: beside Spark's checkpoint, shared like it."""
    return str(Path(spec.checkpoint).resolve() / "moves")


def spill_root(spec: JoinSpec) -> str:
    """Where pushed generations are written (paper 004): beside Spark's checkpoint, shared like it."""
    return str(Path(spec.checkpoint).resolve() / "spill")


def marks_root(spec: JoinSpec) -> str:
    """Where each batch's input marks are reported to the next batch's plan: beside Spark's checkpoint."""
    return str(Path(spec.checkpoint).resolve() / "marks")


def costs_path(spec: JoinSpec) -> str:
    """Where each batch's size and time go for the latency target's batch sizing: beside Spark's checkpoint."""
    return str(Path(spec.checkpoint).resolve() / "batch_costs.json")


def build_stream(
    spark: SparkSession,
    spec: JoinSpec,
    bootstrap: str,
    control: ControlSource | None = None,
    outputs: SlotOutputs | None = None,
) -> DataFrame:
    """The joined stream: one summary row per slot and batch; the slots write their results to `outputs`."""
    labels = slot_labels(spark, spec.partitions)  # a label for every slot the controller may open
    routing = RoutingTable.round_robin(spec.partitions, spec.slots)
    adapter = Adapter(spec, routing, labels)
    options = {
        "bootstrap.servers": bootstrap,
        "startingOffsets": "earliest",
        MARKS_OPTION: marks_root(spec),
        COSTS_OPTION: costs_path(spec),
        "read.tasks": str(spark.sparkContext.defaultParallelism),  # a read task per core, not per partition
    }
    options.update(KafkaSecurity.from_spec(spec.kafka).to_options())
    if control is not None:
        options.update(control.options())
    return (
        read_adapted(spark, adapter, options)
        .groupBy("slot")
        .transformWithStateInPandas(
            statefulProcessor=JoinProcessor(spec, labels, routing, move_root(spec), spill_root(spec), outputs),
            outputStructType=OUTPUT_DDL,
            outputMode="Append",
            timeMode="None",
        )
    )


def check_start(spec: JoinSpec, sinks: Sequence[Sink | AfterCommit], fresh_sinks: bool = False) -> list[str]:
    """Everything a start checks before Spark runs: the spec's keys for Kafka, the checkpoint's state layout,
    and the sinks' owner (sinks written by another checkpoint are refused, `sink_fence.SinkOwnerError`, unless
    `fresh_sinks`, which clears them for this checkpoint's batches). Returns the fence's notices."""
    check_runnable(spec)
    checkpoint = Path(spec.checkpoint).resolve()
    check_layout(spec, checkpoint)
    tasks = [t.name for t in spec.tasks]
    return fence_sinks(sinks, tasks, checkpoint_identity(checkpoint), fresh_sinks, predates_run_ids(checkpoint))


def start_job(
    spark: SparkSession,
    spec: JoinSpec,
    bootstrap: str,
    sinks: Sequence[Sink | AfterCommit],
    available_now: bool = False,
    on_batch: Callable[[BatchOutcome], None] | None = None,
    control: ControlSource | None = None,
    fresh_sinks: bool = False,
) -> Any:
    """Check the start (`check_start`, its notices logged), then start the streaming query; returns it."""
    bind_job_broker(sinks, bootstrap)  # a Kafka sink without its own bootstrap writes to the job's broker
    check_login(bootstrap, KafkaSecurity.from_spec(spec.kafka))  # a refused login named in the spec's keys
    for line in check_start(spec, sinks, fresh_sinks):
        log.warning("%s", line)
    return start_query(spark, spec, bootstrap, sinks, available_now, on_batch, control)


def start_query(
    spark: SparkSession,
    spec: JoinSpec,
    bootstrap: str,
    sinks: Sequence[Sink | AfterCommit],
    available_now: bool = False,
    on_batch: Callable[[BatchOutcome], None] | None = None,
    control: ControlSource | None = None,
) -> Any:
    """Start the streaming query of a start `check_start` passed; returns it (await termination or stop it).

    `sinks` as `build_sinks` makes them: each `Sink` is staged by the executors and committed by the driver, each
    `AfterCommit` step runs after them; anything else is refused.
    """
    staged, _ = split_sinks(sinks)
    security = KafkaSecurity.from_spec(spec.kafka)
    dead_letters = DeadLetterTarget(bootstrap, spec.dead_letter_topic, security) if spec.dead_letter_topic else None
    for key, value in STATE_CONF.items():
        spark.conf.set(key, value)
    batch_sink = BatchSink(
        spec,
        sinks,
        on_batch,
        move_root(spec),
        marks=MarkReports(marks_root(spec)),
        costs=BatchCosts(costs_path(spec)),
    )
    writer = (
        build_stream(spark, spec, bootstrap, control, SlotOutputs(staged, dead_letters))
        .writeStream.foreachBatch(batch_sink)
        .option("checkpointLocation", str(Path(spec.checkpoint).resolve()))
        .queryName(QUERY_NAME)
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=f"{spec.trigger_ms} milliseconds")
    )
    batch_sink.query = writer.start()
    return batch_sink.query
