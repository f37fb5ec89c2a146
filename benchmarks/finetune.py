"""Fine tuning (paper 000, Figs. 7-8) and the adaptive degree of declustering (Fig. 11), on an operator model.

No Spark: benchmarks.finetune_model runs one real WindowJoin (nested loops inside a unit, as the paper) per
partition or mini-group, the controller's `control_step` every reorganisation epoch, and a simulated clock in
which a slot's batch time is its measured CPU seconds times SLOWDOWN. Keys: b-model (b = 0.7) over the hash
partitions, its first splits lined up with the round-robin slots (PartitionSkewedKeys), few keys per partition.

- Figs. 7-8: per-stream rate rising; CPU seconds and production delay without control (static round robin),
  with whole-partition reorganisation only (no fine tuning: a hot partition cannot be split) and with
  extendible-hash fine tuning (mini-groups, moved like partitions), on a fixed number of slots.
- Fig. 11: a rate rising and falling over the run; paper 000's adaptive degree of declustering against a
  fixed number of slots (the maximum): slots over time, slot-seconds used, delay and CPU.

Every run's pairs (count and an order-free checksum) must equal the run without control, or the benchmark fails.

    python -m benchmarks.finetune [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from benchmarks.finetune_model import ModelCluster, Tuples, equi_spec
from benchmarks.machine import machine_facts
from windjoin.operators.control.config import parse_control_config
from windjoin.operators.workloads.b_model import PartitionSkewedKeys

RESULTS = Path(__file__).parent / "results" / "finetune.json"


@dataclass(frozen=True)
class Params:
    partitions: int = 16
    slots: int = 4
    keys_per_partition: int = 1000
    window_s: float = 10.0
    batch_s: float = 1.0  # distribution epoch
    epoch_batches: int = 2  # reorganisation epoch = 2 distribution epochs (the paper's 4 s and 2 s)
    seconds: int = 40
    warmup_s: int = 10
    rates: tuple[int, ...] = (1000, 2000, 3000, 4000, 5000, 6000)  # tuples/s per stream (Figs. 7-8)
    theta: int = 2000  # window tuples of a unit: fine tuning keeps units within [theta, 2 theta]
    slowdown: float = 40.0  # model node seconds per CPU second of this machine
    skew: float = 0.7
    seed: int = 7
    # Fig. 11: the per-stream rate rises linearly from low to high over the first half, then falls back
    wave_low: int = 500
    wave_high: int = 6000
    wave_seconds: int = 80
    max_slots: int = 8


QUICK = Params(seconds=12, warmup_s=4, rates=(1000, 4000), wave_seconds=16, wave_high=4000)


def workload(p: Params, rate_at, seconds: int) -> Tuples:
    """Poisson arrivals at rate_at(second) per stream, keys b-model-skewed over partitions aligned with slots."""
    rng = np.random.default_rng(p.seed)
    keys = PartitionSkewedKeys(p.keys_per_partition * p.partitions, p.partitions, p.skew, p.seed, p.slots)
    streams, ts = [], []
    for second in range(seconds):
        for s in (0, 1):
            n = rng.poisson(rate_at(second))
            streams.append(np.full(n, s, dtype=np.int64))
            ts.append(second * 1000 + rng.integers(0, 1000, n))
    stream, stamps = np.concatenate(streams), np.concatenate(ts)
    order = np.argsort(stamps, kind="stable")
    stream, stamps = stream[order], stamps[order]
    return Tuples(stream, keys.sample(len(stamps), rng), np.arange(len(stamps), dtype=np.int64), stamps)


def run(p: Params, tuples: Tuples, config: dict | None, slots: int) -> ModelCluster:
    spec = equi_spec(int(p.window_s * 1000), p.partitions, slots)
    cluster = ModelCluster(
        spec,
        parse_control_config(config) if config is not None else None,
        slots,
        p.batch_s,
        p.epoch_batches,
        p.slowdown,
    )
    edges = np.searchsorted(tuples.ts, np.arange(0, tuples.ts[-1] + 1001, p.batch_s * 1000))
    for b in range(len(edges) - 1):
        cluster.run_batch(b, tuples.take(np.arange(edges[b], edges[b + 1])))
    return cluster


def fig7_config(p: Params, fine: bool) -> dict:
    return {
        "utilisation": {"capacity": 1e12, "min_workers": p.slots, "max_workers": p.slots},
        "reorganisation": {"occupancy": "cpu", "pick": "balance", "th_sup": 1.2 / p.slots, "th_con": 0.8 / p.slots},
        "fine_tuning": {"enabled": fine, "theta": p.theta},
    }


def fig11_config(p: Params, slots: tuple[int, int]) -> dict:
    return {
        "scaling": "declustering",
        "declustering": {"min_slots": slots[0], "max_slots": slots[1], "beta": 0.5},
        "utilisation": {"capacity": 1e12},
        "reorganisation": {"occupancy": "busy", "pick": "balance", "th_sup": 0.8, "th_con": 0.5},
        "fine_tuning": {"enabled": True, "theta": p.theta},
    }


def checked(name: str, got, baseline) -> dict:
    summary = got.summary(0)
    if (summary["pairs"], summary["checksum"]) != (baseline.pairs, baseline.checksum):
        sys.exit(
            f"{name}: {summary['pairs']} pairs (checksum {summary['checksum']}) differ from the run without "
            f"control ({baseline.pairs}, {baseline.checksum})"
        )
    return summary


def figs_7_8(p: Params) -> dict:
    rows = []
    for rate in p.rates:
        tuples = workload(p, lambda _s, rate=rate: rate, p.seconds)
        warm = int(p.warmup_s / p.batch_s)
        static = run(p, tuples, None, p.slots)
        row = {"rate": rate, "tuples": len(tuples.k)}
        for mode, config in (("static", None), ("whole", fig7_config(p, False)), ("fine", fig7_config(p, True))):
            cluster = static if config is None else run(p, tuples, config, p.slots)
            row[mode] = {**checked(f"rate {rate} {mode}", cluster, static), **_steady(cluster, warm)}
        row["cpu_whole_over_fine"] = row["whole"]["cpu_s"] / row["fine"]["cpu_s"]
        row["delay_whole_over_fine"] = row["whole"]["delay_mean_s"] / max(row["fine"]["delay_mean_s"], 1e-9)
        rows.append(row)
        print(
            f"rate {rate}/s/stream: "
            + ", ".join(
                f"{m} cpu {row[m]['cpu_s']:.2f}s delay {row[m]['delay_mean_s']:.2f}s"
                for m in ("static", "whole", "fine")
            ),
            flush=True,
        )
    return {"rows": rows}


def _steady(cluster: ModelCluster, warm: int) -> dict:
    s = cluster.summary(warm)
    return {"slowest_slot_batch_s": s["slowest_slot_batch_s"], "mean_slot_batch_s": s["mean_slot_batch_s"]}


def fig_11(p: Params) -> dict:
    half = p.wave_seconds / 2

    def rate_at(second: int) -> float:
        return p.wave_low + (p.wave_high - p.wave_low) * (1 - abs(second - half) / half)

    tuples = workload(p, rate_at, p.wave_seconds)
    baseline = run(p, tuples, None, p.slots)
    runs = {}
    for mode, config, slots in (
        ("fixed", fig11_config(p, (p.max_slots, p.max_slots)), p.max_slots),
        ("adaptive", fig11_config(p, (1, p.max_slots)), 1),
    ):
        cluster = run(p, tuples, config, slots)
        runs[mode] = {
            **checked(f"fig11 {mode}", cluster, baseline),
            "t": [r.t for r in cluster.records],
            "slots": [r.slots for r in cluster.records],
            "rate": [rate_at(int(r.t - p.batch_s)) for r in cluster.records],
            "lag_s": [r.finish - r.t for r in cluster.records],
        }
        print(
            f"fig11 {mode}: slots {min(runs[mode]['slots'])}..{max(runs[mode]['slots'])}, slot-seconds "
            f"{runs[mode]['slot_seconds_used']:.0f}, delay {runs[mode]['delay_mean_s']:.2f}s",
            flush=True,
        )
    return {"runs": runs}


def plot(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["fig7_8"]["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for mode, label in (("static", "no control"), ("whole", "without fine tuning"), ("fine", "with fine tuning")):
        rates = [r["rate"] for r in rows]
        axes[0].plot(rates, [r[mode]["sim_cpu_s"] / result["params"]["seconds"] for r in rows], "o-", label=label)
        axes[1].plot(rates, [r[mode]["delay_mean_s"] for r in rows], "o-", label=label)
    axes[0].set_ylabel("model CPU seconds per second of input (all slots)")
    axes[1].set_ylabel("mean production delay (s)")
    for ax in axes:
        ax.set_xlabel("arrival rate (tuples/s per stream)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_name(out.stem + "_fig7_8.png"), dpi=90)
    runs = result["fig11"]["runs"]
    fig, axes = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for mode, run_ in runs.items():
        axes[0].plot(run_["t"], run_["slots"], label=f"{mode}: {run_['slot_seconds_used']:.0f} slot-s")
        axes[1].plot(run_["t"], run_["lag_s"], label=f"{mode}: mean delay {run_['delay_mean_s']:.2f} s")
    ax2 = axes[0].twinx()
    ax2.plot(runs["adaptive"]["t"], runs["adaptive"]["rate"], color="grey", alpha=0.4)
    ax2.set_ylabel("rate (tuples/s per stream)")
    axes[0].set_ylabel("active slots")
    axes[1].set_ylabel("batch finish - arrival (s)")
    axes[1].set_xlabel("simulated time (s)")
    for ax in axes:
        ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(out.with_name(out.stem + "_fig11.png"), dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    p = QUICK if args.quick else Params()
    result = {"benchmark": "finetune", "machine": machine_facts(), "params": asdict(p)}
    result["fig7_8"] = figs_7_8(p)
    result["fig11"] = fig_11(p)
    runs = result["fig11"]["runs"]
    result["ratios"] = {
        "cpu_whole_over_fine": [r["cpu_whole_over_fine"] for r in result["fig7_8"]["rows"]],
        "delay_whole_over_fine": [r["delay_whole_over_fine"] for r in result["fig7_8"]["rows"]],
        "slot_seconds_fixed_over_adaptive": runs["fixed"]["slot_seconds_used"] / runs["adaptive"]["slot_seconds_used"],
    }
    print(
        f"{'rate':>5} {'cpu static':>10} {'cpu whole':>9} {'cpu fine':>8} {'delay whole':>11} {'delay fine':>10} "
        f"{'moves':>5} {'minis':>5}"
    )
    for r in result["fig7_8"]["rows"]:
        print(
            f"{r['rate']:>5} {r['static']['cpu_s']:>10.2f} {r['whole']['cpu_s']:>9.2f} {r['fine']['cpu_s']:>8.2f} "
            f"{r['whole']['delay_mean_s']:>11.2f} {r['fine']['delay_mean_s']:>10.2f} {r['fine']['moves']:>5} "
            f"{r['fine']['max_mini_groups']:>5}"
        )
    print(f"ratios: {result['ratios']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=float))
    plot(result, args.out)
    print(f"written: {args.out} and {args.out.stem}_fig7_8.png, {args.out.stem}_fig11.png")


if __name__ == "__main__":
    main()
