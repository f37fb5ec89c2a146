"""Pipeline benchmark: windjoin's streaming job vs Spark's built-in stream-stream join, same topics, same run.

Workload: two JSON streams R(ts, k, x) and S(ts, k, a) on Kafka topics (embedded Tansu broker, 4 partitions
each), Poisson arrivals at equal rates, join key k from paper 000's b-model (bias 0.7 over [0, 10^7]; `windjoin
generate`; `--keys 5000 --skew 0.5` gives a uniform, output-heavy variant), equi-join R.k = S.k with the time
window |R.ts - S.ts| <= W (10 s), allowed lateness / watermark delay 2 s. Both systems read the same topics
through the same Kafka reader in one local[2] SparkSession:

* windjoin: `pipelines.job.join_job.start_job` (adapter, transformWithStateInPandas per slot, RocksDB), to an
  in-process sink that counts pairs and their delays;
* built-in: two `readStream`s (one per topic), `from_json`, `withWatermark` on the event-time column, join on
  `r.k = s.k AND r.et BETWEEN s.et - W AND s.et + W`, foreachBatch to a count sink (pairs grouped by result time,
  collected), in both of Spark 4.3's configurations (`benchmarks.builtin_peer`: the default store with join state
  format 2, RocksDB with format 4), each checked in its checkpoint to be the one that ran; the faster (higher
  sustained rows/s) is the baseline of the ratios and runs the built-in join's paced phases.

Sustained throughput (input rows/s): the topics are first prefilled with N events whose event times are spaced as
a paced stream of RATE events/s would be (so windows hold RATE x W tuples and each tuple meets as many partners as
when running live at that rate: pairs per tuple grow with the rate). RATE is calibrated: windjoin is first run on
a prefill of density `--prefill-rate` and RATE is the rate it reached there (with `--no-calibrate`, RATE =
`--prefill-rate`); the paced runs then run below RATE, so their windows are no fuller than those measured. Each
system then reads the prefill from the beginning with a fixed `maxOffsetsPerTrigger` and a zero trigger interval
(batches back to back). The rate is input rows over wall time of three batches after a warm-up of at least RATE x
(W + lateness) rows (the first full window of state, plus JIT and worker start-up), from Spark's progress reports.
Each system is measured at every batch size of `--sweep-offsets` and keeps its best (per-batch fixed costs favour
big batches, a join's per-batch work may not: one fixed size would favour one system). A prefill is used rather
than a paced rate ramp because it measures the processing capacity directly, independent of the generator's own
speed on the same 2 cores, and every system sees exactly the same records; the paced runs below check the rates
live (a system that keeps up paced above its "sustained" rate shows that the sweep missed its best batch size).

Left outer: the same prefill joined left outer, windjoin's task with `type: left` and the built-in join with
`left_outer` in both configurations (the faster the baseline), at windjoin's best batch size: sustained rows/s
(an R tuple alone comes out once the watermark passes its window, S null, in both systems).

Production delay: fresh topics, the query started first, then `windjoin generate --pace --preencode` produces at 80%
of windjoin's sustained rate for T seconds (event time = scheduled wall time, so delay = emission - max(R.ts,
S.ts)). The load is encoded before its schedule starts, so that beside a saturated Spark it only sends
(`benchmarks.paced_load`), and Spark runs at a lower CPU priority than the generator (`benchmarks.spark_priority`:
even pre-encoded, the generator fell ~5 s behind beside a saturated Spark); a phase whose generator still ran behind
its schedule by more than 0.2 s (p99 of its 50-ms slices) is marked void. windjoin's pairs carry `emitted_at`
(stamped in the stateful operator); both systems also get the time the foreachBatch sink holds the pairs (built-in:
after the batch's action returns), which is the comparable figure. Pairs whose result time falls in the first
`--paced-warmup` seconds of the schedule are left out. Delays are corrected by the generator's start-up lag (it
re-bases its pacing if its first batch was late, so arrivals trail event times by that constant). The built-in join
is run paced at the same rate, and both systems at 80% of the built-in join's sustained rate (a rate the generator
keeps beside either of them).

Sinks are not alike: windjoin's slots keep their pairs in the executors and report exact delay histograms with
each batch's outcome (the benchmark counts those, no result reaches the driver); the built-in join's count sink
aggregates in Spark and collects a histogram; that is each system's cheapest honest end of the pipeline.

Profile: per batch, Spark's durationMs (planning, latestOffset, addBatch, commits), the wall time of
windjoin's two stages per batch from Spark's monitoring REST API (read stage: source with the adapter, shuffle write;
join stage: transformWithStateInPandas), windjoin's per-slot handler time (stats), the sink's time; plus the
Kafka source alone and source + adapter alone (same topics and batch size) and the adapter alone in-process.

Whatever happens (an error, Ctrl-C, SIGTERM), the broker, the generators and Spark are stopped (`teardown`).

    python -m benchmarks.pipeline [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import yaml

from benchmarks.builtin_peer import BuiltinSink, best, evidence, peers, start_builtin
from benchmarks.delays import MAX_DELAY_MS, DelayHistogram, shifted
from benchmarks.machine import machine_facts
from benchmarks.paced_load import (
    generate_cmd,
    generator_lags,
    run_generator,
    schedule_start_ms,
    stop_process,
    verdict,
)
from benchmarks.params_cli import add_param_flags, params_from
from benchmarks.results_file import write_results
from benchmarks.spark_floor import floor
from benchmarks.spark_priority import SPARK_NICE, lower_spark_priority
from benchmarks.teardown import exit_on_sigterm, tear_down

# Re-exported for the benchmarks that take them from here (latency, shedding, declustering, splitjoin).
__all__ = ["MAX_DELAY_MS", "DelayHistogram", "generate_cmd", "generator_lags", "run_generator", "stop_process"]

RESULTS = Path(__file__).parent / "results" / "pipeline.json"


@dataclass
class Params:
    window_s: float = 10.0
    keys: int = 10_000_001  # paper 000's join-attribute domain [0, 10^7]
    skew: float = 0.7  # paper 000's b-model bias (0.5 = uniform)
    lateness_ms: int = 2000
    topic_partitions: int = 4
    join_partitions: int = 64
    slots: int = 2
    prefill_rate: float = 10_000.0  # event-time density of the prefill, events/s over both streams
    prefill_events: int = 800_000
    sweep_offsets: str = "50000,200000"  # maxOffsetsPerTrigger values tried (both topics); best kept
    max_offsets: int = 200_000  # maxOffsetsPerTrigger of the paced runs (a cap) and the stage profile
    throughput_seconds: float = 150.0  # a throughput measurement stops after this long at the latest
    paced_seconds: float = 60.0
    paced_warmup_s: float = 15.0
    paced_builtin_own: bool = True  # also run both systems paced at 80% of the built-in join's sustained rate
    rate_fraction: float = 0.8
    stage_batches: int = 3  # batches of the source-only and source+adapter profile queries
    calibrate: bool = True  # prefill at the density windjoin sustains (probed first at prefill_rate)
    catchup_events: int = 2_000_000  # the catch-up phase's backlog (both streams), drained at the spec's defaults
    catchup_seconds: float = 600.0  # the catch-up phase stops after this long at the latest
    floor_seconds: float = 30.0  # each of Spark's floor queries (rate -> noop, rate -> stateful) runs this long
    peers: str = ""  # the built-in peers measured, comma-separated (builtin_peer.peers); empty: every one


# ---------------------------------------------------------------------------------------------------------
# Delays
# ---------------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------------
# Sinks
# ---------------------------------------------------------------------------------------------------------


class WindjoinDelays:
    """Counts a windjoin job's pairs and their delays from each batch's outcome (`on_batch`): the slots report
    their delays as exact histograms with their emission time; the results themselves stay in the executors."""

    def __init__(self, since_ms: int = 0) -> None:
        self.since_ms = since_ms  # pairs with an earlier result time are not counted in the delays
        self.emitted = DelayHistogram()  # emitted_at (stamped in the operator) - result time
        self.received = DelayHistogram()  # when the driver closed the batch - result time
        self.pairs = 0
        self.batches: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, outcome: Any) -> None:
        now_ms = int(outcome.finished_at * 1000)
        for stat in outcome.stats:
            values, counts = (np.asarray(x, dtype=np.int64) for x in stat.get("delays", [[], []]))
            if not len(values):
                continue
            result_ms = stat["emitted_at"] - values
            keep = result_ms >= self.since_ms
            self.emitted.add(values[keep], counts[keep])
            self.received.add((now_ms - result_ms)[keep], counts[keep])
        stage_s = max((s.get("stage_seconds", 0.0) for s in outcome.stats), default=0.0)
        with self.lock:
            self.pairs += sum(outcome.pairs.values())
            self.batches.append(
                {
                    "batch_id": outcome.batch_id,
                    "pairs": sum(outcome.pairs.values()),
                    "sink_s": stage_s + outcome.commit_seconds,
                    "at_ms": now_ms,
                }
            )


# ---------------------------------------------------------------------------------------------------------
# Workload: spec, topics, generator
# ---------------------------------------------------------------------------------------------------------


def spec_dict(params: Params, topics: tuple[str, str], checkpoint: Path, max_offsets: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "window": {"kind": "time", "size_ms": int(params.window_s * 1000)},
        "allowed_lateness_ms": params.lateness_ms,
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "topic": topics[0], "key": "k"},
            "S": {"fields": {"k": "int", "a": "int"}, "topic": topics[1], "key": "k"},
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": params.join_partitions,
        "slots": params.slots,
        "trigger_ms": 0,
        "checkpoint": str(checkpoint),
    }
    if max_offsets:
        spec["max_offsets_per_trigger"] = max_offsets
    return spec


def new_topics(label: str) -> tuple[str, str]:
    """Fresh R and S topics named after `label`, made Kafka-legal (a peer's name holds "+")."""
    tag, legal = uuid.uuid4().hex[:8], re.sub(r"[^A-Za-z0-9._-]", "-", label)
    return (f"bench-{legal}-r-{tag}", f"bench-{legal}-s-{tag}")


def topic_rows(bootstrap: str, topics: tuple[str, ...]) -> int:
    """Records held by `topics` (the end taken from a Fetch response: Tansu's ListOffsets under-reports)."""
    from confluent_kafka import Consumer

    from windjoin.connectors.kafka.range_reader import list_partitions, probe_partition_bounds
    from windjoin.connectors.kafka.source_options import KafkaSourceOptions

    options = KafkaSourceOptions(bootstrap_servers=bootstrap, topics=topics)
    consumer = Consumer(options.consumer_config(**{"fetch.wait.max.ms": 10}))
    try:
        bounds = probe_partition_bounds(consumer, list_partitions(consumer, topics, 10.0), 10.0)
    finally:
        consumer.close()
    return sum(high - low for low, high in bounds.values())


# ---------------------------------------------------------------------------------------------------------
# The two queries
# ---------------------------------------------------------------------------------------------------------


def start_windjoin(
    spark: Any, spec: dict[str, Any], bootstrap: str, sink: WindjoinDelays, outcomes: list, extra: tuple = ()
) -> Any:
    from windjoin.operators.spec import parse_spec
    from windjoin.pipelines.job.join_job import start_job

    def on_batch(outcome: Any) -> None:
        outcomes.append(outcome)
        sink(outcome)

    return start_job(spark, parse_spec(spec), bootstrap, list(extra), on_batch=on_batch)


def progress_rows(query: Any) -> list[dict[str, Any]]:
    """The query's progress reports, `numInputRows` being the Kafka records each batch read (`records_read`)."""
    out = []
    for report in query.recentProgress:
        p = json.loads(report.json) if hasattr(report, "json") else dict(report)
        read = records_read(p)
        if read is not None:
            p["numInputRows"] = read
        out.append(p)
    return out


def records_read(progress: dict[str, Any]) -> int | None:
    """Kafka records a batch read, from its sources' offsets (`{"partitions": {"topic:p": next offset}}`; a first
    batch starts at 0: fresh topics); None when a source's offsets are not of that form. Spark's numInputRows counts
    rows out of the source, and windjoin's reader hands the job Arrow pieces (a few rows a batch), not records."""
    total = 0
    for source in progress.get("sources", []):
        start, end = (_partitions(source.get(key)) for key in ("startOffset", "endOffset"))
        if end is None:
            return None
        total += sum(end.values()) - sum((start or {}).get(k, 0) for k in end)
    return total if progress.get("sources") else None


def _partitions(offset: Any) -> dict[str, int] | None:
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except ValueError:
            return None
    parts = offset.get("partitions") if isinstance(offset, dict) else None
    return {k: int(v) for k, v in parts.items()} if isinstance(parts, dict) else None


def processed_rows(query: Any) -> int:
    return sum(int(p["numInputRows"]) for p in progress_rows(query))


def wait_rows(query: Any, rows: int, timeout_s: float, poll_s: float = 1.0) -> bool:
    """Whether `query` processed `rows` rows within `timeout_s`. False as soon as it went idle after reading some
    (its last progress report ran no batch: Spark's no-data report, without `addBatch`): its source sees no more
    to read. Spark's Kafka source on Tansu stops short of a partition's end (Tansu's ListOffsets under-reports
    it), and would otherwise wait out the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"query {query.name} failed: {query.exception()}")
        progress = progress_rows(query)
        done = sum(int(p["numInputRows"]) for p in progress)
        if done >= rows:
            return True
        if done and "addBatch" not in progress[-1]["durationMs"]:
            return False
        time.sleep(poll_s)
    return False


def sustained(progress: list[dict[str, Any]], warmup_rows: int) -> dict[str, Any]:
    """Input rows/s over the batches after `warmup_rows` (and at least the first batch) were processed."""
    batches = [p for p in progress if int(p["numInputRows"]) > 0]
    done, first = 0, None
    for i, p in enumerate(batches):
        if done >= warmup_rows and i >= 1:
            first = i
            break
        done += int(p["numInputRows"])
    if first is None or first >= len(batches):
        return {"rows_per_s": None, "batches": 0, "rows": 0, "seconds": 0.0, "warmup_rows": done, "batch_ids": []}
    steady = batches[first:]
    rows = sum(int(p["numInputRows"]) for p in steady)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
    return {
        "batch_ids": [int(p["batchId"]) for p in steady],
        "rows_per_s": rows / seconds,
        "batches": len(steady),
        "rows": rows,
        "seconds": seconds,
        "warmup_rows": done,
        "duration_ms_mean": {
            k: float(np.mean([p["durationMs"].get(k, 0) for p in steady]))
            for k in (
                "triggerExecution",
                "addBatch",
                "queryPlanning",
                "latestOffset",
                "getBatch",
                "walCommit",
                "commitOffsets",
            )
        },
    }


# ---------------------------------------------------------------------------------------------------------
# Phases
# ---------------------------------------------------------------------------------------------------------


class Bench:
    """One benchmark run: the broker, the SparkSession, a work folder, and the phases."""

    def __init__(self, params: Params, workdir: Path, bootstrap: str, spark: Any) -> None:
        self.params = params
        self.workdir = workdir
        self.bootstrap = bootstrap
        self.spark = spark
        self.log = workdir / "generator.log"
        self.join_type = "inner"  # or "left": the task's type, and the built-in's left outer join

    def spec_dict(self, topics: tuple[str, str], checkpoint: Path, max_offsets: int | None) -> dict[str, Any]:
        """The join spec of this run's windjoin queries (a subclass benchmarks another workload)."""
        spec = spec_dict(self.params, topics, checkpoint, max_offsets)
        spec["tasks"][0]["type"] = self.join_type
        return spec

    def extra_sinks(self, label: str) -> tuple:
        """Sinks a windjoin query writes to besides the counting one (none: the pipeline's cheapest end)."""
        return ()

    def _spec_file(self, topics: tuple[str, str], label: str, max_offsets: int | None) -> tuple[dict, Path]:
        checkpoint = self.workdir / f"ckpt-{label}-{uuid.uuid4().hex[:6]}"
        spec = self.spec_dict(topics, checkpoint, max_offsets)
        path = self.workdir / f"spec-{label}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return spec, path

    def prefill(self, density: float, events: int) -> dict[str, Any]:
        """Fresh topics holding `events` events whose event times are spaced `density` events/s apart."""
        p = self.params
        self.density = density
        self.prefill_topics = new_topics("prefill")
        _, path = self._spec_file(self.prefill_topics, "prefill", None)
        started = time.perf_counter()
        proc = run_generator(generate_cmd(path, self.bootstrap, p, density, events / density, pace=False), self.log)
        if proc.wait() != 0:
            raise RuntimeError(f"prefill generator failed, see {self.log}")
        rows = topic_rows(self.bootstrap, self.prefill_topics)
        return {"events": rows, "event_time_rate": density, "seconds": time.perf_counter() - started}

    def warmup_rows(self) -> int:
        p = self.params
        return int(self.density * (p.window_s + p.lateness_ms / 1000))

    def needed_rows(self, total: int, mopt: int) -> int:
        """Rows for the warm-up batches and three steady batches of `mopt` rows (at most the prefill)."""
        warm = max(1, -(-self.warmup_rows() // mopt))
        return min(total, (warm + 3) * mopt)

    def windjoin_throughput(self, total: int, mopt: int) -> dict[str, Any]:
        spec, _ = self._spec_file(self.prefill_topics, "wj-thr", mopt)
        sink, outcomes = WindjoinDelays(), []
        stages = SparkStages(self.spark)
        started = time.perf_counter()
        query = start_windjoin(self.spark, spec, self.bootstrap, sink, outcomes, self.extra_sinks("wj-thr"))
        try:
            wait_rows(query, self.needed_rows(total, mopt), timeout_s=self.params.throughput_seconds)
        finally:
            query.stop()
        progress = progress_rows(query)
        result = sustained(progress, self.warmup_rows())
        steady = set(result["batch_ids"])
        result["stages"] = stages.breakdown(str(query.runId), steady)
        result.update(
            pairs=sink.pairs,
            wall_s=time.perf_counter() - started,
            max_offsets_per_trigger=mopt,
            profile=windjoin_profile(progress, outcomes, sink, self.warmup_rows()),
        )
        return result

    def catch_up(self, events: int) -> dict[str, Any]:
        """A job started over a backlog of `events` rows (down for a while, or started after its producers), with
        the spec's default batch size and aligned reading: rows/s over the whole drain, the steady rate within
        it, and per batch its rows, time, state spans and the driver's memory (which must not grow with the
        backlog)."""
        p = self.params
        topics = new_topics("catchup")
        _, gen_path = self._spec_file(topics, "catchup-gen", None)
        proc = run_generator(
            generate_cmd(gen_path, self.bootstrap, p, self.density, events / self.density, False), self.log
        )
        if proc.wait() != 0:
            raise RuntimeError(f"catch-up generator failed, see {self.log}")
        total = topic_rows(self.bootstrap, topics)
        spec, _ = self._spec_file(topics, "catchup", None)
        sink, outcomes, batches = WindjoinDelays(), [], []
        load_before = load_avg()
        started = time.perf_counter()

        def on_batch(outcome: Any) -> None:
            outcomes.append(outcome)
            sink(outcome)
            batches.append(
                {
                    "batch_id": outcome.batch_id,
                    "rows": outcome.records,
                    "at_s": time.perf_counter() - started,
                    "state_span_ms": outcome.state_span_ms,
                    "held_span_ms": outcome.held_span_ms,
                    "late": outcome.dead_by_reason.get("late", 0),
                    **driver_memory(self.spark),
                }
            )

        from windjoin.operators.spec import parse_spec
        from windjoin.pipelines.job.join_job import start_job

        query = start_job(self.spark, parse_spec(spec), self.bootstrap, [], on_batch=on_batch)
        try:
            drained = wait_rows(query, total, timeout_s=p.catchup_seconds)
        finally:
            query.stop()
        wall = batches[-1]["at_s"] if batches else time.perf_counter() - started
        rows = sum(b["rows"] for b in batches)
        steady = sustained(progress_rows(query), self.warmup_rows())
        half = len(batches) // 2
        return {
            "backlog_rows": total,
            "drained": drained,
            "rows": rows,
            "batches": len(batches),
            "max_offsets_per_trigger": spec.get("max_offsets_per_trigger", "default"),
            "rows_per_s": rows / wall if wall else None,
            "steady_rows_per_s": steady["rows_per_s"],
            "late": sum(b["late"] for b in batches),
            "pairs": sink.pairs,
            "max_state_span_ms": max((b["state_span_ms"] for b in batches), default=0),
            "max_held_span_ms": max((b["held_span_ms"] for b in batches), default=0),
            # the driver's memory in the first and second half of the drain: equal, not growing with the backlog
            "driver_rss_mb_first_half_max": max((b["driver_rss_mb"] for b in batches[:half]), default=None),
            "driver_rss_mb_second_half_max": max((b["driver_rss_mb"] for b in batches[half:]), default=None),
            "per_batch": batches,
            "load_avg": [load_before, load_avg()],
        }

    def stage_rates(self, total: int) -> dict[str, Any]:
        """Rows/s of windjoin's leading stages alone, same topics and batch size: the Kafka source, then the
        source with the adapter inside its reader (the join job's input), each to a count sink; the first batch
        is left out."""
        from windjoin.connectors.kafka.source import SOURCE_NAME, register_kafka_source
        from windjoin.operators.partitioning import RoutingTable
        from windjoin.operators.spec import parse_spec
        from windjoin.pipelines.job.adapted_source import read_adapted
        from windjoin.pipelines.job.adapter import Adapter
        from windjoin.pipelines.job.join_job import slot_labels

        p = self.params
        register_kafka_source(self.spark)
        spec = parse_spec(spec_dict(p, self.prefill_topics, self.workdir / "unused", p.max_offsets))
        rows = min(total, p.max_offsets * p.stage_batches)
        out = {}
        options = {"bootstrap.servers": self.bootstrap, "startingOffsets": "earliest"}
        options["maxOffsetsPerTrigger"] = str(p.max_offsets)
        for label in ("source", "source_adapter"):
            if label == "source_adapter":
                routing = RoutingTable.round_robin(spec.partitions, spec.slots)
                df = read_adapted(self.spark, Adapter(spec, routing, slot_labels(self.spark, 2)), options)
            else:
                reader = self.spark.readStream.format(SOURCE_NAME).option("topics", ",".join(self.prefill_topics))
                df = reader.options(**options).load()
            query = (
                df.writeStream.foreachBatch(lambda batch, _id: batch.count())
                .option("checkpointLocation", str(self.workdir / f"ckpt-{label}-{uuid.uuid4().hex[:6]}"))
                .trigger(processingTime="0 seconds")
                .start()
            )
            try:
                wait_rows(query, rows, timeout_s=300)
            finally:
                query.stop()
            out[label] = sustained(progress_rows(query), 1)
        return out

    def builtin_throughput(self, total: int, mopt: int, config: str) -> dict[str, Any]:
        p = self.params
        sink = BuiltinSink()
        checkpoint = self.workdir / f"ckpt-bi-thr-{config}-{uuid.uuid4().hex[:6]}"
        started = time.perf_counter()
        query = self.start_builtin(config, self.prefill_topics, sink, checkpoint, mopt)
        try:
            wait_rows(query, self.needed_rows(total, mopt), timeout_s=p.throughput_seconds)
        finally:
            query.stop()
        progress = progress_rows(query)
        result = sustained(progress, self.warmup_rows())
        result.update(
            pairs=sink.pairs,
            wall_s=time.perf_counter() - started,
            max_offsets_per_trigger=mopt,
            rows_read=sum(int(x["numInputRows"]) for x in progress),
            state=[x.get("stateOperators", []) for x in progress[-1:]],
            config=config,
            evidence=evidence(config, checkpoint),
        )
        return result

    def start_builtin(self, config: str, topics: tuple[str, str], sink: Any, checkpoint: Path, mopt: int) -> Any:
        """The built-in join over `topics` in configuration `config` (`builtin_peer.peers()`)."""
        p = self.params
        window_ms, lateness = int(p.window_s * 1000), p.lateness_ms
        how = {"inner": "inner", "left": "left_outer"}[self.join_type]
        return start_builtin(
            self.spark, config, topics, self.bootstrap, sink, checkpoint, mopt, window_ms, lateness, how
        )

    def left_outer(self, total: int, mopt: int) -> dict[str, Any]:
        """The same topics joined left outer (an R tuple alone once its window closes) by windjoin's task and by
        the built-in join in each configuration, all at `mopt` rows a batch: sustained rows/s, the built-in's
        faster configuration the baseline."""
        self.join_type = "left"
        try:
            windjoin = self.windjoin_throughput(total, mopt)
            configs = {c: self.builtin_throughput(total, mopt, c) for c in peers(self.params.peers)}
        finally:
            self.join_type = "inner"
        baseline = best(configs, lambda run: run["rows_per_s"])
        w, b = windjoin["rows_per_s"], configs[baseline]["rows_per_s"]
        return {
            "windjoin": windjoin,
            "builtin_configs": configs,
            "builtin_config": baseline,
            "ratio_throughput": w / b if w and b else None,
        }

    def paced(self, system: str, rate: float, config: str = "") -> dict[str, Any]:
        """Produce at `rate` events/s (both streams) for `paced_seconds`, paced; delays of the pairs (the built-in
        join in configuration `config`)."""
        from windjoin.connectors.kafka.admin import create_topics

        p = self.params
        topics = new_topics(f"paced-{system}")
        create_topics(self.bootstrap, list(topics), p.topic_partitions)
        spec, path = self._spec_file(topics, f"paced-{system}", p.max_offsets)
        outcomes: list = []
        if system == "windjoin":
            sink: Any = WindjoinDelays(since_ms=2**62)
            query = start_windjoin(self.spark, spec, self.bootstrap, sink, outcomes, self.extra_sinks("paced"))
        else:
            sink = BuiltinSink(since_ms=2**62)
            checkpoint = self.workdir / f"ckpt-paced-bi-{uuid.uuid4().hex[:6]}"
            query = self.start_builtin(config, topics, sink, checkpoint, p.max_offsets)
        proc = None
        try:
            deadline = time.monotonic() + 60
            while query.lastProgress is None and time.monotonic() < deadline:  # source planned, first trigger done
                time.sleep(0.2)
            lowered = lower_spark_priority(self.spark)  # the generator keeps its schedule beside a saturated Spark
            gen_log = self.workdir / f"generator-paced-{system}-{uuid.uuid4().hex[:4]}.log"
            proc = run_generator(generate_cmd(path, self.bootstrap, p, rate, p.paced_seconds, pace=True), gen_log)
            start_ms = schedule_start_ms(gen_log, proc)  # encoded in advance: the schedule starts after that
            sink.since_ms = start_ms + int(p.paced_warmup_s * 1000)
            proc.wait(timeout=max(0.0, start_ms / 1000 - time.time()) + p.paced_seconds + 120)
            gen_wall = time.time() - start_ms / 1000
            produced = topic_rows(self.bootstrap, topics)
            drained = wait_rows(query, produced, timeout_s=30)
            backlog = produced - processed_rows(query)
        finally:
            if proc is not None:
                stop_process(proc)
            query.stop()
        startup_lag_s, gen_lag = generator_lags(gen_log)
        correction = int(round(startup_lag_s * 1000))
        progress = progress_rows(query)
        busy = [x for x in progress if int(x["numInputRows"]) > 0]
        result: dict[str, Any] = {
            "rate": rate,
            "topics": list(topics),
            "seconds": p.paced_seconds,
            "produced": produced,
            "generator_wall_s": gen_wall,
            "generator_startup_lag_s": startup_lag_s,
            "generator_lag": gen_lag,
            **verdict(gen_lag),
            "spark_nice": {"nice": SPARK_NICE, "policy": "SCHED_IDLE", "threads_lowered_at_start": lowered},
            "kept_up": drained,
            "backlog_rows_at_end": backlog,
            "pairs": sink.pairs,
            "batches": len(busy),
            "batch_seconds_mean": float(np.mean([x["durationMs"]["triggerExecution"] for x in busy]) / 1000)
            if busy
            else None,
            "batch_rows_mean": float(np.mean([int(x["numInputRows"]) for x in busy])) if busy else None,
        }
        if config:
            result["config"] = config
            result["evidence"] = evidence(config, checkpoint)
        # Arrival = event time + the generator's start-up lag (pacing re-based after its first batch).
        for name, hist in (("sink", sink.received), ("emitted", getattr(sink, "emitted", None))):
            if hist is not None:
                result[f"delay_{name}"] = shifted(hist, correction).summary()
        if system == "windjoin":
            result["profile"] = windjoin_profile(progress, outcomes, sink, 0)
        return result


def windjoin_profile(progress: list[dict], outcomes: list, sink: WindjoinDelays, warmup_rows: int) -> dict[str, Any]:
    """Where a windjoin batch's time goes, averaged over the batches after the warm-up (seconds)."""
    by_id = {o.batch_id: o for o in outcomes}
    sink_s = {b["batch_id"]: b["sink_s"] for b in sink.batches}
    rows: list[dict[str, float]] = []
    done = 0
    for p in progress:
        n = int(p["numInputRows"])
        if n == 0:
            continue
        done += n
        if done - n < warmup_rows:
            continue
        outcome = by_id.get(int(p["batchId"]))
        slots = [s["seconds"] for s in outcome.stats] if outcome else []
        d = p["durationMs"]
        rows.append(
            {
                "rows": n,
                "trigger_s": d["triggerExecution"] / 1000,
                "add_batch_s": d.get("addBatch", 0) / 1000,
                "planning_s": d.get("queryPlanning", 0) / 1000,
                "latest_offset_s": d.get("latestOffset", 0) / 1000,
                "commits_s": (d.get("walCommit", 0) + d.get("commitOffsets", 0)) / 1000,
                "slot_handler_max_s": max(slots, default=0.0),
                "slot_handler_sum_s": sum(slots),
                "sink_s": sink_s.get(int(p["batchId"]), 0.0),
            }
        )
    if not rows:
        return {}
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    mean["other_in_add_batch_s"] = mean["add_batch_s"] - mean["slot_handler_max_s"] - mean["sink_s"]
    mean["batches"] = len(rows)
    return mean


class SparkStages:
    """Stage timings from Spark's monitoring REST API (the UI runs on a loopback port for this)."""

    def __init__(self, spark: Any) -> None:
        self.base = spark.sparkContext.uiWebUrl
        self.app = spark.sparkContext.applicationId

    def _get(self, path: str) -> Any:
        import urllib.request

        if not self.base:
            return []
        with urllib.request.urlopen(f"{self.base}/api/v1/applications/{self.app}/{path}", timeout=30) as resp:
            return json.loads(resp.read())

    def breakdown(self, run_id: str, batch_ids: set[int]) -> dict[str, Any]:
        """windjoin's two stages per batch, averaged over the batches `batch_ids` of the query run `run_id`:
        the read stage (one task per Kafka partition: source, adapter, shuffle write) and the join stage
        (one task per slot: transformWithStateInPandas, output to the driver); wall seconds per stage,
        task seconds, and the JVM's own CPU seconds (Python workers' CPU is not in it)."""
        stages = []
        for stage in self._get("stages?status=complete"):
            found = re.search(r"runId = (\S+)\s+batch = (\d+)", stage.get("description") or "")
            if found and found.group(1) == run_id and int(found.group(2)) in batch_ids:
                stages.append(stage)
        out: dict[str, Any] = {}
        for label, key in (("read_stage", "inputRecords"), ("join_stage", "shuffleReadRecords")):
            # The read stage reads the source (input records); the join stage reads the shuffle.
            chosen = [s for s in stages if s.get(key, 0) > 0]
            if not chosen:
                continue
            walls = [_stage_wall(s) for s in chosen]
            task_s = []
            for s in chosen[-3:]:
                for t in self._get(f"stages/{s['stageId']}/{s['attemptId']}/taskList?length=1000"):
                    task_s.append(t.get("duration", 0) / 1000)
            out[label] = {
                "stages": len(chosen),
                "wall_s_mean": float(np.mean(walls)),
                "task_s_sum_mean": float(np.mean([s["executorRunTime"] for s in chosen]) / 1000),
                "jvm_cpu_s_mean": float(np.mean([s["executorCpuTime"] for s in chosen]) / 1e9),
                "task_s_median": float(np.median(task_s)) if task_s else None,
                "gc_s_mean": float(np.mean([s["jvmGcTime"] for s in chosen]) / 1000),
                "result_mb_mean": float(np.mean([s["resultSize"] for s in chosen]) / 1e6),
            }
        return out


def _stage_wall(stage: dict[str, Any]) -> float:
    from datetime import datetime

    def parse(text: str) -> float:
        return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()

    return parse(stage["completionTime"]) - parse(stage["submissionTime"])


def adapter_rate(params: Params, n: int = 100_000) -> dict[str, float]:
    """The adapter's decode/check/route rate on JSON records of this workload, alone, in this process."""
    import orjson

    from windjoin.connectors.kafka.range_reader import ARROW_SCHEMA
    from windjoin.operators.partitioning import RoutingTable
    from windjoin.operators.spec import parse_spec
    from windjoin.pipelines.job.adapter import Adapter

    spec = parse_spec(spec_dict(params, ("r", "s"), Path("unused"), None))
    adapter = Adapter(spec, RoutingTable.round_robin(spec.partitions, spec.slots), (2, 0))
    rng = np.random.default_rng(0)
    keys = rng.integers(0, params.keys, n)
    values = [orjson.dumps({"ts": 1_700_000_000_000 + i, "k": int(keys[i]), "x": i % 10_000}) for i in range(n)]
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(["r"] * n),
            pa.array(np.zeros(n, np.int32)),
            pa.array(np.arange(n)),
            pa.array([str(k).encode() for k in keys], pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(np.full(n, 1_700_000_000_000 + n)),  # Kafka record times: none of them refused as future
        ],
        schema=ARROW_SCHEMA,
    )
    adapter.adapt(batch.slice(0, 1000))
    started = time.perf_counter()
    adapted = adapter.adapt(batch)
    seconds = time.perf_counter() - started
    refused = len(adapted) - adapted.column("reason").null_count
    if refused:  # the rate of the refusal path is not the adapter's rate
        raise RuntimeError(f"adapter_rate: {refused} of {n} records refused: {adapted.column('detail')[0]}")
    return {"rows": n, "seconds": seconds, "rows_per_s": n / seconds}


# ---------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------


def driver_memory(spark: Any) -> dict[str, float]:
    """The driver's resident memory (its Python process plus the JVM it started) and the JVM's heap in use, MB."""
    rss = _rss_mb(os.getpid())
    proc = getattr(spark.sparkContext._gateway, "proc", None)  # the local JVM, when pyspark launched it
    jvm_rss = _rss_mb(proc.pid) if proc is not None else 0.0
    runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    heap = (runtime.totalMemory() - runtime.freeMemory()) / 2**20
    return {"driver_rss_mb": rss + jvm_rss, "python_rss_mb": rss, "jvm_rss_mb": jvm_rss, "jvm_heap_mb": heap}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def load_avg() -> list[float]:
    return list(os.getloadavg())


def _fmt(value: Any, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def print_table(result: dict[str, Any]) -> None:
    wj, bi = result["windjoin"], result["builtin"]
    print(f"\n{'':34} {'windjoin':>14} {'built-in join':>14} {'ratio':>8}")
    thr_w, thr_b = wj["throughput"]["rows_per_s"], bi["throughput"]["rows_per_s"]
    ratio = _fmt(result["ratio_throughput"], ".2f")
    print(f"{'sustained input rows/s':34} {_fmt(thr_w):>14} {_fmt(thr_b):>14} {ratio:>7}x")
    for w_row, b_row in zip(wj.get("sweep", []), bi.get("sweep", []), strict=False):
        label = f"  at maxOffsetsPerTrigger {w_row['max_offsets_per_trigger']:,}"
        print(f"{label:34} {_fmt(w_row['rows_per_s']):>14} {_fmt(b_row['rows_per_s']):>14}")
    for name, run in result.get("builtin_configs", {}).items():
        ran = all(row.get("evidence", {}).get("in_effect") for row in run["sweep"])
        label = f"  built-in {name}{' (baseline)' if name == bi.get('config') else ''}"
        print(f"{label:34} {'':>14} {_fmt(run['throughput']['rows_per_s']):>14}  in effect: {ran}")
    phases = (("paced at 80% of windjoin's rate", "paced"), ("paced at 80% of the built-in's", "paced_at_builtin_rate"))
    for label, key in phases:
        w, b = wj.get(key), bi.get(key)
        if not (w or b):
            continue
        rate = (w or b)["rate"]
        print(f"{label} ({rate:,.0f} rows/s)")
        for q in ("p50_ms", "p99_ms"):
            wv = w["delay_sink"][q] if w else None
            bv = b["delay_sink"][q] if b else None
            print(f"  {'delay ' + q[:3] + ' at sink, ms':32} {_fmt(wv):>14} {_fmt(bv):>14}")
        if w and "delay_emitted" in w:
            for q in ("p50_ms", "p99_ms"):
                print(f"  {'delay ' + q[:3] + ' emitted_at, ms':32} {_fmt(w['delay_emitted'][q]):>14} {'':>14}")
        print(f"  {'kept up (backlog rows at end)':32} {_kept(w):>14} {_kept(b):>14}")
        print(f"  {'generator behind, p99/max s':32} {_lag(w):>14} {_lag(b):>14}")
    prof, stages = wj["throughput"].get("profile") or {}, wj["throughput"].get("stages") or {}
    if prof:
        print(f"\nwindjoin, where a steady batch's time goes ({prof['rows']:,.0f} rows, seconds per batch):")
        read, join = stages.get("read_stage", {}), stages.get("join_stage", {})
        parts = {
            "trigger (whole batch)": prof["trigger_s"],
            "  planning + latestOffset + commits": prof["planning_s"] + prof["latest_offset_s"] + prof["commits_s"],
            "  addBatch": prof["add_batch_s"],
            "    read stage (source, adapter, shuffle write)": read.get("wall_s_mean"),
            "    join stage (transformWithStateInPandas)": join.get("wall_s_mean"),
            "      slot handler, slowest slot": prof["slot_handler_max_s"],
            "    driver: collect, results, sink": prof["add_batch_s"]
            - read.get("wall_s_mean", 0)
            - join.get("wall_s_mean", 0)
            if read and join
            else None,
        }
        for label, value in parts.items():
            print(f"  {label:50} {_fmt(value, '.2f'):>8}")
        alone = result.get("stages_alone", {})
        if alone:
            print("  stages alone, rows/s: " + ", ".join(f"{k} {_fmt(v['rows_per_s'])}" for k, v in alone.items()))
    for kind, run in result.get("floor", {}).items():
        print(
            f"floor {kind} (rate source, the adapted rows' columns): {_fmt(run['rows_per_s'])} rows/s, "
            f"{_fmt(run['rows_per_batch_median'])} rows in {_fmt(run['batch_ms_median'])} ms per batch"
        )
    print(f"\ntargets: {result['targets']}")


def _lag(run: dict | None) -> str:
    """The paced generator's lag behind its schedule, p99/max (arrivals later than event time by this much), and
    VOID when the phase measured the generator rather than the job."""
    lag = (run or {}).get("generator_lag") or {}
    if not lag:
        return "-"
    text = f"{lag.get('p99_s', lag['mean_s']):.2f}/{lag['max_s']:.2f}"
    return f"{text} VOID" if run and run.get("void") else text


def _kept(run: dict | None) -> str:
    if not run:
        return "-"
    return f"{'yes' if run['kept_up'] else 'no'} ({run['backlog_rows_at_end']:,})"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    names = ["windjoin", "built-in"]
    rates = [result["windjoin"]["throughput"]["rows_per_s"] or 0, result["builtin"]["throughput"]["rows_per_s"] or 0]
    ax1.bar(names, rates, color=["tab:blue", "tab:orange"])
    ax1.set_ylabel("sustained input rows/s")
    ax1.set_title("throughput (2 cores)")
    for i, system in enumerate(("windjoin", "builtin")):
        run = result[system].get("paced")
        if run:
            vals = [run["delay_sink"]["p50_ms"] or 0, run["delay_sink"]["p99_ms"] or 0]
            ax2.bar([i - 0.2, i + 0.2], [v / 1000 for v in vals], width=0.4, color=["tab:green", "tab:red"])
    ax2.axhline(2.0, color="grey", linestyle="--", linewidth=1, label="target p99 < 2 s")
    ax2.set_xticks([0, 1], names)
    ax2.set_ylabel("production delay at the sink, s (p50 green, p99 red)")
    ax2.legend(loc="upper right")
    ax2.set_title(f"paced at {result['paced_rate']:,.0f} rows/s")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------


QUICK = {
    "prefill_events": 80_000,
    "prefill_rate": 8_000.0,
    "window_s": 2.0,
    "max_offsets": 20_000,
    "sweep_offsets": "20000",
    "throughput_seconds": 60.0,
    "paced_seconds": 12.0,
    "paced_warmup_s": 4.0,
    "calibrate": False,
    "catchup_events": 60_000,
    "catchup_seconds": 120.0,
    "floor_seconds": 8.0,
}


def best_of(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the highest sustained rate, and a summary of every batch size tried."""
    sweep = [
        {
            "max_offsets_per_trigger": r["max_offsets_per_trigger"],
            "rows_per_s": r["rows_per_s"],
            "steady_batches": r["batches"],
            "batch_s_mean": r["seconds"] / r["batches"] if r["batches"] else None,
            **({"evidence": r["evidence"]} if "evidence" in r else {}),
        }
        for r in runs
    ]
    for row in sweep:
        ran = row.get("evidence")
        print(
            f"{name} sustained at maxOffsetsPerTrigger {row['max_offsets_per_trigger']:,}: "
            f"{_fmt(row['rows_per_s'])} rows/s ({row['steady_batches']} steady batches); load {load_avg()}"
            + (f"; ran with {ran}" if ran else ""),
            flush=True,
        )
    return {"throughput": max(runs, key=lambda r: r["rows_per_s"] or 0), "sweep": sweep}


def builtin_baseline(configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The built-in join's figures in its faster configuration (higher sustained rows/s): the baseline."""
    name = best(configs, lambda run: run["throughput"]["rows_per_s"])
    return {**configs[name], "config": name}


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, Params]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small prefill, 2 s window, short paced runs")
    parser.add_argument(
        "--catch-up-only", action="store_true", help="only the catch-up phase (at --prefill-rate), into --out"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--workdir", type=Path, default=None, help="checkpoints, specs, logs (default: a temp dir)")
    add_param_flags(parser, Params())
    args = parser.parse_args(argv)
    return args, params_from(args, Params(), QUICK)


def open_session(state_dir: Path, app_name: str) -> tuple[str, Any]:
    """The embedded Kafka broker (state under `state_dir`) and a local[2] SparkSession set up for windjoin with
    its monitoring REST API on a free loopback port; returns the bootstrap address and the session."""
    from windjoin.connectors.local import services
    from windjoin.connectors.local.processes import free_port
    from windjoin.connectors.spark.session import build_local_spark
    from windjoin.pipelines.job.join_job import STATE_CONF

    [kafka] = services.up(services.ServicesConfig(state_dir=state_dir, redis=False))
    spark = build_local_spark(
        app_name=app_name,
        conf={
            **STATE_CONF,
            "spark.driver.memory": "4g",
            "spark.sql.streaming.numRecentProgressUpdates": "1000",
            "spark.ui.showConsoleProgress": "false",
            "spark.ui.enabled": "true",  # for stage timings from the monitoring REST API
            "spark.ui.port": str(free_port()),
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return kafka.service.url, spark


def _catch_up_line(run: dict[str, Any]) -> str:
    return (
        f"{run['rows']:,} of {run['backlog_rows']:,} rows in {run['batches']} batches, "
        f"{_fmt(run['rows_per_s'])} rows/s (steady {_fmt(run['steady_rows_per_s'])}), late {run['late']}, "
        f"state span <= {run['max_state_span_ms']} ms "
        f"(held {run['max_held_span_ms']}), driver RSS {_fmt(run['driver_rss_mb_first_half_max'])} -> "
        f"{_fmt(run['driver_rss_mb_second_half_max'])} MB"
    )


def finish_catch_up_only(result: dict[str, Any], out: Path) -> None:
    """Put a catch-up-only run into the results file beside the last full run's figures (and say so)."""
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous["catch_up"] = {**result["catch_up"], "date": result["date"], "machine": result["machine"]}
    previous["catch_up"]["note"] = "measured by --catch-up-only, not in the same run as the other phases"
    print(write_results(previous, out, plot))


def main(argv: list[str] | None = None) -> None:
    args, params = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="windjoin-bench-pipeline-"))
    workdir.mkdir(parents=True, exist_ok=True)
    state_dir = workdir / "services"
    facts = machine_facts()
    result: dict[str, Any] = {
        "benchmark": "pipeline",
        "workload": (
            f"two JSON streams R(ts,k,x), S(ts,k,a), Poisson arrivals, k from a b-model (b={params.skew:g}) over "
            f"{params.keys:,} values, "
            f"R.k = S.k AND |R.ts - S.ts| <= {params.window_s:g} s, lateness/watermark {params.lateness_ms} ms"
        ),
        "machine": facts,
        "date": facts["date"],
        "quick": args.quick,
        "params": asdict(params),
        "load_avg_start": load_avg(),
    }
    started = time.perf_counter()
    spark = None
    exit_on_sigterm()
    try:  # whatever happens, the broker, the generators and Spark stop (tear_down)
        bootstrap, spark = open_session(state_dir, "windjoin-bench-pipeline")
        bench = Bench(params, workdir, bootstrap, spark)
        print(f"workdir {workdir}; broker {bootstrap}; load {load_avg()}", flush=True)
        if args.catch_up_only:  # at the prefill's density, without the other phases
            bench.density = params.prefill_rate
            result["catch_up"] = bench.catch_up(params.catchup_events)
            print(f"catch-up: {_catch_up_line(result['catch_up'])}", flush=True)
            return finish_catch_up_only(result, args.out)
        result["adapter_alone"] = adapter_rate(params)
        offsets = [int(x) for x in params.sweep_offsets.split(",")]
        density, events = params.prefill_rate, params.prefill_events
        if params.calibrate:
            # Window contents and pairs per tuple grow with the rate: measure where windjoin will run.
            bench.prefill(density, events)
            probe = bench.windjoin_throughput(events, params.max_offsets)
            density = round((probe["rows_per_s"] or density) / 1000) * 1000 or density
            bench.density = density
            events = max(events, max(bench.needed_rows(10**12, m) for m in offsets))
            result["calibration"] = {"probe_density": params.prefill_rate, "probe_rows_per_s": probe["rows_per_s"]}
            print(f"calibration: {_fmt(probe['rows_per_s'])} rows/s at density {params.prefill_rate:,.0f}", flush=True)
        prefill = bench.prefill(density, events)
        result["prefill"] = prefill
        print(
            f"prefill: {prefill['events']:,} events, density {density:,.0f}/s, {prefill['seconds']:.1f} s", flush=True
        )
        wj = best_of("windjoin", [bench.windjoin_throughput(prefill["events"], m) for m in offsets])
        result["stages_alone"] = bench.stage_rates(prefill["events"])
        stages = {k: _fmt(v["rows_per_s"]) for k, v in result["stages_alone"].items()}
        print(f"stages alone, rows/s: {stages}; load {load_avg()}", flush=True)
        configs = {
            c: best_of(f"built-in {c}", [bench.builtin_throughput(prefill["events"], m, c) for m in offsets])
            for c in peers(params.peers)
        }
        bi = builtin_baseline(configs)
        result["builtin_configs"] = configs  # each sweep row has the evidence of what ran
        print(f"built-in baseline: the faster configuration, {bi['config']}", flush=True)
        outer = bench.left_outer(prefill["events"], wj["throughput"]["max_offsets_per_trigger"])
        result["left_outer"] = outer
        peer = outer["builtin_configs"][outer["builtin_config"]]
        print(
            f"left outer: windjoin {_fmt(outer['windjoin']['rows_per_s'])} rows/s, built-in at its best "
            f"({outer['builtin_config']}) {_fmt(peer['rows_per_s'])} rows/s ({_fmt(outer['ratio_throughput'], '.2f')}x)"
            f"; load {load_avg()}",
            flush=True,
        )
        # Spark's own floor at the join job's batch size and row shape (rate source, no Kafka, no join)
        batch_rows = (wj["throughput"].get("profile") or {}).get("rows") or params.max_offsets
        # a 4 s trigger the floor keeps up with, so that every batch holds batch_rows (a slower one grows them)
        result["floor"] = floor(spark, params.floor_seconds, workdir, batch_rows / 4, trigger_s=4, wide=True)
        if not wj["throughput"]["rows_per_s"]:  # the paced phases run at a fraction of it
            raise RuntimeError(
                f"windjoin reached no steady batch within {params.throughput_seconds:g} s (load {load_avg()}): "
                "raise --throughput-seconds or run on a quieter machine"
            )
        rate = params.rate_fraction * wj["throughput"]["rows_per_s"]
        result["paced_rate"] = rate
        wj["paced"] = bench.paced("windjoin", rate)
        print(f"windjoin paced at {rate:,.0f}: {wj['paced']['delay_sink']}; load {load_avg()}", flush=True)
        bi["paced"] = bench.paced("builtin", rate, bi["config"])
        print(f"built-in paced at {rate:,.0f}: {bi['paced']['delay_sink']}; load {load_avg()}", flush=True)
        if params.paced_builtin_own and bi["throughput"]["rows_per_s"]:
            own = params.rate_fraction * bi["throughput"]["rows_per_s"]
            # both at the built-in's rate: a rate the generator can keep beside either system
            for system, runs, config in (("builtin", bi, bi["config"]), ("windjoin", wj, "")):
                runs["paced_at_builtin_rate"] = bench.paced(system, own, config)
                delays = runs["paced_at_builtin_rate"]["delay_sink"]
                print(f"{system} paced at {own:,.0f}: {delays}; load {load_avg()}", flush=True)
        result["windjoin"], result["builtin"] = wj, bi
        result["catch_up"] = bench.catch_up(params.catchup_events)
        print(f"catch-up: {_catch_up_line(result['catch_up'])}", flush=True)
    finally:
        tear_down(spark, state_dir, workdir if args.workdir is None else None)
    result["load_avg_end"] = load_avg()
    result["wall_s"] = time.perf_counter() - started
    thr_w, thr_b = wj["throughput"]["rows_per_s"], bi["throughput"]["rows_per_s"]
    result["ratio_throughput"] = thr_w / thr_b if thr_w and thr_b else None
    p99 = wj["paced"]["delay_emitted"]["p99_ms"]
    profile, stateful = wj["throughput"].get("profile") or {}, result["floor"]["stateful"]
    batch_over_floor = (  # windjoin's steady batch against Spark's trivial stateful query of the same rows
        profile["trigger_s"] * 1000 / stateful["batch_ms_median"]
        if profile.get("trigger_s") and stateful.get("batch_ms_median")
        else None
    )
    result["targets"] = {
        "windjoin_at_least_3x_builtin_throughput": bool(result["ratio_throughput"] and result["ratio_throughput"] >= 3),
        "batch_over_floor": batch_over_floor,
        "batch_at_most_1_5x_floor": bool(batch_over_floor and batch_over_floor <= 1.5),
        "windjoin_p99_delay_under_2s_at_80pct": None  # a void phase (its generator behind) decides nothing
        if wj["paced"]["void"]
        else bool(p99 is not None and p99 < 2000 and wj["paced"]["kept_up"]),
    }
    print_table(result)
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    if "latency" in previous:  # benchmarks.latency's key, measured apart: kept until that benchmark runs again
        result["latency"] = previous["latency"]
    print(write_results(result, args.out, plot))


if __name__ == "__main__":
    main()
