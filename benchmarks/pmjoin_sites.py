"""Distributed PMJoin on 3 site processes over Kafka: measured cross-site traffic vs the planner's prediction.

For each example STATS file and seed, `windjoin sites run` is executed twice on the same events: with the plan the
STATS file asks for (PMJoin) and with the unpartitioned plan (Algorithm 1 alone, `--method none`), the baseline.
Reported per run: predicted and measured planner units/s (tuple size 1, results sized as the sum of their
inputs), their ratio, encoded bytes/s actually produced (JSON records + headers) and watermark bytes/s, results
and whether they equal a centralized MJoin, wall time; and the measured PMJoin/unpartitioned traffic ratio.

    python -m benchmarks.pmjoin_sites [--quick] [--bootstrap HOST:PORT]

Without --bootstrap (or WINDJOIN_KAFKA_BOOTSTRAP) an embedded Tansu broker is started and stopped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from benchmarks.machine import machine_facts
from windjoin.connectors.local import services as svc
from windjoin.pipelines.sites.driver import SitesRunConfig, run_sites

RESULTS = Path(__file__).parent / "results" / "pmjoin_sites.json"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FULL = {"examples": ["pmjoin_sites.yaml", "pmjoin_sites_multi.yaml"], "span_s": 1800, "seeds": [0, 1, 2]}
QUICK = {"examples": ["pmjoin_sites.yaml"], "span_s": 300, "seeds": [0]}


def one_run(bootstrap: str, stats: Path, span_s: float, seed: int, method: str | None, work: Path) -> dict:
    out = work / f"{stats.stem}-{seed}-{method or 'plan'}"
    report = run_sites(SitesRunConfig(stats, bootstrap, out, span_s, seed, timeout_s=600, method=method))
    cost = report["cost"]
    return {
        "stats": stats.name,
        "seed": seed,
        "plan": method or "as in STATS",
        "span_s": span_s,
        "events": sum(report["events"].values()),
        "predicted_units_per_s": cost["predicted_cost"],
        "measured_units_per_s": cost["measured_cost"],
        "ratio": cost["ratio"],
        "encoded_bytes_per_s": cost["encoded_bytes_per_s"],
        "watermark_bytes_per_s": cost["watermark_bytes_per_s"],
        "links": cost["links"],
        "results": report["results"],
        "equals_centralized_mjoin": report["equals_centralized_mjoin"],
        "wall_s": report["wall_s"]["total"],
        "sites_wall_s": report["wall_s"]["sites"],
    }


def run(bootstrap: str, setup: dict) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="windjoin-bench-sites-") as tmp:
        for name in setup["examples"]:
            for seed in setup["seeds"]:
                pm = one_run(bootstrap, EXAMPLES / name, setup["span_s"], seed, None, Path(tmp))
                base = one_run(bootstrap, EXAMPLES / name, setup["span_s"], seed, "none", Path(tmp))
                pm["measured_vs_unpartitioned"] = pm["measured_units_per_s"] / base["measured_units_per_s"]
                rows += [pm, base]
                for r in (pm, base):
                    print(
                        f"{r['stats']:<26} seed {r['seed']}  {r['plan']:<12} "
                        f"predicted {r['predicted_units_per_s']:7.3f}"
                        f"  measured {r['measured_units_per_s']:7.3f}  ratio {r['ratio']:.3f}  encoded "
                        f"{r['encoded_bytes_per_s']:8.0f} B/s  results {r['results']:6d} "
                        f"(= centralized: {r['equals_centralized_mjoin']})  wall {r['wall_s']:5.1f} s",
                        flush=True,
                    )
                print(f"  PMJoin / unpartitioned, measured: {pm['measured_vs_unpartitioned']:.3f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one example, one seed, 300 s of event time")
    parser.add_argument("--bootstrap", default=os.environ.get("WINDJOIN_KAFKA_BOOTSTRAP"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    setup = QUICK if args.quick else FULL
    state_dir = None
    bootstrap = args.bootstrap
    try:
        if not bootstrap:
            state_dir = Path(tempfile.mkdtemp(prefix="windjoin-sites-broker-"))
            [started] = svc.up(svc.ServicesConfig(state_dir=state_dir, redis=False))
            bootstrap = started.service.url
        rows = run(bootstrap, setup)
    finally:
        if state_dir is not None:
            svc.down(state_dir)
    ratios = [r["ratio"] for r in rows]
    summary = {
        "max_abs_deviation": max(abs(x - 1) for x in ratios),
        "all_results_equal_centralized": all(r["equals_centralized_mjoin"] for r in rows),
    }
    print(f"measured/predicted over {len(rows)} runs: {min(ratios):.3f} .. {max(ratios):.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine_facts(), "setup": setup, "summary": summary, "runs": rows}
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
