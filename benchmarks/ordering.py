"""Ordering benchmark: what ordered output costs as a function of the punctuation interval (SplitJoin, Fig. 19).

In windjoin a micro-batch boundary is the punctuation: the job releases a batch's results in one go, ordered by
`output_order` (none | outer | strict). Here the punctuation interval is the number of input tuples per batch.
The band-join workload of `benchmarks.kernels` (R and S alternating, one millisecond apart, event time = arrival
time) runs over a time window holding 2^16 tuples per stream, spread like a hot partition of the job (and like
SplitJoin's join cores) over CORES `WindowJoin`s: each tuple is stored at one of them (round robin) and probes
all. Per punctuation every core joins the batch, its pairs become a slot's table (`slot_batch.pairs_table`),
the cores' tables are assembled into the batch's result table (`batch_table`)
and ordered by the job's `order_results`. Throughput counts all three steps (one core, pinned); the checks of
the released stream run outside the clock.

Ordering precision of the released stream: a result is *out of order* when its result time (the later tuple's
timestamp) is below the max already released before it; disorder is by how many ms. Unordered, each batch
holds the cores' outputs one after another, so results go back in time within a punctuation; ordered, none may,
within or across punctuations: a violation for outer/strict fails the run. Each interval runs "none" for
`--seconds` and then outer and strict on the same number of punctuations over the same data.

    python -m benchmarks.ordering [--quick] [--released DIR]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.machine import machine_facts, pin_to_one_core
from windjoin.operators.batch import Arrivals
from windjoin.operators.join import WindowJoin
from windjoin.operators.result_table import BATCH_ID, EMITTED_AT, order_results, result_schema, result_times
from windjoin.operators.spec import JoinSpec, parse_spec
from windjoin.operators.workloads.band import BAND_SPEC, band_columns
from windjoin.pipelines.job.slot_batch import pairs_table

RESULTS = Path(__file__).parent / "results" / "ordering.json"
ORDERS = ("none", "outer", "strict")
CORES = 4  # join cores (slots of a spread partition) whose outputs a batch concatenates
WINDOW_TUPLES = 1 << 16  # per stream, over all cores
POOL = 8  # distinct pre-generated column sets, cycled with fresh timestamps
TASK = "band"


def band_spec() -> JoinSpec:
    spec = copy.deepcopy(BAND_SPEC)
    spec["window"] = {"kind": "time", "size_ms": 2 * WINDOW_TUPLES}  # one tuple per ms, R and S alternating
    return parse_spec(spec)


@dataclass
class Released:
    """The released stream's ordering precision, updated one punctuation at a time."""

    results: int = 0
    out_of_order: int = 0  # result time below the max released before it (same or earlier punctuation)
    across: int = 0  # result time below the max of earlier punctuations
    max_disorder_ms: int = 0
    max_time: int | None = None  # the latest result time released so far
    tables: list[pa.Table] = field(default_factory=list)  # kept only when asked to write them

    def release(self, table: pa.Table, keep: bool) -> None:
        times = result_times(table)
        if len(times):
            start = times[0] if self.max_time is None else self.max_time
            before = np.maximum.accumulate(np.concatenate([[start], times]))[:-1]
            self.out_of_order += int((times < before).sum())
            self.across += int((times < start).sum()) if self.max_time is not None else 0
            self.max_disorder_ms = max(self.max_disorder_ms, int((before - times).max()))
            self.max_time = max(start, int(times.max()))
        self.results += len(times)
        if keep:
            self.tables.append(table)


class SpreadJoin:
    """The band join over CORES joins, each storing a round-robin share of the window, all probing."""

    def __init__(self, spec: JoinSpec, interval: int, seed: int = 0) -> None:
        self.spec, self.interval = spec, interval
        self.schema = result_schema(spec, TASK)
        self.joins = [WindowJoin(spec) for _ in range(CORES)]
        rng = np.random.default_rng(seed)
        first = -2 * WINDOW_TUPLES  # the window is filled with the tuples of the 2^17 ms before time 0
        for stream, parity in (("R", 0), ("S", 1)):
            columns = band_columns(stream, WINDOW_TUPLES, rng)
            columns["ts"] = first + parity + 2 * np.arange(WINDOW_TUPLES, dtype=np.int64)
            for core, join in enumerate(self.joins):
                join.preload(stream, {name: col[core::CORES] for name, col in columns.items()})
        half = interval // 2
        self.pool = [{s: band_columns(s, half, rng) for s in "RS"} for _ in range(POOL)]
        order = np.arange(interval)
        self.order = {"R": order[0::2], "S": order[1::2]}
        self.stored = [{s: self.order[s] % CORES == core for s in "RS"} for core in range(CORES)]
        self.done = 0

    def chunks(self) -> list[dict[str, Arrivals]]:
        """The next punctuation's arrivals, one chunk per core (the same tuples, stored at one core each)."""
        start = self.done * self.interval
        columns = {}
        for s in "RS":
            columns[s] = dict(self.pool[self.done % POOL][s])
            columns[s]["ts"] = start + self.order[s]
        self.done += 1
        return [{s: Arrivals(columns[s], self.order[s], stored=stored[s]) for s in "RS"} for stored in self.stored]

    def punctuation(self, chunks: list[dict[str, Arrivals]], order: str) -> tuple[pa.Table, float, float]:
        """Join, build the batch's result table and order it: the released table, seconds building, ordering."""
        started = time.perf_counter()
        parts = []
        for join, chunk in zip(self.joins, chunks, strict=True):
            tables = [pairs_table(self.spec, pairs) for pairs in join.process(chunk).pairs if len(pairs)]
            if tables:  # a slot's hand-over: its partitions' pairs stamped with one emission time
                table = pa.concat_tables(tables)
                parts.append(table.append_column(EMITTED_AT, pa.array(np.full(len(table), int(time.time() * 1000)))))
        table = batch_table(self.schema, parts, self.done) if parts else self.schema.empty_table()
        built = time.perf_counter()
        released = order_results(table, order)
        return released, built - started, time.perf_counter() - built


def batch_table(schema: pa.Schema, parts: list[pa.Table], batch_id: int) -> pa.Table:
    """A task's result table of one batch (`result_schema`) from its cores' tables (pairs plus `emitted_at`)."""
    table = pa.concat_tables(parts)
    table = table.append_column(BATCH_ID, pa.array(np.full(len(table), batch_id), pa.int64()))
    return table.select(schema.names).cast(schema)


def run(interval: int, order: str, seconds: float | None, punctuations: int | None, keep: bool) -> dict:
    """One order at one interval: for `seconds` or for `punctuations` (after one untimed warm-up)."""
    join = SpreadJoin(band_spec(), interval)
    stream = Released()
    released, _, _ = join.punctuation(join.chunks(), order)  # warm-up: first indexes built
    stream.release(released, keep)
    building = ordering = 0.0
    done = 0
    while True:
        chunks = join.chunks()
        released, build_s, order_s = join.punctuation(chunks, order)
        building, ordering, done = building + build_s, ordering + order_s, done + 1
        stream.release(released, keep)
        if (punctuations is not None and done >= punctuations) or (
            punctuations is None and building + ordering >= seconds and done >= 4
        ):
            break
    elapsed = building + ordering
    return {
        "punctuations": done,
        "tuples": done * interval,
        "results": stream.results,
        "tuples_per_s": done * interval / elapsed,
        "seconds": elapsed,
        "order_seconds": ordering,
        "order_share": ordering / elapsed,
        "out_of_order_fraction": stream.out_of_order / stream.results if stream.results else 0.0,
        "out_of_order_across_punctuations": stream.across,
        "max_disorder_ms": stream.max_disorder_ms,
        "released": stream.tables,
    }


def measure(interval: int, seconds: float, released_dir: Path | None) -> dict:
    row: dict = {"interval": interval}
    for order in ORDERS:
        punctuations = row["none"]["punctuations"] if order != "none" else None
        result = run(interval, order, seconds, punctuations, released_dir is not None)
        tables = result.pop("released")
        if released_dir is not None:
            pq.write_table(pa.concat_tables(tables), released_dir / f"{order}_{interval}.parquet")
        if order != "none":
            result["throughput_vs_none"] = result["tuples_per_s"] / row["none"]["tuples_per_s"]
            if result["out_of_order_fraction"] or result["results"] != row["none"]["results"]:
                raise SystemExit(
                    f"interval {interval}, output_order {order}: {result['out_of_order_fraction']:.2%} of "
                    f"{result['results']} results released out of order (none: {row['none']['results']} results)"
                )
        row[order] = result
    return row


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    intervals = [r["interval"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for order in ORDERS:
        left.plot(intervals, [r[order]["tuples_per_s"] for r in rows], marker="o", label=f"output_order={order}")
    left.set(xscale="log", xlabel="punctuation interval (input tuples per batch)", ylabel="input tuples/s")
    left.set_xscale("log", base=2)
    left.set_title(f"throughput, band join, {CORES} join cores, 2^16-tuple windows")
    left.legend()
    for order in ("outer", "strict"):
        right.plot(intervals, [100 * r[order]["order_share"] for r in rows], marker="o", label=f"{order}: ordering")
    unordered = [100 * r["none"]["out_of_order_fraction"] for r in rows]
    right.plot(intervals, unordered, marker="x", ls="--", label="none: results out of order")
    right.set_xscale("log", base=2)
    right.set(xlabel="punctuation interval (input tuples per batch)", ylabel="% of time / % of results")
    right.set_title("ordering's share of time; unordered results released out of order")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exponents", type=int, nargs="+", default=list(range(6, 17)))
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds of the unordered run per interval")
    parser.add_argument("--quick", action="store_true", help="intervals 2^6, 2^10, 2^14, 0.2 s each (a smoke run)")
    parser.add_argument("--released", type=Path, help="also write each run's released stream as Parquet here")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.exponents, args.seconds = [6, 10, 14], min(args.seconds, 0.2)
    if args.released is not None:
        args.released.mkdir(parents=True, exist_ok=True)
    pin_to_one_core()
    header = f"{'interval':>8} {'none t/s':>10} {'outer t/s':>10} {'strict t/s':>10} {'outer/none':>10} "
    header += f"{'strict/none':>11} {'outer ord%':>10} {'strict ord%':>11} {'none ooo%':>9} {'none max ms':>11}"
    print(header)
    rows = []
    for exp in args.exponents:
        row = measure(1 << exp, args.seconds, args.released)
        rows.append(row)
        none, outer, strict = (row[o] for o in ORDERS)
        print(
            f"{'2^' + str(exp):>8} {none['tuples_per_s']:>10,.0f} {outer['tuples_per_s']:>10,.0f} "
            f"{strict['tuples_per_s']:>10,.0f} {outer['throughput_vs_none']:>10.2f} "
            f"{strict['throughput_vs_none']:>11.2f} {100 * outer['order_share']:>10.1f} "
            f"{100 * strict['order_share']:>11.1f} {100 * none['out_of_order_fraction']:>9.1f} "
            f"{none['max_disorder_ms']:>11,}"
        )
    result = {
        "benchmark": "ordering",
        "workload": (
            f"band join |R.x-S.a|<=10 AND |R.y-S.b|<=10, values uniform 1..10^4, R/S alternating 1 ms apart, "
            f"time window of {2 * WINDOW_TUPLES} ms ({WINDOW_TUPLES} tuples per stream) spread over {CORES} join "
            "cores; punctuation interval = input tuples per batch"
        ),
        "machine": machine_facts(),
        "cores_spread": CORES,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(rows, args.out.with_suffix(".png"))
    print(f"written: {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
