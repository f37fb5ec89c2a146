"""Kernel benchmark: the band join of SplitJoin/handshake join, indexed vs the vectorised nested loop.

Workload (shared/papers/README.md): R(x int, y float, z 20-char string), S(a int, b float, c double, d bool),
values uniform in 1..10^4, predicate |R.x - S.a| <= 10 AND |R.y - S.b| <= 10, count windows of 2^16..2^21
tuples per stream. Each window is filled first, then chunks of new tuples (R and S alternating) are joined
for a fixed time; rates are per core (the process is pinned to one). The nested loop's comparison rate is
also expressed as the bytes of stored join columns it reads per second (a: int64 + b: float64 = 16 B per
comparison), next to the memory read bandwidth measured in the same run.

A second case (`--wide-block` alone) is the Spark job's hot partition: an equi-join on 9 hot keys whose stored
block is one whole batch of 15,000 rows spanning 11.7 s of event time (a 140k-row batch at 12k events/s, one
partition's share), probed by the next such batch, with windows of 1 ms and 1000 ms. It times, in CPU seconds,
the kernel (key groups ordered by event time), the kernel with the window ignored when indexing (key groups
only: the plan before the window-ordered index) and the nested loop.

    python -m benchmarks.kernels [--quick] [--wide-block]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import time
from pathlib import Path
from unittest import mock

import numpy as np

from benchmarks.machine import machine_facts, memory_read_bandwidth_gbs, pin_to_one_core
from windjoin.operators import kernel
from windjoin.operators.batch import Arrivals
from windjoin.operators.join import WindowJoin
from windjoin.operators.metrics import DelayHistogram
from windjoin.operators.spec import parse_spec
from windjoin.operators.workloads.band import BAND_SPEC, band_columns

RESULTS = Path(__file__).parent / "results" / "kernels.json"
WIDE_RESULTS = Path(__file__).parent / "results" / "kernels-wide-block.json"
WIDE_SPEC = {
    "allowed_lateness_ms": 2000,
    "streams": {"R": {"fields": {"k": "int", "x": "int"}}, "S": {"fields": {"k": "int", "a": "int"}}},
    "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
}
WIDE_KEYS, WIDE_ROWS, WIDE_SPAN_MS = 9, 15_000, 11_700
BYTES_PER_COMPARISON = 16  # the stored join columns a nested-loop comparison reads: a (int64) and b (float64)
POOL = 8  # distinct pre-generated chunks, cycled, so data generation stays out of the timing


def chunk_pool(size: int, rng: np.random.Generator) -> list[dict[str, Arrivals]]:
    """`POOL` chunks of `size` tuples, R and S alternating in arrival order, event times 0..size/2 - 1."""
    order = np.arange(size)
    half = size // 2
    return [
        {
            "R": Arrivals(band_columns("R", half, rng), order[0::2]),
            "S": Arrivals(band_columns("S", half, rng), order[1::2]),
        }
        for _ in range(POOL)
    ]


def shifted(chunk: dict[str, Arrivals], offset: int) -> dict[str, Arrivals]:
    """The chunk with its event times moved `offset` ms on (a cycled chunk arrives after those before it)."""
    return {s: Arrivals({**a.columns, "ts": a.columns["ts"] + offset}, a.order) for s, a in chunk.items()}


def filled_join(
    window: dict, fill: int, use_indexes: bool, rng: np.random.Generator, base_spec: dict | None = None
) -> WindowJoin:
    """The join of `base_spec` (default: the band join) over `window` (a spec window), `fill` tuples per stream
    stored, event times 0..fill-1 ms."""
    spec = copy.deepcopy(base_spec or BAND_SPEC)
    spec["window"] = window
    join = WindowJoin(parse_spec(spec), use_indexes=use_indexes)
    for stream in "RS":
        for start in range(0, fill, 1 << 18):
            join.preload(stream, band_columns(stream, min(1 << 18, fill - start), rng, start_ts=start))
    return join


def measure(
    window: int,
    chunk: int,
    use_indexes: bool,
    seconds: float,
    seed: int = 0,
    base_spec: dict | None = None,
    time_ms: int | None = None,
) -> dict[str, float]:
    """Rates, S2J's P and delays of the first task of `base_spec` (default: the band join) over a count window
    of `window` tuples per stream, or (`time_ms`) a time window of that many ms holding `window` tuples per stream
    (one tuple per stream per ms of event time). Chunk latency: wall time from a chunk's arrival (the call) to its
    results (the return), per chunk."""
    spec_window = {"kind": "time", "size_ms": time_ms} if time_ms else {"kind": "count", "size": window}
    rng = np.random.default_rng(seed)
    join = filled_join(spec_window, window, use_indexes, rng, base_spec)
    pool = chunk_pool(chunk, rng)
    step = chunk // 2  # event-time ms per chunk
    join.process(shifted(pool[0], window))  # warm-up: first indexes built
    counters = join.counters[join.spec.tasks[0].name]
    before = (counters.comparisons, counters.outputs)
    counters.delay = DelayHistogram()  # delays of the timed chunks only
    latencies = []
    done, started = 0, time.perf_counter()
    while True:
        chunk_started = time.perf_counter()
        join.process(shifted(pool[done % POOL], window + (done + 1) * step))
        latencies.append(time.perf_counter() - chunk_started)
        done += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds and done >= 2:
            break
    tuples = done * chunk
    comparisons = counters.comparisons - before[0]
    outputs = counters.outputs - before[1]
    return {
        "window": window,
        "chunk": chunk,
        "tuples_per_s": tuples / elapsed,
        "comparisons_per_s": comparisons / elapsed,
        "outputs_per_s": outputs / elapsed,
        "efficiency_P": outputs / comparisons if comparisons else 1.0,
        "delay_p50_ms": counters.delay.quantile_ns(0.5) / 1e6,
        "delay_p99_ms": counters.delay.quantile_ns(0.99) / 1e6,
        "chunk_latency_p50_ms": float(np.percentile(latencies, 50) * 1e3),
        "chunk_latency_p99_ms": float(np.percentile(latencies, 99) * 1e3),
        "chunks": done,
        "seconds": elapsed,
    }


def wide_batch(t0: int, rng: np.random.Generator) -> dict[str, Arrivals]:
    """WIDE_ROWS tuples over [t0, t0 + WIDE_SPAN_MS), in event-time order, R or S at random, WIDE_KEYS keys."""
    ts = np.sort(rng.integers(t0, t0 + WIDE_SPAN_MS, WIDE_ROWS))
    is_r = rng.random(WIDE_ROWS) < 0.5
    k = rng.integers(0, WIDE_KEYS, WIDE_ROWS)
    chunk = {}
    for stream, rows, field in (("R", is_r, "x"), ("S", ~is_r, "a")):
        idx = np.flatnonzero(rows)
        chunk[stream] = Arrivals({"ts": ts[idx], "k": k[idx], field: k[idx]}, idx)
    return chunk


def measure_wide_block(window_ms: int, mode: str, repeats: int = 3) -> dict[str, float]:
    """CPU seconds (best of `repeats`) to join a batch against the previous one stored as a single block.

    mode: "window" (the kernel), "key" (the window ignored when indexing: key groups only) or "nested_loop".
    """
    best, found = float("inf"), {}
    for _ in range(repeats):
        rng = np.random.default_rng(1)
        join = WindowJoin(
            parse_spec({**WIDE_SPEC, "window": {"kind": "time", "size_ms": window_ms}}), mode != "nested_loop"
        )
        join.process(wide_batch(0, rng))
        batch = wide_batch(WIDE_SPAN_MS, rng)
        counters = join.counters["eq"]
        before = counters.comparisons
        with (
            mock.patch.object(kernel, "_window_filter", lambda probe: None)
            if mode == "key"
            else contextlib.nullcontext()
        ):
            started = time.process_time()
            pairs = len(join.process(batch).pairs[0])
            elapsed = time.process_time() - started
        if elapsed < best:
            best, found = elapsed, {"pairs": pairs, "comparisons": counters.comparisons - before}
    return {"cpu_s": best, **found}


def wide_block_rows(nested_loop: bool = True) -> list[dict]:
    """The wide-block case at 1 ms and 1000 ms, printed as a table; same pairs in every mode (checked)."""
    print(f"wide block: {WIDE_ROWS:,} stored rows over {WIDE_SPAN_MS:,} ms, {WIDE_KEYS} keys, probed by as many")
    header = f"{'window':>8} {'pairs':>10} {'kernel s':>9} {'key-only s':>10} {'NL s':>7} {'key/kernel':>10}"
    print(header + f" {'cmp kernel':>11} {'cmp key-only':>12}")
    rows = []
    for window_ms in (1, 1000):
        modes = ("window", "key", "nested_loop") if nested_loop else ("window", "key")
        runs = {mode: measure_wide_block(window_ms, mode) for mode in modes}
        assert len({r["pairs"] for r in runs.values()}) == 1, runs
        row = {"window_ms": window_ms, **runs, "key_only_over_kernel": runs["key"]["cpu_s"] / runs["window"]["cpu_s"]}
        rows.append(row)
        nl = f"{runs['nested_loop']['cpu_s']:>7.3f}" if nested_loop else f"{'-':>7}"
        win, key = runs["window"], runs["key"]
        print(
            f"{window_ms:>6}ms {win['pairs']:>10,} {win['cpu_s']:>9.3f} {key['cpu_s']:>10.3f} {nl} "
            f"{row['key_only_over_kernel']:>9.1f}x {win['comparisons']:>11,} {key['comparisons']:>12,}"
        )
    return rows


def write_wide_block(rows: list[dict], path: Path) -> None:
    result = {
        "benchmark": "kernels wide block",
        "workload": f"equi-join on {WIDE_KEYS} keys, a {WIDE_ROWS}-row block over {WIDE_SPAN_MS} ms probed by the next",
        "machine": machine_facts(),
        "rows": rows,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exponents", type=int, nargs="+", default=[16, 17, 18, 19, 20, 21])
    parser.add_argument("--chunk", type=int, default=4096, help="tuples per indexed chunk")
    parser.add_argument("--nl-chunk", type=int, default=64, help="tuples per nested-loop chunk")
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per measurement")
    parser.add_argument("--quick", action="store_true", help="2^16 and 2^18 only, 1 s each (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--wide-block", action="store_true", help="only the hot-key wide-block case (about 15 s)")
    parser.add_argument("--wide-out", type=Path, help=f"default: {WIDE_RESULTS.name} beside --out")
    args = parser.parse_args()
    args.wide_out = args.wide_out or args.out.with_name(WIDE_RESULTS.name)  # a smoke run's --out keeps both away
    pin_to_one_core()
    if args.wide_block:
        write_wide_block(wide_block_rows(), args.wide_out)
        return
    if args.quick:
        args.exponents, args.seconds = [16, 18], min(args.seconds, 1.0)
    bandwidth = memory_read_bandwidth_gbs()
    print(f"memory read bandwidth (1 core): {bandwidth:.1f} GB/s")
    header = f"{'window':>8} {'indexed t/s':>12} {'NL t/s':>9} {'speedup':>8} {'idx cmp/s':>11} {'NL cmp/s':>11} "
    header += f"{'NL GB/s':>8} {'NL/bw':>6} {'P idx':>6} {'P NL':>8} {'idx p99 ms':>10}"
    print(header)
    rows = []
    for exp in args.exponents:
        window = 1 << exp
        indexed = measure(window, args.chunk, True, args.seconds)
        nested = measure(window, args.nl_chunk, False, args.seconds)
        nl_gbs = nested["comparisons_per_s"] * BYTES_PER_COMPARISON / 1e9
        row = {
            "window_per_stream": window,
            "indexed": indexed,
            "nested_loop": nested,
            "speedup_tuples_per_s": indexed["tuples_per_s"] / nested["tuples_per_s"],
            "nested_loop_read_gbs": nl_gbs,
            "nested_loop_share_of_bandwidth": nl_gbs / bandwidth,
        }
        rows.append(row)
        print(
            f"{'2^' + str(exp):>8} {indexed['tuples_per_s']:>12,.0f} {nested['tuples_per_s']:>9,.0f} "
            f"{row['speedup_tuples_per_s']:>7,.0f}x {indexed['comparisons_per_s']:>11.3g} "
            f"{nested['comparisons_per_s']:>11.3g} {nl_gbs:>8.1f} {row['nested_loop_share_of_bandwidth']:>6.2f} "
            f"{indexed['efficiency_P']:>6.3f} {nested['efficiency_P']:>8.1e} {indexed['delay_p99_ms']:>10.1f}"
        )
    largest = rows[-1]
    result = {
        "benchmark": "kernels",
        "workload": "band join, |R.x-S.a|<=10 AND |R.y-S.b|<=10, values uniform 1..10^4, count windows",
        "machine": machine_facts(),
        "memory_read_bandwidth_gbs": bandwidth,
        "bytes_per_comparison": BYTES_PER_COMPARISON,
        "rows": rows,
        "targets": {
            "indexed_tuples_per_s_at_2^21_at_least_50000": largest["window_per_stream"] == 1 << 21
            and largest["indexed"]["tuples_per_s"] >= 50_000,
            "nested_loop_at_least_half_of_bandwidth": all(r["nested_loop_share_of_bandwidth"] >= 0.5 for r in rows),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"targets: {result['targets']}\nwritten: {args.out}")
    write_wide_block(wide_block_rows(nested_loop=not args.quick), args.wide_out)


if __name__ == "__main__":
    main()
