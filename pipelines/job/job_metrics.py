"""The join job's Prometheus metrics, updated from each micro-batch's BatchOutcome, in a registry of their own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from windjoin.connectors.formats.codec_errors import known_reasons
from windjoin.operators.control.decision_check import REASONS
from windjoin.operators.schema import RECORD_REASONS

if TYPE_CHECKING:
    from windjoin.pipelines.job.join_job import BatchOutcome

log = logging.getLogger(__name__)

# Production delay (seconds): from well under a batch interval to minutes behind when the job falls behind.
DELAY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0)
# One slot's share of a batch (seconds): the fixed per-batch cost is ~1 s on 2 cores.
SLOT_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 60.0)


class BulkHistogram(Collector):
    """A histogram observed a whole array at a time (numpy), for values counted per pair rather than per batch.

    prometheus-client's Histogram observes one value per call: a Python loop over every pair of a batch.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name, self.documentation = name, documentation
        self.bounds = np.asarray(sorted(buckets), dtype=np.float64)
        self._counts = np.zeros(len(self.bounds) + 1, dtype=np.int64)  # last one: above every bound (+Inf)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe_many(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Observe each value once, or `weights[i]` times (a histogram of distinct values)."""
        values = np.asarray(values, dtype=np.float64)
        if not len(values):
            return
        weights = np.ones(len(values), np.int64) if weights is None else np.asarray(weights, np.int64)
        buckets = np.searchsorted(self.bounds, values, side="left")
        counts = np.bincount(buckets, weights=weights, minlength=len(self._counts)).astype(np.int64)
        with self._lock:
            self._counts += counts
            self._sum += float((values * weights).sum())

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            cumulative = np.cumsum(self._counts)
            total = self._sum
        labels = [*(f"{b:g}" for b in self.bounds), "+Inf"]
        yield HistogramMetricFamily(
            self.name, self.documentation, buckets=list(zip(labels, cumulative.tolist(), strict=True)), sum_value=total
        )

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation)


class RefusedDecisions(Collector):
    """windjoin_job_decisions_refused_total{reason}: a counter whose values come from `counts()` at each scrape."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "windjoin_job_decisions_refused",
            "Controller decisions the job refused (and kept steering by the last good one), by reason.",
            labels=["reason"],
        )
        counts = self.counts()
        for reason in sorted({*REASONS, *counts}):
            family.add_metric([reason], counts.get(reason, 0))
        yield family

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("windjoin_job_decisions_refused", "", labels=["reason"])


class JobMetrics:
    """Input rows per slot, pairs per task, dead letters by reason, production delay, per-slot batch time and
    window size, batch id, batches a sink skipped as replays; per slot and per hash partition the load the
    controller reads (tuples in, outputs, seconds, window tuples, state bytes); the control epoch applied (routing
    version, shed ratio), records shed per stream, disk pushes and clean-ups per slot, and the executor count.

    `streams` and `tasks`: the spec's stream and task names, whose shed and pair counters are exported at 0 from the
    start (a labelled counter never incremented exports no sample, and "nothing shed" must be visible as 0, not as
    no data; a pair counter born at its first batch's count shows a rate of 0 for a job that joins a backlog in one
    batch). `executors`: called once per batch for the driver's executor count (`executor_scaling.executor_count`);
    None leaves the gauge at 0.
    """

    def __init__(
        self,
        streams: Sequence[str] = (),
        tasks: Sequence[str] = (),
        executors: Callable[[], int] | None = None,
        refused: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._executors = executors
        self.input_rows = Counter("windjoin_job_input_rows", "Input rows the join read, by slot.", ["slot"], registry=r)
        self.joined_rows = Counter(
            "windjoin_job_joined_rows", "Input rows that entered the join (not refused), by slot.", ["slot"], registry=r
        )
        self.pairs = Counter("windjoin_job_pairs", "Result pairs written to the sinks, by task.", ["task"], registry=r)
        for task in tasks:
            self.pairs.labels(task)
        self.dead_letters = Counter(
            "windjoin_job_dead_letters", "Input rows refused (dead letters), by reason.", ["reason"], registry=r
        )
        # Every reason exported at 0 from the start: a reason's first dead letter is then an increase that rate()
        # sees (a series born at 1 shows a rate of 0).
        for reason in sorted(known_reasons() | set(RECORD_REASONS)):
            self.dead_letters.labels(reason)
        self.batches = Counter("windjoin_job_batches", "Micro-batches committed to the sinks.", registry=r)
        self.replayed_batches = Counter(
            "windjoin_job_replayed_batches",
            "Micro-batches a sink had committed before and skipped (the replay after a restart), by sink.",
            ["sink"],
            registry=r,
        )
        self.batch_id = Gauge("windjoin_job_batch_id", "Id of the last micro-batch committed.", registry=r)
        self.last_batch = Gauge(
            "windjoin_job_last_batch_timestamp_seconds", "Wall clock when the last batch was committed.", registry=r
        )
        self.slot_seconds = Histogram(
            "windjoin_job_slot_batch_seconds",
            "Time one slot spent on its share of a batch (state reads, join, state writes).",
            ["slot"],
            buckets=SLOT_SECONDS_BUCKETS,
            registry=r,
        )
        self.window_tuples = Gauge(
            "windjoin_job_window_tuples", "Tuples held in a slot's windows after its last batch.", ["slot"], registry=r
        )
        self.window_segments = Gauge(
            "windjoin_job_window_segments", "Window segments stored in a slot's state.", ["slot"], registry=r
        )
        self.state_bytes = Gauge(
            "windjoin_job_state_bytes",
            "Approximate bytes of the stored window columns of a slot after its last batch.",
            ["slot"],
            registry=r,
        )
        self.slot_outputs = Counter(
            "windjoin_job_slot_outputs", "Result pairs a slot produced, by slot.", ["slot"], registry=r
        )
        self.watermark = Gauge(
            "windjoin_job_watermark_ms",
            "Event time (epoch ms) below which a tuple is late: the slowest input partition's newest less lateness.",
            registry=r,
        )
        self.state_span = Gauge(
            "windjoin_job_state_span_ms",
            "Widest event-time span of a partition's state after the last batch: of its live tuples, and of all it "
            "holds (segments expire whole).",
            ["kind"],
            registry=r,
        )
        self.batch_time = Gauge(
            "windjoin_job_batch_time_ms",
            "The last batch's time budget by part (operators.batch_budget): read, adapt, spark, state_load, join, "
            "state_write, sinks, driver; plan and commit are Spark's, of the batch before it.",
            ["part"],
            registry=r,
        )
        # Per hash partition (the unit the controller moves), labelled by partition only, so a move between
        # slots continues the same series; windjoin_job_partition_slot says where it ran last.
        self.part_tuples = Counter(
            "windjoin_job_partition_tuples_in",
            "Tuples that entered the join, by hash partition.",
            ["partition"],
            registry=r,
        )
        self.part_outputs = Counter(
            "windjoin_job_partition_outputs", "Result pairs produced, by hash partition.", ["partition"], registry=r
        )
        self.part_seconds = Counter(
            "windjoin_job_partition_seconds",
            "Slot processing seconds attributed to a hash partition (measured join time plus a share of the rest).",
            ["partition"],
            registry=r,
        )
        self.part_window_tuples = Gauge(
            "windjoin_job_partition_window_tuples", "Tuples held in a partition's windows.", ["partition"], registry=r
        )
        self.part_state_bytes = Gauge(
            "windjoin_job_partition_state_bytes",
            "Approximate bytes of a partition's stored window columns.",
            ["partition"],
            registry=r,
        )
        self.part_slot = Gauge(
            "windjoin_job_partition_slot", "Slot index that last reported the partition.", ["partition"], registry=r
        )
        self.shed = Counter(
            "windjoin_job_shed_records",
            "Input records the adapter shed (load shedding, replay-deterministic), by stream.",
            ["stream"],
            registry=r,
        )
        for stream in streams:
            self.shed.labels(stream)
        self.shed_ratio = Gauge(
            "windjoin_job_shed_ratio", "Shed ratio applied to the last batch (from its control epoch).", registry=r
        )
        self.routing_version = Gauge(
            "windjoin_job_routing_version",
            "Version of the routing table the last batch was routed by (from its control epoch).",
            registry=r,
        )
        self.executors = Gauge(
            "windjoin_job_executors",
            "Executors the driver has, as of the last batch (a local master runs tasks in the driver: 1).",
            registry=r,
        )
        # Disk pushes and clean-ups (paper 004), per slot: how much went to disk, what is still there, and the
        # clean-up's progress (partitions merged, pairs it found).
        self.spill_tuples = Counter(
            "windjoin_job_spill_pushed_tuples", "Window tuples pushed to disk, by slot.", ["slot"], registry=r
        )
        self.spill_bytes = Counter(
            "windjoin_job_spill_pushed_bytes",
            "Bytes of generation files pushed to disk, by slot.",
            ["slot"],
            registry=r,
        )
        self.spill_generations = Gauge(
            "windjoin_job_spill_generations",
            "Pushed generations on disk awaiting clean-up after the slot's last batch, by slot.",
            ["slot"],
            registry=r,
        )
        self.cleanups = Counter(
            "windjoin_job_cleanup_partitions",
            "Partitions whose generations a clean-up merged, by slot.",
            ["slot"],
            registry=r,
        )
        self.cleanup_pairs = Counter(
            "windjoin_job_cleanup_pairs",
            "Result pairs found by clean-ups (across generations), by slot.",
            ["slot"],
            registry=r,
        )
        self.delay = BulkHistogram(
            "windjoin_job_production_delay_seconds",
            "Production delay of result pairs: emission minus the later tuple's event time.",
            DELAY_BUCKETS,
        )
        r.register(self.delay)
        # Controller decisions the job refused (operators.control.decision_check), by reason; counted by the source's
        # planner in its own process, so read from `refused` when scraped. Every reason shows 0 from the start.
        r.register(RefusedDecisions(refused or dict))

    def observe(self, outcome: BatchOutcome) -> None:
        """Account for one committed batch."""
        for stat in outcome.stats:
            slot = str(stat["slot"])
            self.input_rows.labels(slot).inc(stat.get("rows", 0))
            self.joined_rows.labels(slot).inc(stat.get("joined", 0))
            self.slot_seconds.labels(slot).observe(stat.get("seconds", 0.0))
            self.window_tuples.labels(slot).set(stat.get("window_tuples", 0))
            self.window_segments.labels(slot).set(stat.get("segments", 0))
            self.state_bytes.labels(slot).set(stat.get("state_bytes", 0))
            self.slot_outputs.labels(slot).inc(stat.get("outputs", 0))
            self._observe_groups(int(stat.get("slot_index", stat["slot"])), stat.get("groups"))
            self._observe_spill(slot, stat.get("spill"))
        for task, n in outcome.pairs.items():
            self.pairs.labels(task).inc(n)
        for reason, n in outcome.dead_by_reason.items():
            self.dead_letters.labels(reason).inc(n)
        for stream, n in outcome.shed.items():
            self.shed.labels(stream).inc(n)
        for sink in outcome.replayed:
            self.replayed_batches.labels(sink).inc()
        self.shed_ratio.set(outcome.shed_ratio)
        self.routing_version.set(outcome.routing_version)
        if outcome.watermark is not None:
            self.watermark.set(outcome.watermark)
        self.state_span.labels("live").set(outcome.state_span_ms)
        self.state_span.labels("held").set(outcome.held_span_ms)
        for part, ms in outcome.budget.items():
            self.batch_time.labels(part).set(ms)
        for part in ("plan", "commit"):
            if part in outcome.previous_spark:
                self.batch_time.labels(part).set(outcome.previous_spark[part])
        if self._executors is not None:
            try:
                self.executors.set(self._executors())
            except Exception as err:  # py4j while Spark stops: keep the last value
                log.warning("executor count unavailable: %s", err)
        self.delay.observe_many(outcome.delays_ms.values / 1000.0, outcome.delays_ms.counts)
        self.batches.inc()
        self.batch_id.set(outcome.batch_id)
        self.last_batch.set(outcome.finished_at)

    def _observe_groups(self, slot_index: int, groups: dict[str, list] | None) -> None:
        """One slot's per-partition columns (operators.control.slot_load): a few label lookups per partition."""
        if not groups:
            return
        columns = zip(
            groups["part"],
            groups["tuples_in"],
            groups["outputs"],
            groups["seconds"],
            groups["window_tuples"],
            groups["state_bytes"],
            strict=True,
        )
        for part, tuples_in, outputs, seconds, window_tuples, state_bytes in columns:
            label = str(part)
            self.part_tuples.labels(label).inc(tuples_in)
            self.part_outputs.labels(label).inc(outputs)
            self.part_seconds.labels(label).inc(seconds)
            self.part_window_tuples.labels(label).set(window_tuples)
            self.part_state_bytes.labels(label).set(state_bytes)
            self.part_slot.labels(label).set(slot_index)

    def _observe_spill(self, slot: str, spill: dict[str, Any] | None) -> None:
        if not spill:
            return
        self.spill_tuples.labels(slot).inc(spill["pushed_tuples"])
        self.spill_bytes.labels(slot).inc(spill["pushed_bytes"])
        self.spill_generations.labels(slot).set(sum(spill["generations"].values()))
        self.cleanups.labels(slot).inc(len(spill["cleaned"]))
        self.cleanup_pairs.labels(slot).inc(spill["cleanup_pairs"])

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        """Serve /metrics on `port` from a background thread; returns (server, thread)."""
        return start_http_server(port, addr=addr, registry=self.registry)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
