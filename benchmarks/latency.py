"""Latency benchmark: production delay and the per-batch time budget at paper 000's rate, beside Spark's floor.

Workload: paper 000's (4,000 tuples/s per stream, b-model keys with bias 0.7 over [0, 10^7], equi-join R.k = S.k,
time window 10 s, lateness 2 s; 4 topic partitions, 64 join partitions, 2 slots), produced live by `windjoin
generate --pace --preencode` (event time = scheduled arrival), with the job's real output path: Parquet and Redis
sinks.
Each variant runs on fresh topics and a fresh checkpoint for `--seconds`; pairs whose result time falls in the
first `--warmup` seconds are left out. Delays are corrected by the generator's start-up lag (it re-bases its
pacing after its first batch, so arrivals trail event times by that constant).

Variants: the spec's default trigger (1 s), batches back to back (`trigger_ms: 0`), and back to back with
`latency_target_ms`. Two delays per pair: to `emitted_at` (stamped in the slot when the pair is made) and to the
batch's end on the driver (after the sinks committed it: when a query can see it).

The peer, same rate, topics and source: Spark's built-in stream-stream join (`benchmarks.builtin_peer`) in both of
its configurations (default store with join state format 2; RocksDB with format 4), batches back to back into a
foreachBatch that counts pairs by result time; delay to commit = to the end of the batch that holds the pair
(Spark's progress report), and its batch times. The baseline is the configuration with the lower p99 delay.
The load is encoded before each run starts (`windjoin generate --preencode`); a run whose generator fell behind
its schedule is marked void (`benchmarks.paced_load.verdict`).

The floor, measured in the same run on the same SparkSession (`../shared/probes/spark_batch_floor.py`'s shape):
Spark's rate source into a noop sink, and the rate source through `groupBy(slot).transformWithStateInPandas`
holding one value per slot (RocksDB, changelog checkpointing, 2 slots) into a noop sink, batches back to back
at 2,000 rows/s: the median batch time of a trivial query of the job's shape. And the floor of delay to commit:
events arriving evenly behind the batches of the job's own shape with nothing in it (`benchmarks.pieces_floor`,
back to back) wait from their batch's cut to its end (`benchmarks.delays.uniform_arrival_delays`); the same model
on each windjoin run's own batches (`delay_to_commit_uniform`) checks it against the delays measured pair by pair.

Whatever happens (an error, Ctrl-C, SIGTERM), the broker, Redis, the generator and Spark are stopped (`teardown`).

    python -m benchmarks.latency [--quick]

Writes the `latency` key of benchmarks/results/pipeline.json (the other keys are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.builtin_peer import BuiltinSink, best, evidence, peers, start_builtin
from benchmarks.delays import DelayHistogram, batch_start_ms, uniform_arrival_delays
from benchmarks.machine import machine_facts
from benchmarks.paced_load import (
    generate_cmd,
    generator_lags,
    run_generator,
    schedule_start_ms,
    stop_process,
    verdict,
)
from benchmarks.pieces_floor import pieces_floor
from benchmarks.pipeline import RESULTS, Params, load_avg, new_topics, progress_rows
from benchmarks.spark_floor import floor
from benchmarks.teardown import exit_on_sigterm, tear_down

PAPER_RATE = 8_000.0  # events/s over both streams: paper 000's 4,000 tuples/s per stream


def run_variant(
    spark: Any, bootstrap: str, redis_url: str, workdir: Path, label: str, overrides: dict, args: argparse.Namespace
) -> dict[str, Any]:
    """One paced run of the join job with Parquet and Redis sinks; delays, batch sizes and time budgets."""
    from windjoin.operators.batch_size import fit_batch_cost
    from windjoin.operators.spec import load_spec
    from windjoin.pipelines.cli.produce import ensure_topics
    from windjoin.pipelines.job.join_job import start_job
    from windjoin.pipelines.job.sinks import build_sinks

    params = Params()
    topics = new_topics(label)
    spec = {
        "window": {"kind": "time", "size_ms": 10_000},
        "allowed_lateness_ms": 2000,
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "topic": topics[0], "key": "k"},
            "S": {"fields": {"k": "int", "a": "int"}, "topic": topics[1], "key": "k"},
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": 64,
        "slots": 2,
        "checkpoint": str(workdir / f"ckpt-{label}"),
        "sinks": {
            "parquet": {"path": str(workdir / f"parquet-{label}")},
            "redis": {"url": redis_url, "retain_ms": 600_000},
        },
        **overrides,
    }
    path = workdir / f"spec-{label}.yaml"
    path.write_text(yaml.safe_dump(spec))
    loaded = load_spec(path)
    ensure_topics(bootstrap, list(topics), params.topic_partitions)
    outcomes: list = []
    log = workdir / f"generator-{label}.log"
    query = start_job(spark, loaded, bootstrap, build_sinks(loaded), on_batch=outcomes.append, fresh_sinks=True)
    started_ms = paced_load(query, path, bootstrap, params, args, log)
    lag_s, steady_lag = generator_lags(log)
    since_ms = started_ms + int(args.warmup * 1000)
    emitted, visible = DelayHistogram(), DelayHistogram()
    kept = [o for o in outcomes if o.finished_at * 1000 >= since_ms and o.records]
    for o in kept:
        delays, counts = o.delays_ms.values - int(lag_s * 1000), o.delays_ms.counts
        emitted.add(delays, counts)
        # the batch's end (its sinks committed: a query sees the pairs) less the result time: emitted_at less
        # result time plus the end less emitted_at (the earliest slot's: never understated)
        if len(delays) and o.emitted_at_ms is not None:
            visible.add(delays + int(o.finished_at * 1000) - o.emitted_at_ms, counts)
    progress = progress_rows(query)
    ends = batch_ends_ms(progress)
    timeline = [p for p in progress if ends[int(p["batchId"])] >= since_ms]
    budget_parts = list(kept[-1].budget) if kept else []
    budget = {p: statistics.median(o.budget.get(p, 0.0) for o in kept) for p in budget_parts}
    plan = [o.previous_spark.get("plan", 0.0) for o in kept if o.previous_spark]
    commit = [o.previous_spark.get("commit", 0.0) for o in kept if o.previous_spark]
    totals = [
        sum(o.budget.values()) + o.previous_spark.get("plan", 0) + o.previous_spark.get("commit", 0) for o in kept
    ]
    cost = fit_batch_cost([(o.records, t / 1000) for o, t in zip(kept, totals, strict=True)][-20:])
    result = {
        "spec": overrides,
        "batches": len(kept),
        "rows_per_batch_median": statistics.median(o.records for o in kept) if kept else None,
        "batch_limits": sorted({o.batch_limit for o in kept if o.batch_limit}),
        "delay_to_emit": emitted.summary(),
        "delay_to_commit": visible.summary(),
        # the floor's model on this run's own batches: what the batch timeline alone makes of the delay
        "delay_to_commit_uniform": uniform_arrival_delays(timeline).summary(),
        "generator_start_lag_s": lag_s,
        "generator_lag": steady_lag,
        **verdict(steady_lag),
        "batch_ms_median": statistics.median(totals) if totals else None,
        "batch_ms_p99": float(np.percentile(totals, 99)) if totals else None,
        "budget_ms_median": {
            **budget,
            "plan": statistics.median(plan) if plan else None,
            "commit": statistics.median(commit) if commit else None,
        },
        "fitted_fixed_ms": None if cost is None else cost[0] * 1000,
        "fitted_us_per_row": None if cost is None else cost[1] * 1e6,
        "load_avg_end": load_avg(),
    }
    print(
        f"{label}: {result['batches']} batches, median {result['rows_per_batch_median']} rows, batch median "
        f"{result['batch_ms_median']} ms; delay to emit p50 {emitted.summary()['p50_ms']} p99 "
        f"{emitted.summary()['p99_ms']} ms, to commit p50 {visible.summary()['p50_ms']} p99 "
        f"{visible.summary()['p99_ms']} ms; budget {result['budget_ms_median']}",
        flush=True,
    )
    return result


def paced_load(
    query: Any,
    path: Path,
    bootstrap: str,
    params: Params,
    args: argparse.Namespace,
    log: Path,
    on_start: Callable[[int], None] | None = None,
) -> int:
    """Run `windjoin generate` paced at `args.rate` for `args.seconds` into the running `query`, then stop both;
    return the schedule's start (epoch ms; `on_start` hears it as soon as it is known)."""
    generator = None
    try:
        time.sleep(3)  # the source plans its first batch on empty topics
        generator = run_generator(generate_cmd(path, bootstrap, params, args.rate, args.seconds, pace=True), log)
        started_ms = schedule_start_ms(log, generator)  # the load is encoded first; its schedule starts then
        if on_start is not None:
            on_start(started_ms)
        generator.wait(max(0.0, started_ms / 1000 - time.time()) + args.seconds + 60)
        time.sleep(5)  # the last records' batch
    finally:
        if generator is not None:
            stop_process(generator)
        query.stop()
    return started_ms


def run_builtin(spark: Any, bootstrap: str, workdir: Path, config: str, args: argparse.Namespace) -> dict[str, Any]:
    """One paced run of Spark's built-in join in configuration `config`: delays to the sink and to the batch's
    end, batch times, what ran."""
    params = Params()
    topics = new_topics(f"bi-{config}")
    spec = {
        "window": {"kind": "time", "size_ms": 10_000},
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "topic": topics[0], "key": "k"},
            "S": {"fields": {"k": "int", "a": "int"}, "topic": topics[1], "key": "k"},
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
    }
    path = workdir / f"spec-bi-{config}.yaml"
    path.write_text(yaml.safe_dump(spec))
    from windjoin.pipelines.cli.produce import ensure_topics

    ensure_topics(bootstrap, list(topics), params.topic_partitions)
    sink, checkpoint = BuiltinSink(since_ms=2**62), workdir / f"ckpt-bi-{config}"
    log = workdir / f"generator-bi-{config}.log"
    query = start_builtin(spark, config, topics, bootstrap, sink, checkpoint, params.max_offsets, 10_000, 2000)

    def started(at_ms: int) -> None:
        sink.since_ms = at_ms + int(args.warmup * 1000)

    paced_load(query, path, bootstrap, params, args, log, on_start=started)
    lag_s, steady_lag = generator_lags(log)
    progress = progress_rows(query)
    ends = batch_ends_ms(progress)
    committed = DelayHistogram()
    for batch_id, (t, n) in sink.groups.items():
        if batch_id in ends:
            committed.add(ends[batch_id] - t - int(lag_s * 1000), n)
    kept = [p for p in progress if int(p["numInputRows"]) > 0 and ends[p["batchId"]] >= sink.since_ms]
    totals = [p["durationMs"]["triggerExecution"] for p in kept]
    result = {
        "config": config,
        "evidence": evidence(config, checkpoint),
        "batches": len(kept),
        "rows_per_batch_median": statistics.median(int(p["numInputRows"]) for p in kept) if kept else None,
        "delay_to_sink": _shifted(sink.received, lag_s).summary(),
        "delay_to_commit": committed.summary(),
        "generator_start_lag_s": lag_s,
        "generator_lag": steady_lag,
        **verdict(steady_lag),
        "batch_ms_median": statistics.median(totals) if totals else None,
        "batch_ms_p99": float(np.percentile(totals, 99)) if totals else None,
        "load_avg_end": load_avg(),
    }
    print(
        f"built-in {config}: {result['batches']} batches, median {result['rows_per_batch_median']} rows, batch "
        f"median {result['batch_ms_median']} ms; delay to commit p50 {committed.summary()['p50_ms']} p99 "
        f"{committed.summary()['p99_ms']} ms; {result['why']}; ran with {result['evidence']}",
        flush=True,
    )
    return result


def batch_ends_ms(progress: list[dict[str, Any]]) -> dict[int, int]:
    """Each batch's end (epoch ms): its start in the progress report plus its trigger execution time."""
    return {
        int(p["batchId"]): int(batch_start_ms(p)) + int(p["durationMs"].get("triggerExecution", 0)) for p in progress
    }


def _shifted(hist: DelayHistogram, lag_s: float) -> DelayHistogram:
    from benchmarks.delays import shifted

    return shifted(hist, int(round(lag_s * 1000)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="defaults of 20 s runs, 5 s warm-up, 10 s floor probes")
    parser.add_argument("--rate", type=float, default=PAPER_RATE, help="events/s over both streams")
    parser.add_argument("--seconds", type=float, help="each run's length (default 60, quick 20)")
    parser.add_argument("--warmup", type=float, help="each run's warm-up (default 15, quick 5)")
    parser.add_argument("--floor-seconds", type=float, help="each floor probe's length (default 30, quick 10)")
    parser.add_argument("--target-ms", type=int, default=1000)
    parser.add_argument("--peers", default="", help="the built-in peers, comma-separated (default: every one)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    quick = {"seconds": 20.0, "warmup": 5.0, "floor_seconds": 10.0}  # given values win over --quick's defaults
    full = {"seconds": 60.0, "warmup": 15.0, "floor_seconds": 30.0}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    from windjoin.connectors.local import services
    from windjoin.connectors.spark.session import build_local_spark
    from windjoin.pipelines.job.join_job import STATE_CONF

    workdir = Path(tempfile.mkdtemp(prefix="windjoin-bench-latency-"))
    state_dir = workdir / "services"
    result: dict[str, Any] = {"machine": machine_facts(), "load_avg_start": load_avg(), "rate": args.rate}
    spark = None
    exit_on_sigterm()
    try:  # whatever happens, the broker, Redis, the generator and Spark stop (tear_down)
        started = services.up(services.ServicesConfig(state_dir=state_dir))
        # clients, and the processes started, log in with the embedded Redis' password file
        os.environ["WINDJOIN_REDIS_PASSWORD_FILE"] = str(services.redis_password_file(state_dir))
        urls = {s.service.name: s.service.url for s in started}
        conf = {**STATE_CONF, "spark.ui.showConsoleProgress": "false"}
        spark = build_local_spark(app_name="windjoin-latency", conf=conf)
        spark.sparkContext.setLogLevel("ERROR")
        result["floor"] = floor(spark, args.floor_seconds, workdir)
        # the same shape as the job, Python source and Arrow pieces included, at the job's batch size here
        result["floor"]["pieces"] = pieces_floor(spark, args.floor_seconds, workdir, rows=round(args.rate * 0.9))
        variants = {
            "default_trigger": {},
            "back_to_back": {"trigger_ms": 0},
            "latency_target": {"trigger_ms": 0, "latency_target_ms": args.target_ms},
        }
        result["runs"] = {
            label: run_variant(spark, urls[services.KAFKA], urls[services.REDIS], workdir, label, overrides, args)
            for label, overrides in variants.items()
        }
        result["builtin"] = {c: run_builtin(spark, urls[services.KAFKA], workdir, c, args) for c in peers(args.peers)}
    finally:
        tear_down(spark, state_dir, workdir)
    summarise(result)
    out = args.out
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous["latency"] = result
    out.write_text(json.dumps(previous, indent=2) + "\n")  # the full run's plot stays as it is
    print(f"written: {out} (key 'latency')")


def summarise(result: dict[str, Any]) -> None:
    """The targets, and windjoin's best run against the built-in join's better configuration (lower p99)."""
    p99 = lambda run: run["delay_to_commit"]["p99_ms"]  # noqa: E731
    best_run = min(result["runs"].values(), key=lambda r: p99(r) or float("inf"))
    stateful_floor = result["floor"]["stateful"]["batch_ms_median"]
    floor_p99 = result["floor"]["pieces"]["delay_to_commit_uniform"]["p99_ms"]
    result["targets"] = {
        "p99_delay_at_most_1s_at_paper_rate": (p99(best_run) or float("inf")) <= 1000,
        # the job's shape with nothing in it, batches back to back, events arriving evenly: no job goes under it
        "floor_p99_delay_ms": floor_p99,
        "p99_delay_over_floor_p99": _ratio(p99(best_run), floor_p99),
        "fixed_cost_at_most_0_6s": (best_run["fitted_fixed_ms"] or float("inf")) <= 600,
        "batch_time_over_floor": _ratio(best_run["batch_ms_median"], stateful_floor),
        "batch_time_over_pieces_floor": _ratio(
            best_run["batch_ms_median"], result["floor"]["pieces"]["batch_ms_median"]
        ),
    }
    baseline = best(result["builtin"], p99, lower=True)
    peer = result["builtin"][baseline]
    result["baseline"] = {
        "builtin_config": baseline,
        "windjoin_p99_over_builtin_p99": p99(best_run) / p99(peer) if p99(best_run) and p99(peer) else None,
        "windjoin_batch_over_builtin_batch": best_run["batch_ms_median"] / peer["batch_ms_median"]
        if best_run["batch_ms_median"] and peer["batch_ms_median"]
        else None,
        "void_runs": [k for k, r in {**result["runs"], **result["builtin"]}.items() if r["void"]],
    }
    result["load_avg_end"] = load_avg()
    print(f"baseline: built-in {baseline}; {result['baseline']}", flush=True)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


if __name__ == "__main__":
    main()
