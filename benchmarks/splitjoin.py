"""SplitJoin benchmark (paper 003): the band join's sustained rate and latencies, in the kernel and end to end.

Workload (shared/papers/README.md): R(x int, y float, z string), S(a int, b float, c double, d bool), values
uniform in 1..10^4, |R.x - S.a| <= 10 AND |R.y - S.b| <= 10. The paper's headline: 28 join cores sustain
~4,400 tuples/s over a 15-min time window (about 2^21 tuples per stream) and ~20% more with count windows
(~5,200 at 2^21); average visiting latency T_match - max(t_r, t_s) of 8.1 ms (15-min window, 28 cores; 26 ms
for the low-latency handshake join).

Kernel (one core, `benchmarks.kernels.measure`): count windows 2^12..2^21 tuples per stream and time windows of
5/10/15 min with event time stamped at `--rate` tuples/s per stream (1,000: a 15-min window holds 900,000 tuples
per stream, ~2^19.8), indexed vs the vectorised nested loop. Processing latency = a chunk's wall time from its
arrival (the call) to its results (the return), p50/p99 over the timed chunks; visiting latency = the pairs'
T_match - arrival of their later tuple (the whole chunk arrives at the call), p50/p99. Check: on a small prefix
(window filled with 2^13 tuples, four chunks of 1,024) indexed and nested loop produce the same number of pairs.

End to end (`benchmarks.pipeline.Bench`: embedded Kafka, `windjoin generate`, `pipelines.job.join_job.start_job` in
a local[2] SparkSession, results to Parquet): the band spec has no key, so every tuple goes to one hash
partition and one slot (the band join does not hash-partition; one Python worker joins). Sustained input rows/s
from a prefilled topic pair for count windows (warm-up: both windows full) and a 5-min time window (prefill
stamped at `--e2e-density` events/s; warm-up: one window of event time); visiting latency = emitted_at - the
later tuple's event time from a paced run (event time = wall clock of production, corrected for the generator's
start-up lag) over a count window and the 5-min time window. Check: the paced time-window run's Parquet pair
count equals an exact count computed with numpy from the records read back from Kafka; a mismatch fails the run.

    python -m benchmarks.splitjoin [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.band_count import band_pairs
from benchmarks.kernels import chunk_pool, filled_join, measure, shifted
from benchmarks.machine import machine_facts, pin_to_one_core
from benchmarks.pipeline import Bench, Params, load_avg, open_session
from benchmarks.teardown import exit_on_sigterm, tear_down
from windjoin.operators.workloads.band import BAND_SPEC

RESULTS = Path(__file__).parent / "results" / "splitjoin.json"
PAPER = {
    "cores": 28,
    "count_2^21_tuples_per_s": 5200,
    "time_15min_tuples_per_s": 4400,
    "visiting_latency_15min_ms": 8.1,
    "visiting_latency_15min_handshake_ms": 26.0,
}
BAND = 10  # the predicate's width on both attributes


# ---------------------------------------------------------------------------------------------------------
# Kernel
# ---------------------------------------------------------------------------------------------------------


def prefix_outputs(window: dict, use_indexes: bool, fill: int = 1 << 13, chunk: int = 1024, chunks: int = 4) -> int:
    """Pairs produced over a small prefix: `fill` tuples per stream stored, then `chunks` chunks (same seed)."""
    rng = np.random.default_rng(1)
    join = filled_join(window, fill, use_indexes, rng)
    pool = chunk_pool(chunk, rng)
    for i in range(chunks):
        join.process(shifted(pool[i], fill + i * chunk // 2))
    return join.counters["band"].outputs


def kernel_sweep(exponents: list[int], minutes: list[int], rate: int, seconds: float) -> list[dict[str, Any]]:
    """Indexed vs nested loop per window, on one core (the process's affinity restored afterwards)."""
    cores = os.sched_getaffinity(0)
    pin_to_one_core()
    ms_per_tuple = 1000 // rate  # event-time ms between a stream's tuples; kernels.measure stamps one per ms
    rows = []
    try:
        configs = [(f"2^{e}", 1 << e, None) for e in exponents]
        configs += [(f"{m} min", m * 60 * rate, m * 60 * 1000 // ms_per_tuple) for m in minutes]
        for label, tuples, time_ms in configs:
            window = {"kind": "time", "size_ms": time_ms} if time_ms else {"kind": "count", "size": tuples}
            idx, nl = prefix_outputs(window, True), prefix_outputs(window, False)
            if idx != nl:
                raise SystemExit(f"kernel check failed at {label}: indexed {idx} pairs, nested loop {nl}")
            indexed = measure(tuples, 4096, True, seconds, time_ms=time_ms)
            nested = measure(tuples, 64, False, seconds, time_ms=time_ms)
            row = {"window": label, "tuples_per_stream": tuples, "time_ms": time_ms, "prefix_pairs": idx}
            row.update(indexed=indexed, nested_loop=nested, speedup=indexed["tuples_per_s"] / nested["tuples_per_s"])
            rows.append(row)
            print(
                f"kernel {label:>7}: indexed {indexed['tuples_per_s']:>9,.0f} t/s, chunk p50/p99 "
                f"{indexed['chunk_latency_p50_ms']:.1f}/{indexed['chunk_latency_p99_ms']:.1f} ms, visiting p99 "
                f"{indexed['delay_p99_ms']:.1f} ms; nested loop {nested['tuples_per_s']:>7,.0f} t/s; "
                f"prefix pairs {idx} = {nl}; load {load_avg()}",
                flush=True,
            )
    finally:
        os.sched_setaffinity(0, cores)
    return rows


# ---------------------------------------------------------------------------------------------------------
# End to end
# ---------------------------------------------------------------------------------------------------------


class BandBench(Bench):
    """The pipeline benchmark's phases on the band spec over `window`, results also to Parquet."""

    window: dict[str, Any] = {"kind": "count", "size": 1 << 12}
    parquet: Path | None = None

    def spec_dict(self, topics: tuple[str, str], checkpoint: Path, max_offsets: int | None) -> dict[str, Any]:
        spec = json.loads(json.dumps(BAND_SPEC))
        spec["window"] = self.window
        for name, topic in zip("RS", topics, strict=True):
            spec["streams"][name]["topic"] = topic
        spec.update(
            allowed_lateness_ms=self.params.lateness_ms,
            partitions=1,
            slots=1,
            trigger_ms=0,
            checkpoint=str(checkpoint),
        )
        if max_offsets:
            spec["max_offsets_per_trigger"] = max_offsets
        return spec

    def extra_sinks(self, label: str) -> tuple:
        from windjoin.connectors.files.parquet_sink import ParquetSink

        self.parquet = self.workdir / f"parquet-{label}-{uuid.uuid4().hex[:6]}"
        return (ParquetSink(self.parquet),)

    def warmup_rows(self) -> int:
        if self.window["kind"] == "count":
            return 2 * self.window["size"]  # both windows full
        return int(self.density * (self.window["size_ms"] + self.params.lateness_ms) / 1000)

    def parquet_pairs(self) -> int:
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(f).metadata.num_rows for f in self.parquet.rglob("*.parquet"))


def read_back(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every record of `topic`, decoded (JSON), through the connector's own range reader."""
    import orjson
    from confluent_kafka import Consumer

    from windjoin.connectors.kafka.range_reader import list_partitions, probe_partition_bounds, read_range
    from windjoin.connectors.kafka.source_options import KafkaSourceOptions
    from windjoin.operators.offset_plan import KafkaRange, split_key

    options = KafkaSourceOptions(bootstrap_servers=bootstrap, topics=(topic,))
    consumer = Consumer(options.consumer_config(**{"fetch.wait.max.ms": 10}))
    try:
        bounds = probe_partition_bounds(consumer, list_partitions(consumer, (topic,), 10.0), 10.0)
    finally:
        consumer.close()
    records = []
    for key, (low, high) in bounds.items():
        for batch in read_range(options, KafkaRange(*split_key(key), low, high)):
            records += [orjson.loads(v) for v in batch.column("value").to_pylist()]
    return records


def columns(records: list[dict[str, Any]], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {n: np.array([rec[n] for rec in records]) for n in names}


def e2e(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Throughput per window from prefilled topics, paced visiting latency, and the exact-count check."""
    params = Params(
        topic_partitions=1,
        lateness_ms=2000,
        max_offsets=args.e2e_batch,
        throughput_seconds=args.e2e_timeout,
        paced_seconds=args.paced_seconds,
        paced_warmup_s=args.paced_warmup,
    )
    state_dir = workdir / "services"
    spark = None
    out: dict[str, Any] = {"params": {**vars(params)}, "throughput": [], "paced": []}
    exit_on_sigterm()  # a killed run tears down too
    try:
        bootstrap, spark = open_session(state_dir, "windjoin-bench-splitjoin")
        bench = BandBench(params, workdir, bootstrap, spark)
        counts = [{"kind": "count", "size": 1 << e} for e in args.e2e_exponents]
        timed = {"kind": "time", "size_ms": args.e2e_minutes * 60_000}
        largest = max(c["size"] for c in counts)
        bench.window = counts[-1]
        prefill = bench.prefill(args.e2e_density, 2 * largest + 4 * args.e2e_batch)
        print(f"prefill: {prefill['events']:,} events in {prefill['seconds']:.1f} s; load {load_avg()}", flush=True)
        for window in counts:
            bench.window = window
            out["throughput"].append(throughput(bench, window, prefill["events"]))
        if args.e2e_time_throughput:
            bench.window = timed
            events = bench.warmup_rows() + 4 * args.e2e_batch
            prefill = bench.prefill(args.e2e_density, events)
            out["throughput"].append(throughput(bench, timed, prefill["events"]))
        for window in [counts[0], timed] if args.paced_count else [timed]:
            bench.window = window
            run = bench.paced("windjoin", args.paced_rate)
            run.update(window=window, parquet_pairs=bench.parquet_pairs())
            print(
                f"paced {args.paced_rate:,.0f}/s {window}: visiting p50/p99 {run['delay_emitted']['p50_ms']}/"
                f"{run['delay_emitted']['p99_ms']} ms, kept up {run['kept_up']}, pairs {run['pairs']:,}; "
                f"load {load_avg()}",
                flush=True,
            )
            out["paced"].append(run)
        check = out["paced"][-1]
        r = columns(read_back(bootstrap, check["topics"][0]), ("ts", "x", "y"))
        s = columns(read_back(bootstrap, check["topics"][1]), ("ts", "a", "b"))
        exact = band_pairs(r, s, BAND, timed["size_ms"])
        out["check"] = {
            "window": timed,
            "events": len(r["ts"]) + len(s["ts"]),
            "exact_pairs": exact,
            "parquet_pairs": check["parquet_pairs"],
            "sink_pairs": check["pairs"],
            "ok": exact == check["parquet_pairs"] == check["pairs"],
        }
        print(f"check: {out['check']}", flush=True)
    finally:
        tear_down(spark, state_dir, None)
    return out


def throughput(bench: BandBench, window: dict[str, Any], events: int) -> dict[str, Any]:
    run = bench.windjoin_throughput(events, bench.params.max_offsets)
    row = {"window": window, "rows_per_s": run["rows_per_s"], "steady_batches": run["batches"]}
    row.update(warmup_rows=run["warmup_rows"], pairs=run["pairs"], profile=run.get("profile"))
    print(f"e2e sustained {window}: {run['rows_per_s'] or 0:,.0f} rows/s; load {load_avg()}", flush=True)
    return row


# ---------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------


def print_table(result: dict[str, Any]) -> None:
    print(
        f"\n{'kernel (1 core)':16} {'indexed t/s':>12} {'vs paper':>9} {'NL t/s':>9} {'chunk p50/p99 ms':>17} "
        f"{'visit p50/p99 ms':>17}"
    )
    for row in result["kernel"]:
        i = row["indexed"]
        print(
            f"{row['window']:16} {i['tuples_per_s']:>12,.0f} {row['vs_paper']:>8.1f}x "
            f"{row['nested_loop']['tuples_per_s']:>9,.0f} "
            f"{i['chunk_latency_p50_ms']:>8.1f}/{i['chunk_latency_p99_ms']:<8.1f} "
            f"{i['delay_p50_ms']:>8.1f}/{i['delay_p99_ms']:<8.1f}"
        )
    e = result.get("e2e")
    if not e:
        return
    print(f"\n{'end to end (2 cores)':28} {'rows/s':>10} {'vs paper':>9}")
    for row in e["throughput"]:
        print(f"{window_label(row['window']):28} {row['rows_per_s'] or 0:>10,.0f} {row['vs_paper'] or 0:>8.2f}x")
    for run in e["paced"]:
        d = run["delay_emitted"]
        print(
            f"paced {run['rate']:,.0f}/s {window_label(run['window'])}: "
            f"visiting p50/p99 {d['p50_ms']}/{d['p99_ms']} ms "
            f"(paper 8.1 ms avg), kept up {run['kept_up']}"
        )
    print(
        f"check: exact {e['check']['exact_pairs']:,} pairs, Parquet {e['check']['parquet_pairs']:,}: "
        f"{'ok' if e['check']['ok'] else 'MISMATCH'}"
    )


def window_label(window: dict[str, Any]) -> str:
    if window["kind"] == "count":
        return f"count 2^{int(np.log2(window['size']))}"
    return f"time {window['size_ms'] // 60_000} min"


def plot(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    count = [r for r in result["kernel"] if r["time_ms"] is None]
    sizes = [r["tuples_per_stream"] for r in count]
    ax1.loglog(sizes, [r["indexed"]["tuples_per_s"] for r in count], "o-", label="kernel indexed (1 core)")
    ax1.loglog(sizes, [r["nested_loop"]["tuples_per_s"] for r in count], "s-", label="kernel nested loop (1 core)")
    timed = [r for r in result["kernel"] if r["time_ms"] is not None]
    ax1.loglog(
        [r["tuples_per_stream"] for r in timed],
        [r["indexed"]["tuples_per_s"] for r in timed],
        "^",
        label="kernel time windows",
    )
    e = result.get("e2e") or {}
    thr = [r for r in e.get("throughput", []) if r["window"]["kind"] == "count" and r["rows_per_s"]]
    if thr:
        ax1.loglog(
            [r["window"]["size"] for r in thr], [r["rows_per_s"] for r in thr], "D-", label="end to end (2 cores)"
        )
    ax1.axhline(PAPER["count_2^21_tuples_per_s"], color="grey", linestyle="--", label="SplitJoin 2^21, 28 cores")
    ax1.set_xlabel("window, tuples per stream")
    ax1.set_ylabel("sustained input tuples/s")
    ax1.legend(fontsize=7)
    labels = [r["window"] for r in result["kernel"]]
    ax2.semilogy(labels, [r["indexed"]["chunk_latency_p99_ms"] for r in result["kernel"]], "o-", label="chunk p99")
    ax2.semilogy(labels, [r["indexed"]["delay_p99_ms"] for r in result["kernel"]], "s-", label="visiting p99")
    ax2.axhline(PAPER["visiting_latency_15min_ms"], color="grey", linestyle="--", label="SplitJoin VL avg, 15 min")
    ax2.set_ylabel("kernel latency, ms (indexed, 4096-tuple chunks)")
    ax2.tick_params(axis="x", rotation=60, labelsize=7)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: small windows, short phases")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--exponents", type=int, nargs="+", default=list(range(12, 22)))
    parser.add_argument("--minutes", type=int, nargs="*", default=[5, 10, 15], help="kernel time windows")
    parser.add_argument("--rate", type=int, default=1000, help="kernel time windows: tuples/s per stream")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per kernel measurement")
    parser.add_argument("--e2e-exponents", type=int, nargs="+", default=[12, 14, 16])
    parser.add_argument("--e2e-minutes", type=int, default=5)
    parser.add_argument("--e2e-density", type=float, default=1000.0, help="prefill events/s (both streams)")
    parser.add_argument("--e2e-batch", type=int, default=20_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--e2e-timeout", type=float, default=120.0, help="seconds per throughput measurement")
    parser.add_argument("--e2e-time-throughput", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--paced-rate", type=float, default=2000.0, help="events/s over both streams")
    parser.add_argument("--paced-count", action=argparse.BooleanOptionalAction, default=True, help="paced count run")
    parser.add_argument("--paced-seconds", type=float, default=40.0)
    parser.add_argument("--paced-warmup", type=float, default=10.0)
    parser.add_argument("--no-e2e", dest="e2e", action="store_false", help="kernel only")
    args = parser.parse_args()
    if args.quick:
        args.exponents, args.minutes, args.rate, args.seconds = [12, 14], [5], 100, min(args.seconds, 0.3)
        args.e2e_exponents, args.e2e_batch, args.e2e_time_throughput = [12], 5000, False
        args.paced_rate, args.paced_seconds, args.paced_warmup, args.paced_count = 1000.0, 5.0, 1.0, False
    return args


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    facts = machine_facts()
    result: dict[str, Any] = {
        "benchmark": "splitjoin",
        "workload": "band join |R.x-S.a|<=10 AND |R.y-S.b|<=10, values uniform 1..10^4 (paper 003)",
        "machine": facts,
        "date": facts["date"],
        "quick": args.quick,
        "kernel_rate_per_stream": args.rate,
        "paper": PAPER,
        "load_avg_start": load_avg(),
    }
    result["kernel"] = kernel_sweep(args.exponents, args.minutes, args.rate, args.seconds)
    for row in result["kernel"]:
        paper = PAPER["time_15min_tuples_per_s"] if row["time_ms"] else PAPER["count_2^21_tuples_per_s"]
        row["vs_paper"] = row["indexed"]["tuples_per_s"] / paper
    if args.e2e:
        workdir = Path(tempfile.mkdtemp(prefix="windjoin-bench-splitjoin-"))
        try:
            result["e2e"] = e2e(args, workdir)
        finally:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
        for row in result["e2e"]["throughput"]:
            paper = (
                PAPER["count_2^21_tuples_per_s"]
                if row["window"]["kind"] == "count"
                else PAPER["time_15min_tuples_per_s"]
            )
            row["vs_paper"] = row["rows_per_s"] / paper if row["rows_per_s"] else None
    result["load_avg_end"] = load_avg()
    result["wall_s"] = time.perf_counter() - started
    print_table(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    png = args.out.with_suffix(".png")
    print(f"written: {args.out}" + (f", {png}" if plot(result, png) else " (no matplotlib: no plot)"))
    if args.e2e and not result["e2e"]["check"]["ok"]:
        raise SystemExit("end-to-end check failed: Parquet pair count differs from the exact count")


if __name__ == "__main__":
    main()
