"""PMJoin planner benchmark: the trends of the paper's Figures 5, 6 and 8, priced by the rate-based cost model.

* Fig. 5 — Algorithm 1 (heuristic) vs Simple vs the exhaustive Optimal over the data range, 10 streams on 10 nodes,
  for LASW/HASW (low-rate streams with small/large windows) × SD/DD (similar/different distributions).
* Fig. 6 — the same three over the number of streams (data range 1000, rates 100/s, windows 10–100 s, DD).
* Fig. 8 — PMJoin over the number of partitions for hash, range and rate-based partitioning, 10 streams with rates
  10–1000/s and windows 10–100 s, data range 1000, CHS/RHS (contiguous/random hot spot) × SD/DD.

Costs are bytes/s with tuples of size 1 and results sized as the sum of their inputs (the model's, not a
simulation's). The average ratio of the heuristic to the optimum over every Fig. 5/6 instance is reported.

    python -m benchmarks.pmjoin [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import machine_facts
from benchmarks.pmjoin_workload import distributions, query, rates_and_windows
from windjoin.operators.pmjoin.baselines import best_centralized_plan, simple_plan
from windjoin.operators.pmjoin.heuristic import stream_join_opt
from windjoin.operators.pmjoin.model import Query, RateModel
from windjoin.operators.pmjoin.optimal import optimal_plan
from windjoin.operators.pmjoin.plan import plan_cost
from windjoin.operators.pmjoin.planner import source_inputs
from windjoin.operators.pmjoin.pmjoin import Partitioning, plan_pmjoin

RESULTS = Path(__file__).parent / "results" / "pmjoin.json"
METHODS = ("hash", "range", "rate")
FULL = {
    "streams": 10,
    "ranges": [10, 100, 1000, 10000, 100000],
    "repeats": 3,
    "stream_counts": list(range(2, 13)),
    "fig6_ranges": [1000, 100000],
    "fig8_range": 1000,
    "partitions": [1, 2, 5, 10, 50, 100, 500, 1000],
    "fig8_repeats": 2,
}
QUICK = {
    "streams": 6,
    "ranges": [10, 100, 1000],
    "repeats": 1,
    "stream_counts": [2, 3, 4, 5, 6],
    "fig6_ranges": [100, 1000],
    "fig8_range": 100,
    "partitions": [1, 2, 10, 100],
    "fig8_repeats": 1,
}


def three_plans(q: Query) -> dict[str, float]:
    model = RateModel(q)
    inputs = source_inputs(q)
    return {
        "heuristic": plan_cost(stream_join_opt(inputs, model), model),
        "simple": plan_cost(simple_plan(inputs, model), model),
        "optimal": optimal_plan(inputs, model).cost,
    }


def fig5(cfg: dict, rng: np.random.Generator, ratios: list[float]) -> dict:
    """By data range; each repeat keeps its rates, windows and distribution families across the ranges."""
    out = {}
    for order in ("LASW", "HASW"):
        for scenario in ("SD", "DD"):
            seeds = rng.integers(2**32, size=cfg["repeats"])
            rows = {"ranges": cfg["ranges"], "heuristic": [], "simple": [], "optimal": []}
            for r in cfg["ranges"]:
                runs = []
                for seed in seeds:
                    same = np.random.default_rng(seed)
                    rates, windows = rates_and_windows(cfg["streams"], same, order)
                    q = query(rates, windows, distributions(cfg["streams"], r, scenario, "CHS", same))
                    runs.append(three_plans(q))
                _collect(rows, runs, ratios)
            out[f"{order}-{scenario}"] = rows
    return out


def fig6(cfg: dict, rng: np.random.Generator, ratios: list[float]) -> dict:
    """By number of streams, at the paper's data range (1000) and at a wider one (joins more selective)."""
    out = {}
    for r in cfg["fig6_ranges"]:
        rows = {"streams": cfg["stream_counts"], "heuristic": [], "simple": [], "optimal": []}
        for n in cfg["stream_counts"]:
            runs = []
            for _ in range(cfg["repeats"]):
                rates = np.full(n, 100.0)
                windows = rng.uniform(10, 100, n)
                runs.append(three_plans(query(rates, windows, distributions(n, r, "DD", "CHS", rng))))
            _collect(rows, runs, ratios)
        out[f"range {r}"] = rows
    return out


def _collect(rows: dict, runs: list[dict[str, float]], ratios: list[float]) -> None:
    for key in ("heuristic", "simple", "optimal"):
        rows[key].append(float(np.mean([run[key] for run in runs])))
    ratios.extend(run["heuristic"] / run["optimal"] for run in runs if run["optimal"] > 0)


def fig8(cfg: dict, rng: np.random.Generator) -> dict:
    out = {}
    n = cfg["streams"]
    for layout in ("CHS", "RHS"):
        for scenario in ("SD", "DD"):
            rows: dict = {"partitions": cfg["partitions"], "unpartitioned": []}
            rows.update({m: [] for m in METHODS})
            rows.update({f"{m}_groups_keeping_unpartitioned_plan": [] for m in METHODS})
            for _ in range(cfg["fig8_repeats"]):
                rates, windows = rates_and_windows(n, rng)
                q = query(rates, windows, distributions(n, cfg["fig8_range"], scenario, layout, rng))
                model = RateModel(q)
                inputs = source_inputs(q)
                base = stream_join_opt(inputs, model)
                rows["unpartitioned"].append(plan_cost(base, model))
                for m in METHODS:
                    costs, kept = [], []
                    for d in cfg["partitions"]:
                        pm = plan_pmjoin(inputs, 0, model, Partitioning(m, d), unpartitioned=base)
                        costs.append(plan_cost(pm, model))
                        kept.append(sum(g.fallback for g in pm.groups))
                    rows[m].append(costs)
                    rows[f"{m}_groups_keeping_unpartitioned_plan"].append(kept)
            rows["unpartitioned"] = float(np.mean(rows["unpartitioned"]))
            for m in METHODS:
                rows[m] = np.mean(rows[m], axis=0).tolist()
                rows[f"{m}_groups_keeping_unpartitioned_plan"] = np.sum(
                    rows[f"{m}_groups_keeping_unpartitioned_plan"], axis=0
                ).tolist()
            out[f"{layout}-{scenario}"] = rows
    return out


def example1() -> dict[str, float]:
    """Table 1 of the paper: the three figures Example 1 quotes."""
    # rates of S1, S2, S3 (on nodes n1, n2, n3) per value a, b, c of the join attribute; windows of 0.5 s
    table = np.array([(0.1, 0.1, 100.0), (0.03, 50.0, 0.04), (50.0, 0.01, 0.02)])
    rates = table.sum(axis=1)
    q = query(rates, np.full(3, 0.5), table / rates[:, None], ["n1", "n2", "n3"])
    model, inputs = RateModel(q), source_inputs(q)
    base = stream_join_opt(inputs, model)
    pm = plan_pmjoin(inputs, 0, model, Partitioning("value"), unpartitioned=base)
    return {
        "best_centralized": plan_cost(best_centralized_plan(inputs, model), model),
        "distributed_unpartitioned": plan_cost(base, model),
        "pmjoin_substreams_abc": plan_cost(pm, model),
    }


def _print_methods_table(title: str, x_name: str, xs: list, rows: dict) -> None:
    """Heuristic, Simple and optimal cost per x value, and heuristic / optimal."""
    print(f"\n{title}")
    print(f"{x_name:>8} {'heuristic':>12} {'simple':>12} {'optimal':>12} {'heur/opt':>9}")
    for i, x in enumerate(xs):
        h, s, o = rows["heuristic"][i], rows["simple"][i], rows["optimal"][i]
        print(f"{x:>8} {h:>12.4g} {s:>12.4g} {o:>12.4g} {h / o if o else float('nan'):>9.3f}")


def print_tables(result: dict) -> None:
    ex = result["example1"]
    print(
        f"Example 1: centralized {ex['best_centralized']:.4g}, distributed {ex['distributed_unpartitioned']:.4g}, "
        f"PMJoin {ex['pmjoin_substreams_abc']:.4g} B/s"
    )
    for name, rows in result["fig5"].items():
        _print_methods_table(f"Fig. 5 {name}: cost (B/s) by data range", "range", rows["ranges"], rows)
    for name, rows in result["fig6"].items():
        _print_methods_table(f"Fig. 6 ({name}, DD): cost (B/s) by number of streams", "streams", rows["streams"], rows)
    for name, rows in result["fig8"].items():
        print(f"\nFig. 8 {name}: PMJoin cost (B/s) by partitions (unpartitioned {rows['unpartitioned']:.4g})")
        print(f"{'D':>6} " + " ".join(f"{m:>10}" for m in METHODS))
        for i, d in enumerate(rows["partitions"]):
            print(f"{d:>6} " + " ".join(f"{rows[m][i]:>10.4g}" for m in METHODS))
    hv = result["heuristic_vs_optimal"]
    print(
        f"\nheuristic / optimal over {hv['instances']} instances: "
        f"mean {hv['mean_ratio']:.4f}, max {hv['max_ratio']:.4f}, optimal in {hv['share_optimal']:.0%}"
    )


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 4, figsize=(18, 12))
    for ax, (name, rows) in zip(axes[0], result["fig5"].items(), strict=True):
        for key, style in (("simple", "s-"), ("heuristic", "o-"), ("optimal", "^--")):
            ax.plot(rows["ranges"], rows[key], style, label=key)
        ax.set(xscale="log", yscale="log", title=f"Fig. 5 {name}", xlabel="data range", ylabel="cost (B/s)")
        ax.legend()
    for ax, (name, rows) in zip(axes[1], result["fig6"].items(), strict=False):
        for key, style in (("simple", "s-"), ("heuristic", "o-"), ("optimal", "^--")):
            ax.plot(rows["streams"], rows[key], style, label=key)
        ax.set(title=f"Fig. 6 ({name}, DD)", xlabel="number of streams", ylabel="cost (B/s)")
        ax.legend()
    ax = axes[1][2]
    ratios = result["heuristic_vs_optimal"]["ratios"]
    ax.hist(ratios, bins=np.linspace(1.0, max(max(ratios), 1.01), 31))
    ax.set(title="heuristic / optimal (Fig. 5 and 6 instances)", xlabel="ratio", ylabel="instances")
    axes[1][3].axis("off")
    for ax, (name, rows) in zip(axes[2], result["fig8"].items(), strict=True):
        for m, style in zip(METHODS, ("o-", "s-", "^-"), strict=True):
            ax.plot(rows["partitions"], rows[m], style, label=m)
        ax.axhline(rows["unpartitioned"], color="grey", ls=":", label="no partitioning")
        ax.set(xscale="log", title=f"Fig. 8 {name}", xlabel="partitions", ylabel="cost (B/s)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def run(quick: bool, seed: int = 7) -> dict:
    cfg = QUICK if quick else FULL
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    ratios: list[float] = []
    result = {
        "benchmark": "pmjoin",
        "quick": quick,
        "config": cfg,
        "seed": seed,
        "example1": example1(),
        "fig5": fig5(cfg, rng, ratios),
        "fig6": fig6(cfg, rng, ratios),
        "fig8": fig8(cfg, rng),
    }
    result["heuristic_vs_optimal"] = {
        "instances": len(ratios),
        "mean_ratio": float(np.mean(ratios)),
        "max_ratio": float(np.max(ratios)),
        "min_ratio": float(np.min(ratios)),
        "share_optimal": float(np.mean(np.isclose(ratios, 1.0))),
        "ratios": [float(r) for r in ratios],
    }
    result["seconds"] = time.perf_counter() - started
    result["machine"] = machine_facts()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of a few seconds")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results JSON (the PNG goes next to it)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    result = run(args.quick, args.seed)
    print_tables(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    png = args.out.with_suffix(".png")
    plot(result, png)
    print(f"\n{result['seconds']:.1f} s; wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
