"""S2J benchmark (paper 001): indexes vs pairwise comparison, and concurrent tasks sharing one input flow.

S2J claims (a) that hash and ordered indexes raise the join efficiency P = outputs / comparisons far above
comparing every pair (Appendix B; "up to 2 to 3 orders" fewer join operations, Sec. "Enhancing Join Processing
Efficiency"), and (b) that concurrent join tasks on one stream pair should share its input flow rather than
each get a copy of the streams (Sec. "Eliminating Stream Duplication"). This checks both on windjoin:

1. P and tuples/s of `WindowJoin` with and without indexes (`benchmarks.kernels.measure`), for an equi-join
   and the band join, on the SplitJoin band workload (operators/workloads/band.py) with full count windows.
2. N = 1, 2, 4, 8 tasks with different predicates on the same R, S, over one JSON Lines file through the
   `windjoin join-file` path (pipelines/cli/join_file.py): as one spec in one pass (one read of the file, one
   window store per stream) and as N single-task runs (N reads). Bytes read are the process's read syscalls
   (/proc/self/io rchar) over each run; throughput is input tuples per second summed over tasks. Every task
   must count the same results in both setups, or the run fails.

Rates are per core (the process pins itself to one); each part-2 setup runs `repeats` times, the fastest kept.

    python -m benchmarks.s2j [--quick]
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.kernels import measure
from benchmarks.machine import machine_facts, pin_to_one_core
from benchmarks.params_cli import benchmark_parser, params_from
from benchmarks.results_file import write_results
from windjoin.connectors.formats.jsonl_file import write_record
from windjoin.operators.spec import JoinSpec, parse_spec
from windjoin.operators.workloads.band import BAND_SPEC, band_events
from windjoin.pipelines.cli.join_file import Refusal, join_file

RESULTS = Path(__file__).parent / "results" / "s2j.json"
TASK_COUNTS = (1, 2, 4, 8)
INDEXED_CHUNK, NESTED_LOOP_CHUNK = 4096, 64  # as in benchmarks.kernels
EVENT_SLICE = 100_000  # events generated at a time while writing the input file (even: R, S stay alternating)


def _eq(left: str, right: str) -> dict[str, Any]:
    return {"op": "eq", "left": left, "right": right}


def _band(left: str, right: str, width: float) -> dict[str, Any]:
    return {"op": "band", "left": left, "right": right, "width": width}


# Concurrent tasks on R(x int, y float) and S(a int, b float), values uniform in 1..10^4: equalities, band widths
# and compound predicates, each finding 0.02-0.4 partners per tuple with 4096-tuple windows (selectivity
# 4e-6..1e-4), so that writing results does not drown the input side that sharing saves.
TASKS: list[tuple[str, list[dict[str, Any]]]] = [
    ("eq_x", [_eq("R.x", "S.a")]),
    ("band_y_0_5", [_band("R.y", "S.b", 0.5)]),
    ("band_xy_10", [_band("R.x", "S.a", 10), _band("R.y", "S.b", 10)]),
    ("eq_x_band_y_1000", [_eq("R.x", "S.a"), _band("R.y", "S.b", 1000)]),
    ("band_y_0_25", [_band("R.y", "S.b", 0.25)]),
    ("band_xy_20", [_band("R.x", "S.a", 20), _band("R.y", "S.b", 20)]),
    ("band_y_0_1", [_band("R.y", "S.b", 0.1)]),
    ("eq_x_band_y_5000", [_eq("R.x", "S.a"), _band("R.y", "S.b", 5000)]),
]

EFFICIENCY_SPECS = {
    "equi-join R.x = S.a": {**BAND_SPEC, "tasks": [{"name": "eq_x", "join": ["R", "S"], "on": [_eq("R.x", "S.a")]}]},
    "band join |R.x-S.a|<=10 AND |R.y-S.b|<=10": BAND_SPEC,
}


@dataclass(frozen=True)
class Params:
    events: int = 600_000  # events in the input file, R and S alternating
    window: int = 4096  # part 2: count window per stream
    repeats: int = 3  # part 2: runs per setup, the fastest kept
    efficiency_window: int = 1 << 16  # part 1: count window per stream, filled before timing
    seconds: float = 3.0  # part 1: timed seconds per measurement
    seed: int = 0


QUICK = {"events": 20_000, "repeats": 1, "efficiency_window": 1 << 13, "seconds": 0.2}


# ---------------------------------------------------------------------------------------------------------
# Part 1: efficiency P, indexed vs nested loop
# ---------------------------------------------------------------------------------------------------------


def efficiency(params: Params) -> list[dict[str, Any]]:
    rows = []
    for name, spec in EFFICIENCY_SPECS.items():
        window, seconds = params.efficiency_window, params.seconds
        indexed = measure(window, INDEXED_CHUNK, True, seconds, params.seed, spec)
        nested = measure(window, NESTED_LOOP_CHUNK, False, seconds, params.seed, spec)
        rows.append(
            {
                "join": name,
                "window_per_stream": params.efficiency_window,
                "indexed": indexed,
                "nested_loop": nested,
                "P_ratio_indexed_over_nested_loop": indexed["efficiency_P"] / nested["efficiency_P"],
                "speedup_tuples_per_s": indexed["tuples_per_s"] / nested["tuples_per_s"],
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------------------
# Part 2: N concurrent tasks, one shared pass vs N separate passes over the same file
# ---------------------------------------------------------------------------------------------------------


def write_events(path: Path, n: int, seed: int) -> None:
    """n band-workload events, R and S alternating, event times 0..n-1, one JSON object per line."""
    with path.open("wb") as out:
        for start in range(0, n, EVENT_SLICE):
            for event in band_events(min(EVENT_SLICE, n - start), seed + start):
                event["ts"] += start
                write_record(out, event)


def bytes_read_so_far() -> int:
    """Bytes this process has received from read syscalls (Linux /proc/self/io rchar, page-cache hits included)."""
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no rchar line")


class CountingSink:
    """Where results go: their bytes are counted, not kept (both setups write the same results)."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self.bytes += len(data)
        return len(data)


def _refused(refusal: Refusal) -> None:
    raise RuntimeError(f"line {refusal.line} refused ({refusal.reason}): {refusal.detail}")


def task_spec(window: int, tasks: list[tuple[str, list[dict[str, Any]]]]) -> JoinSpec:
    tasks_spec = [{"name": name, "join": ["R", "S"], "on": on} for name, on in tasks]
    return parse_spec({**BAND_SPEC, "window": {"kind": "count", "size": window}, "tasks": tasks_spec})


def run_file(spec: JoinSpec, events: Path) -> dict[str, Any]:
    """One `join-file` pass: wall seconds, bytes read, results per task and result bytes written."""
    sink, read_before, started = CountingSink(), bytes_read_so_far(), time.perf_counter()
    report = join_file(spec, events, sink, _refused, show_progress=False)
    return {
        "seconds": time.perf_counter() - started,
        "bytes_read": bytes_read_so_far() - read_before,
        "results": {name: summary["outputs"] for name, summary in report.tasks.items()},
        "result_bytes": sink.bytes,
    }


def _separate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """N single-task passes as one setup: their times and bytes add up, each contributes its task's results."""
    return {
        "seconds": sum(r["seconds"] for r in runs),
        "seconds_by_task": {name: r["seconds"] for r in runs for name in r["results"]},
        "bytes_read": sum(r["bytes_read"] for r in runs),
        "results": {name: count for r in runs for name, count in r["results"].items()},
        "result_bytes": sum(r["result_bytes"] for r in runs),
    }


def concurrency(params: Params, events: Path) -> list[dict[str, Any]]:
    run_file(task_spec(params.window, TASKS[:1]), events)  # warm-up: lazy imports, page cache
    rows = []
    for n in TASK_COUNTS:
        tasks = TASKS[:n]
        shared_runs, separate_runs = [], []
        for _ in range(params.repeats):
            shared_runs.append(run_file(task_spec(params.window, tasks), events))
            separate_runs.append(_separate([run_file(task_spec(params.window, [t]), events) for t in tasks]))
        for shared, separate in zip(shared_runs, separate_runs, strict=True):
            if shared["results"] != separate["results"]:
                raise RuntimeError(f"N={n}: results per task differ, shared {shared['results']} vs {separate}")
        setups = {
            "shared": min(shared_runs, key=lambda r: r["seconds"]),
            "separate": min(separate_runs, key=lambda r: r["seconds"]),
        }
        for run in setups.values():
            run["tuples_per_s"] = n * params.events / run["seconds"]
        shared, separate = setups["shared"], setups["separate"]
        rows.append(
            {
                "tasks": n,
                "task_names": [name for name, _ in tasks],
                **setups,
                "results_equal": True,
                "bytes_read_ratio_shared_over_separate": shared["bytes_read"] / separate["bytes_read"],
                "throughput_ratio_shared_over_separate": shared["tuples_per_s"] / separate["tuples_per_s"],
                "wall_ratio_shared_over_separate": shared["seconds"] / separate["seconds"],
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------------


def print_tables(result: dict[str, Any]) -> None:
    print(f"{'join':<44} {'P indexed':>10} {'P NL':>9} {'P ratio':>9} {'idx t/s':>10} {'NL t/s':>8} {'speedup':>8}")
    for row in result["efficiency"]:
        idx, nl = row["indexed"], row["nested_loop"]
        print(
            f"{row['join']:<44} {idx['efficiency_P']:>10.3f} {nl['efficiency_P']:>9.2e} "
            f"{row['P_ratio_indexed_over_nested_loop']:>9.3g} {idx['tuples_per_s']:>10,.0f} "
            f"{nl['tuples_per_s']:>8,.0f} {row['speedup_tuples_per_s']:>7,.0f}x"
        )
    print(
        f"\n{'N':>2} {'MB read shared':>15} {'separate':>9} {'ratio':>6} {'t/s shared':>11} {'separate':>9} "
        f"{'ratio':>6} {'wall s shared':>14} {'separate':>9} {'results (each task)':>20}"
    )
    for row in result["concurrency"]:
        shared, separate = row["shared"], row["separate"]
        print(
            f"{row['tasks']:>2} {shared['bytes_read'] / 1e6:>15.1f} {separate['bytes_read'] / 1e6:>9.1f} "
            f"{row['bytes_read_ratio_shared_over_separate']:>6.3f} {shared['tuples_per_s']:>11,.0f} "
            f"{separate['tuples_per_s']:>9,.0f} {row['throughput_ratio_shared_over_separate']:>6.2f} "
            f"{shared['seconds']:>14.2f} {separate['seconds']:>9.2f} {'equal':>20}"
        )


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4))
    joins = [row["join"].split(" ", 1)[0] for row in result["efficiency"]]
    for offset, (key, label) in zip((-0.2, 0.2), (("indexed", "indexed"), ("nested_loop", "nested loop")), strict=True):
        values = [row[key]["efficiency_P"] for row in result["efficiency"]]
        ax1.bar([i + offset for i in range(len(joins))], values, width=0.4, label=label)
    ax1.set_xticks(range(len(joins)), joins)
    ax1.set_yscale("log")
    ax1.set_ylim(top=30)  # room for the legend above the indexed bars
    ax1.set_ylabel("P = outputs / comparisons")
    ax1.set_title(f"efficiency, windows of {result['params']['efficiency_window']:,} tuples")
    ax1.legend(loc="upper right")
    counts = [row["tasks"] for row in result["concurrency"]]
    for setup, style in (("shared", "o-"), ("separate", "s--")):
        runs = [row[setup] for row in result["concurrency"]]
        ax2.plot(counts, [r["bytes_read"] / 1e6 for r in runs], style, label=setup)
        ax3.plot(counts, [r["tuples_per_s"] for r in runs], style, label=setup)
    ax2.set_ylabel("input MB read")
    ax2.set_title("bytes read for N concurrent tasks")
    ax3.set_ylabel("input tuples/s summed over tasks")
    ax3.set_title("throughput for N concurrent tasks (1 core)")
    for ax in (ax2, ax3):
        ax.set_xlabel("N tasks")
        ax.set_xticks(counts)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    args = benchmark_parser(__doc__, Params(), QUICK, RESULTS).parse_args()
    params = params_from(args, Params(), QUICK)
    pin_to_one_core()
    efficiency_rows = efficiency(params)
    with tempfile.TemporaryDirectory(prefix="s2j-") as tmp:
        events = Path(tmp) / "events.jsonl"
        write_events(events, params.events, params.seed)
        file_bytes = events.stat().st_size
        concurrency_rows = concurrency(params, events)
    result = {
        "benchmark": "s2j",
        "machine": machine_facts(),
        "params": asdict(params),
        "input_file_bytes": file_bytes,
        "efficiency": efficiency_rows,
        "concurrency": concurrency_rows,
        "paper": {
            "efficiency": "indexes cut the join operations by up to 2-3 orders of magnitude; P_pairwise = kappa/(r*s)",
            "concurrency": "tasks sharing the input flow save the cost of duplicating the streams per task "
            "(no figures for bandwidth: 'not done yet'; throughput figures have no numbers in the text)",
        },
    }
    print_tables(result)
    print(write_results(result, args.out, plot))


if __name__ == "__main__":
    main()
