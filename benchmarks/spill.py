"""Memory adaptation benchmark (paper 004): which groups to push (Fig. 11) and lazy-disk vs active-disk (Fig. 21).

Kernel level, no Spark: the 3-way equi-join A.k = B.k = C.k over a sliding time window, one MJoin per partition
group (operators/spill), fed one second of event time per chunk at a fixed input rate, the planner run after
every chunk. As in the paper the input rate is fixed, so throughput is results per second of *input* (event)
time; processing seconds are reported beside it. Each group has a join ratio r: its keys are drawn from a pool
sized so that a tuple meets about r tuples of each other stream inside the window (about r^2 results).

- Fig. 11 (one slot, memory budget below the state): 1/3 of the groups have r = 4, 1/3 r = 2, 1/3 r = 1; 30% of
  the used memory is pushed each time the budget is passed, choosing the least productive groups (largest
  P_s/P_o: "Low-OutputRate" pushed) or the most productive ("High-OutputRate" pushed).
- Fig. 21 (three slots, aggregate memory below the state, memory balanced): the groups of slot 0 have r = 4,
  those of slots 1 and 2 r = 1. Lazy-disk only pushes where a slot overflows; active-disk sees slot 0's output
  rate per group far above the others', forces pushes on slots 1 and 2 (up to M_q - M_c, M_q measured by the
  in-memory run) and then relocates slot 0's productive groups into the freed memory.

Every run ends with the exact clean-up; the total (normal run + clean-up) is checked equal to the in-memory run's.

    python -m benchmarks.spill [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.machine import machine_facts, pin_to_one_core
from tests.models.spill_cluster import AdaptiveCluster
from windjoin.connectors.files.spill_files import SpillFiles
from windjoin.operators.batch import Arrivals
from windjoin.operators.partitioning import partition_of
from windjoin.operators.spec import JoinSpec, parse_spec
from windjoin.operators.spill.config import MemoryAdaptationConfig
from windjoin.operators.spill.planner import Move, Push

RESULTS = Path(__file__).parent / "results" / "spill.json"
STREAMS = ("A", "B", "C")


@dataclass(frozen=True)
class Workload:
    partitions: int
    seconds: int  # event time span
    rate: int  # tuples per second over all streams
    window_s: int
    ratios: tuple[int, ...]  # join ratio per partition
    chunk_s: int = 1  # event-time seconds per chunk (the planner runs after each)

    def spec(self) -> JoinSpec:
        return parse_spec(
            {
                "window": {"kind": "time", "size_ms": self.window_s * 1000},
                "streams": {s: {"fields": {"k": "int"}, "key": "k"} for s in STREAMS},
                "tasks": [
                    {
                        "name": "abc",
                        "join": list(STREAMS),
                        "on": [
                            {"op": "eq", "left": "A.k", "right": "B.k"},
                            {"op": "eq", "left": "B.k", "right": "C.k"},
                        ],
                    }
                ],
                "partitions": self.partitions,
                "slots": 1,
            }
        )

    def chunks(self, seed: int = 0) -> list[dict[str, Arrivals]]:
        """One chunk per `chunk_s` seconds of event time, tuples in time order, groups equally loaded."""
        rng = np.random.default_rng(seed)
        # Per group and stream, the tuples inside one window; r of them share a key on average.
        in_window = self.rate * self.window_s / self.partitions / len(STREAMS)
        pool_size = [max(1, round(in_window / r)) for r in self.ratios]
        candidates = np.arange(max(pool_size) * self.partitions * 4, dtype=np.int64)
        owner = partition_of(candidates, self.partitions)
        table = np.stack([candidates[owner == p][: max(pool_size)] for p in range(self.partitions)])
        out = []
        for start in range(0, self.seconds, self.chunk_s):
            n = self.rate * self.chunk_s
            ts = np.sort(start * 1000 + rng.integers(0, 1000 * self.chunk_s, n))
            stream = rng.integers(0, len(STREAMS), n)
            group = rng.integers(0, self.partitions, n)
            slot = np.floor(rng.random(n) * np.asarray(pool_size)[group]).astype(np.int64)
            keys = table[group, slot]
            order = np.arange(n)
            out.append(
                {
                    name: Arrivals({"ts": ts[stream == i], "k": keys[stream == i]}, order[stream == i])
                    for i, name in enumerate(STREAMS)
                }
            )
        return out


def run(
    name: str,
    workload: Workload,
    chunks: list[dict[str, Arrivals]],
    config: MemoryAdaptationConfig,
    slot_of: dict[int, int],
    query_bytes: int | None = None,
    relocate: bool = True,
) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="windjoin-spill-"))
    files: dict[int, SpillFiles] = {}

    def files_of(i: int) -> SpillFiles:
        files[i] = SpillFiles(root / f"slot{i}")
        return files[i]

    try:
        cluster = AdaptiveCluster(
            workload.spec(), config, files_of, slot_of, adapt_every=1, query_bytes=query_bytes, relocate=relocate
        )
        per_second, peak, process_s = [], 0, 0.0
        for chunk in chunks:
            started = time.perf_counter()
            found = cluster.process(chunk)
            process_s += time.perf_counter() - started
            per_second.append(found.outputs / workload.chunk_s)
            peak = max(peak, sum(s.used_bytes for s in cluster.slots))
        normal = int(round(sum(per_second) * workload.chunk_s))
        started = time.perf_counter()
        cleaned = cluster.cleanup(progress=True)
        cleanup_s = time.perf_counter() - started
        decisions = [d for _, d in cluster.log.decisions]
        result = {
            "name": name,
            "normal_run_results": normal,
            "normal_run_seconds": process_s,
            "normal_run_results_per_input_s": normal / workload.seconds,
            "input_tuples_per_processing_s": workload.rate * workload.seconds / process_s,
            "cleanup_results": int(sum(len(r) for r in cleaned)),
            "cleanup_seconds": cleanup_s,
            "total_results": normal + int(sum(len(r) for r in cleaned)),
            "peak_memory_bytes": peak,
            "pushes": sum(isinstance(d, Push) and not d.forced for d in decisions),
            "forced_pushes": sum(isinstance(d, Push) and d.forced for d in decisions),
            "groups_pushed": sum(len(d.parts) for d in decisions if isinstance(d, Push)),
            "moves": sum(isinstance(d, Move) for d in decisions),
            "groups_moved": sum(len(d.parts) for d in decisions if isinstance(d, Move)),
            "pushed_bytes": cluster.log.pushed_bytes,
            "moved_bytes": cluster.log.moved_bytes,
            "spill_file_bytes_written": sum(f.bytes_written for f in files.values()),
            "results_per_input_second": per_second,  # one value per chunk
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"{name:<28} {result['normal_run_results']:>11,} {result['normal_run_seconds']:>8.1f} "
        f"{result['cleanup_results']:>11,} {result['cleanup_seconds']:>8.1f} {result['total_results']:>11,} "
        f"{result['pushes']:>6} {result['forced_pushes']:>6} {result['moves']:>6}",
        flush=True,
    )
    return result


HEADER = (
    f"{'run':<28} {'normal res':>11} {'proc s':>8} {'cleanup res':>11} {'clean s':>8} {'total':>11} "
    f"{'push':>6} {'forced':>6} {'moves':>6}"
)


def fig11(
    partitions: int, seconds: int, rate: int, window_s: int, chunk_s: int, budget_share: float
) -> dict[str, object]:
    ratios = tuple((4, 2, 1)[p % 3] for p in range(partitions))
    workload = Workload(partitions, seconds, rate, window_s, ratios, chunk_s)
    chunks = workload.chunks(seed=11)
    one_slot = dict.fromkeys(range(partitions), 0)
    print(f"\nFig. 11: one slot, join ratios 4/2/1, budget {budget_share:.0%} of the in-memory peak\n{HEADER}")
    unlimited = MemoryAdaptationConfig(memory_bytes=1 << 40)
    memory = run("in memory", workload, chunks, unlimited, one_slot)
    budget = int(budget_share * memory["peak_memory_bytes"])
    runs = [memory]
    for label, choose in (("30%-Low-OutputRate", "least_productive"), ("30%-High-OutputRate", "most_productive")):
        config = MemoryAdaptationConfig(memory_bytes=budget, theta_m=1.0, push_fraction=0.3, choose=choose)
        runs.append(run(label, workload, chunks, config, one_slot))
    low, high = runs[1], runs[2]
    return {
        "workload": workload.__dict__ | {"ratios": "4/2/1 by partition mod 3"},
        "memory_budget_bytes": budget,
        "runs": runs,
        "low_vs_high": {
            "normal_run_results_ratio": low["normal_run_results"] / max(1, high["normal_run_results"]),
            "cleanup_seconds_ratio": low["cleanup_seconds"] / max(1e-9, high["cleanup_seconds"]),
            "cleanup_results_ratio": low["cleanup_results"] / max(1, high["cleanup_results"]),
        },
        "exact": len({r["total_results"] for r in runs}) == 1,
    }


def fig21(
    partitions: int, seconds: int, rate: int, window_s: int, chunk_s: int, budget_share: float
) -> dict[str, object]:
    slot_of = {p: p % 3 for p in range(partitions)}
    ratios = tuple(4 if slot_of[p] == 0 else 1 for p in range(partitions))
    workload = Workload(partitions, seconds, rate, window_s, ratios, chunk_s)
    chunks = workload.chunks(seed=21)
    print(f"\nFig. 21: three slots, slot 0 ratio 4, slots 1-2 ratio 1, budget {budget_share:.0%} of the peak\n{HEADER}")
    memory = run("in memory", workload, chunks, MemoryAdaptationConfig(memory_bytes=1 << 40), slot_of)
    query_bytes = int(memory["peak_memory_bytes"])
    budget = int(budget_share * query_bytes / 3)
    runs = [memory]
    for policy in ("lazy_disk", "active_disk"):
        config = MemoryAdaptationConfig(
            policy=policy, memory_bytes=budget, theta_m=1.0, push_fraction=0.3, theta_d=0.8, theta_f=2.0
        )
        runs.append(run(policy.replace("_", "-"), workload, chunks, config, slot_of, query_bytes=query_bytes))
    lazy, active = runs[1], runs[2]
    return {
        "workload": workload.__dict__ | {"ratios": "4 on slot 0's groups (p mod 3 == 0), 1 elsewhere"},
        "memory_budget_bytes_per_slot": budget,
        "query_bytes_M_q": query_bytes,
        "runs": runs,
        "active_vs_lazy": {
            "normal_run_results_ratio": active["normal_run_results"] / max(1, lazy["normal_run_results"]),
            "cleanup_seconds_ratio": active["cleanup_seconds"] / max(1e-9, lazy["cleanup_seconds"]),
        },
        "exact": len({r["total_results"] for r in runs}) == 1,
    }


def smooth(values: list[int], width: int) -> np.ndarray:
    """Centred moving mean; near the ends, over the values there are."""
    v = np.asarray(values, dtype=float)
    kernel = np.ones(width)
    return np.convolve(v, kernel, mode="same") / np.convolve(np.ones_like(v), kernel, mode="same")


def plot(result: dict, key: str, title: str, path: Path, width: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result[key]["runs"]
    chunk_s = result[key]["workload"]["chunk_s"]
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    for r in runs:
        rate = r["results_per_input_second"]
        t = (np.arange(len(rate)) + 1) * chunk_s
        left.plot(t, smooth(rate, width), label=r["name"])
        mid.plot(t, np.cumsum(rate) * chunk_s, label=r["name"])
    left.set(
        xlabel="input (event) time, s", ylabel="results per input second", title=f"throughput ({width}-chunk mean)"
    )
    mid.set(xlabel="input (event) time, s", ylabel="results so far", title="cumulative results (normal run)")
    names = [r["name"] for r in runs]
    x = np.arange(len(runs))
    right.bar(x - 0.2, [r["cleanup_results"] for r in runs], 0.4, label="clean-up results")
    twin = right.twinx()
    twin.bar(x + 0.2, [r["cleanup_seconds"] for r in runs], 0.4, color="tab:red", label="clean-up seconds")
    right.set_xticks(x, names, rotation=15)
    right.set(ylabel="results found by the clean-up", title="clean-up")
    twin.set_ylabel("clean-up seconds", color="tab:red")
    left.legend()
    mid.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=48)
    parser.add_argument("--seconds", type=int, default=360, help="event-time seconds of input")
    parser.add_argument("--rate", type=int, default=500, help="input tuples per event-time second")
    parser.add_argument("--window", type=int, default=60, help="time window, seconds")
    parser.add_argument("--chunk", type=int, default=4, help="event-time seconds per chunk (a planning round each)")
    parser.add_argument("--budget", type=float, default=0.5, help="memory budget as a share of the in-memory peak")
    parser.add_argument("--quick", action="store_true", help="a smaller run (smoke test)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.partitions, args.seconds, args.rate, args.window, args.chunk = 15, 60, 300, 15, 2
    pin_to_one_core()
    started = time.perf_counter()
    shape = (args.partitions, args.seconds, args.rate, args.window, args.chunk, args.budget)
    result = {
        "benchmark": "spill",
        "machine": machine_facts(),
        "join": "A.k = B.k = C.k, time window, one MJoin per partition group, one chunk per event-time second",
        "fig11": fig11(*shape),
        "fig21": fig21(*shape),
    }
    result["seconds"] = time.perf_counter() - started
    width = max(1, args.seconds // args.chunk // 24)
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    plot(
        result,
        "fig11",
        "Fig. 11 shape: pushing low- vs high-output-rate groups (one slot)",
        out.with_name(out.stem + "_fig11.png"),
        width,
    )
    plot(
        result,
        "fig21",
        "Fig. 21 shape: lazy-disk vs active-disk (three slots)",
        out.with_name(out.stem + "_fig21.png"),
        width,
    )
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nfig11 low vs high: {result['fig11']['low_vs_high']}  exact: {result['fig11']['exact']}")
    print(f"fig21 active vs lazy: {result['fig21']['active_vs_lazy']}  exact: {result['fig21']['exact']}")
    print(f"written: {out} (+ _fig11.png, _fig21.png) in {result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
