"""Latency benchmark: production delay and the per-batch time budget at paper 000's rate, beside Spark's floor.

Workload: paper 000's (4,000 tuples/s per stream, b-model keys with bias 0.7 over [0, 10^7], equi-join R.k = S.k,
time window 10 s, lateness 2 s; 4 topic partitions, 64 join partitions, 2 slots), produced live by `windjoin
generate --pace` (event time = scheduled arrival), with the job's real output path: Parquet and Redis sinks.
Each variant runs on fresh topics and a fresh checkpoint for `--seconds`; pairs whose result time falls in the
first `--warmup` seconds are left out. Delays are corrected by the generator's start-up lag (it re-bases its
pacing after its first batch, so arrivals trail event times by that constant).

Variants: the spec's default trigger (1 s), batches back to back (`trigger_ms: 0`), and back to back with
`latency_target_ms`. Two delays per pair: to `emitted_at` (stamped in the slot when the pair is made) and to the
batch's end on the driver (after the sinks committed it: when a query can see it).

The floor, measured in the same run on the same SparkSession (`../shared/probes/spark_batch_floor.py`'s shape):
Spark's rate source into a noop sink, and the rate source through `groupBy(slot).transformWithStateInPandas`
holding one value per slot (RocksDB, changelog checkpointing, 2 slots) into a noop sink, batches back to back
at 2,000 rows/s: the median batch time of a trivial query of the job's shape.

    python -m benchmarks.latency [--quick]

Writes the `latency` key of benchmarks/results/pipeline.json (the other keys are kept).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.machine import machine_facts
from benchmarks.pipeline import (
    RESULTS,
    DelayHistogram,
    Params,
    generate_cmd,
    generator_lags,
    load_avg,
    new_topics,
    run_generator,
    stop_process,
)
from benchmarks.spark_floor import floor

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
    time.sleep(3)  # the source plans its first batch on empty topics
    started_ms = int(time.time() * 1000)
    generator = run_generator(generate_cmd(path, bootstrap, params, args.rate, args.seconds, pace=True), log)
    try:
        generator.wait(args.seconds + 60)
        time.sleep(5)  # the last records' batch
    finally:
        stop_process(generator)
        query.stop()
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
        "generator_start_lag_s": lag_s,
        "generator_lag": steady_lag,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="defaults of 20 s runs, 5 s warm-up, 10 s floor probes")
    parser.add_argument("--rate", type=float, default=PAPER_RATE, help="events/s over both streams")
    parser.add_argument("--seconds", type=float, help="each run's length (default 60, quick 20)")
    parser.add_argument("--warmup", type=float, help="each run's warm-up (default 15, quick 5)")
    parser.add_argument("--floor-seconds", type=float, help="each floor probe's length (default 30, quick 10)")
    parser.add_argument("--target-ms", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    quick = {"seconds": 20.0, "warmup": 5.0, "floor_seconds": 10.0}  # given values win over --quick's defaults
    full = {"seconds": 60.0, "warmup": 15.0, "floor_seconds": 30.0}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    from windjoin.connectors import services
    from windjoin.connectors.spark_session import build_local_spark
    from windjoin.pipelines.job.join_job import STATE_CONF

    workdir = Path(tempfile.mkdtemp(prefix="windjoin-bench-latency-"))
    started = services.up(services.ServicesConfig(state_dir=workdir / "services"))
    urls = {s.service.name: s.service.url for s in started}
    spark = build_local_spark(app_name="windjoin-latency", conf={**STATE_CONF, "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    result: dict[str, Any] = {"machine": machine_facts(), "load_avg_start": load_avg(), "rate": args.rate}
    result["floor"] = floor(spark, args.floor_seconds, workdir)
    variants = {
        "default_trigger": {},
        "back_to_back": {"trigger_ms": 0},
        "latency_target": {"trigger_ms": 0, "latency_target_ms": args.target_ms},
    }
    result["runs"] = {
        label: run_variant(spark, urls[services.KAFKA], urls[services.REDIS], workdir, label, overrides, args)
        for label, overrides in variants.items()
    }
    best = min(result["runs"].values(), key=lambda r: r["delay_to_commit"]["p99_ms"] or float("inf"))
    stateful_floor = result["floor"]["stateful"]["batch_ms_median"]
    result["targets"] = {
        "p99_delay_at_most_1s_at_paper_rate": (best["delay_to_commit"]["p99_ms"] or float("inf")) <= 1000,
        "fixed_cost_at_most_0_6s": (best["fitted_fixed_ms"] or float("inf")) <= 600,
        "batch_time_over_floor": None if not stateful_floor else best["batch_ms_median"] / stateful_floor,
    }
    result["load_avg_end"] = load_avg()
    out = args.out
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous["latency"] = result
    out.write_text(json.dumps(previous, indent=2) + "\n")  # the full run's plot stays as it is
    print(f"written: {out} (key 'latency')")
    services.down(workdir / "services")


if __name__ == "__main__":
    main()
