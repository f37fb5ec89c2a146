"""Reorganisation benchmark: slot batch times and production delay on a skewed workload, with and without the
controller moving partitions (paper 000's supplier/consumer reorganisation), in the same run.

Workload: R(ts, k, x) and S(ts, k, a) produced live by `windjoin generate --pace` (Poisson arrivals, RATE
events/s over both streams), R.k = S.k within a time window, skewed by the b-model (b = 0.7) in one of two ways
(`--workload`): over the hash partitions (`partitions`: over 10^7 key values, hashing would spread the skew
evenly, see README), or over a few key values (`hotkeys`: 256 keys, so the hottest partition alone outweighs a
slot and only a SplitJoin spread relieves it).
The job: local[2], PARTITIONS hash partitions on SLOTS slots (round robin at first), a batch per second.
With the controller: every batch's load is published to Redis, `pipelines.controller.Controller` steps every
EPOCH seconds (occupancy = each slot's share of the batch's processing seconds; suppliers above 1.2 fair shares,
consumers below 0.8; a hot slot holding one partition spreads it), and the job follows its decisions
(partitions move, or spread, with their window state).

Per batch it records each slot's processing seconds (the stateful handler's time for that slot), the slowest
slot over the mean, and the production delay (emission minus the later tuple's event time) of the batch's
pairs. Results: benchmarks/results/reorganisation-WORKLOAD.json and .png.
Run: `python -m benchmarks.reorganisation [--workload partitions|hotkeys]`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.machine import machine_facts
from benchmarks.teardown import tear_down

RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Params:
    workload: str = "partitions"  # "partitions": b-model over hash partitions; "hotkeys": over a few key values
    rate: float = 6000.0  # events/s over both streams
    seconds: float = 150.0
    warmup_s: float = 30.0  # batches finishing earlier are left out of the summaries
    keys: int = 20_000
    skew: float = 0.7
    seed: int = 9
    partitions: int = 32
    slots: int = 4
    window_ms: int = 5000
    lateness_ms: int = 2000
    trigger_ms: int = 1000
    epoch_s: float = 8.0

    @property
    def th_sup(self) -> float:  # 1.2 fair shares
        return 1.2 / self.slots

    @property
    def th_con(self) -> float:  # 0.8 fair shares
        return 0.8 / self.slots


WORKLOADS = {
    # skew between partitions, none inside: moves can even it out
    "partitions": {},
    # a few hot keys (b-model over 256 values): the hottest partitions outweigh a slot, only a spread relieves them
    "hotkeys": {"keys": 256, "rate": 3000.0, "slots": 8, "window_ms": 200},
}


def spec_dict(p: Params, topics: tuple[str, str], checkpoint: Path) -> dict[str, Any]:
    return {
        "window": {"kind": "time", "size_ms": p.window_ms},
        "allowed_lateness_ms": p.lateness_ms,
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "key": "k", "topic": topics[0]},
            "S": {"fields": {"k": "int", "a": "int"}, "key": "k", "topic": topics[1]},
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": p.partitions,
        "slots": p.slots,
        "trigger_ms": p.trigger_ms,
        "checkpoint": str(checkpoint),
    }


def generator(spec_path: Path, bootstrap: str, p: Params, log: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "windjoin.pipelines.producer_cli",
        "generate",
        str(spec_path),
        *("--rate", f"{p.rate / 2:.3f}", "--duration", f"{p.seconds:.3f}", "--seed", str(p.seed)),
        *(
            "--keys",
            str(p.keys),
            "--skew",
            str(p.skew),
            "--skew-over",
            "keys" if p.workload == "hotkeys" else "partitions",
        ),
        *("--pace", "--bootstrap", bootstrap, "--topic-partitions", "4", "--no-progress"),
    ]
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


class ControllerThread(threading.Thread):
    """Steps the controller every epoch until stopped (the `windjoin controller` loop, in-process)."""

    def __init__(self, controller: Any, epoch_s: float) -> None:
        super().__init__(daemon=True)
        self.controller, self.epoch_s = controller, epoch_s
        self.halt = threading.Event()
        self.lines: list[str] = []

    def run(self) -> None:
        while not self.halt.wait(self.epoch_s):
            outcome = self.controller.step()
            if outcome is not None:
                self.lines.append(outcome.line())
                print("  controller:", outcome.line(), flush=True)


def run_mode(mode: str, p: Params, spark: Any, bootstrap: str, redis_url: str, workdir: Path) -> dict[str, Any]:
    from windjoin.connectors.control_decisions import DecisionStore
    from windjoin.connectors.kafka_admin import create_topics
    from windjoin.connectors.load_reports import LoadReports
    from windjoin.operators.control.config import parse_control_config
    from windjoin.operators.spec import parse_spec
    from windjoin.pipelines.controller import Controller
    from windjoin.pipelines.join_job import BatchOutcome, ControlSource, start_job
    from windjoin.pipelines.load_publisher import LoadPublisher

    tag = uuid.uuid4().hex[:8]
    topics = (f"bench-reorg-r-{tag}", f"bench-reorg-s-{tag}")
    create_topics(bootstrap, list(topics), 4)
    spec = spec_dict(p, topics, workdir / f"ckpt-{mode}-{tag}")
    spec_path = workdir / f"spec-{mode}.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    batches: list[dict[str, Any]] = []
    delays: list[np.ndarray] = []
    started = time.time()
    control, stepper, publish = None, None, None
    if mode == "controller":
        namespace = f"bench{tag}"
        config = parse_control_config(
            {
                "utilisation": {"capacity": 1e12, "min_workers": p.slots, "max_workers": p.slots},
                "reorganisation": {"occupancy": "share", "th_sup": p.th_sup, "th_con": p.th_con},
                "hot": {"spread": True, "max_width": 4},
            }
        )
        controller = Controller(
            LoadReports(redis_url, namespace), DecisionStore(redis_url, namespace), config, p.partitions, p.slots
        )
        publish = LoadPublisher(LoadReports(redis_url, namespace), p.trigger_ms / 1000)
        control = ControlSource(redis_url, namespace)
        stepper = ControllerThread(controller, p.epoch_s)

    def on_batch(outcome: BatchOutcome) -> None:
        seconds = {int(s["slot_index"]): float(s["seconds"]) for s in outcome.stats}
        active = [seconds.get(s, 0.0) for s in range(max(seconds, default=-1) + 1)]
        row = {
            "t": outcome.finished_at - started,
            "batch": outcome.batch_id,
            "rows": outcome.records,
            "slot_seconds": active,
            "slowest_over_mean": max(active) / np.mean(active) if active and np.mean(active) > 0 else None,
            "routing_version": outcome.routing_version,
            "moved_in": sorted(p for s in outcome.stats for p in s.get("moved_in", [])),
            "delay_p50_ms": float(np.percentile(outcome.delays_ms, 50)) if len(outcome.delays_ms) else None,
            "delay_p99_ms": float(np.percentile(outcome.delays_ms, 99)) if len(outcome.delays_ms) else None,
        }
        batches.append(row)
        if row["t"] >= p.warmup_s:
            delays.append(outcome.delays_ms)
        if publish is not None:
            publish(outcome)

    query = start_job(spark, parse_spec(spec), bootstrap, [], on_batch=on_batch, control=control)
    proc = generator(spec_path, bootstrap, p, workdir / f"generator-{mode}.log")
    if stepper is not None:
        stepper.start()
    try:
        proc.wait(timeout=p.seconds + 120)
        time.sleep(3 * p.trigger_ms / 1000)  # the last records' batch
    finally:
        if proc.poll() is None:
            proc.kill()
        if stepper is not None:
            stepper.halt.set()
        query.stop()
    steady = [b for b in batches if b["t"] >= p.warmup_s and b["rows"] > 0 and b["slowest_over_mean"]]
    everything = np.concatenate(delays) if delays else np.zeros(0)
    return {
        "mode": mode,
        "batches": batches,
        "controller": stepper.lines if stepper else [],
        "summary": {
            "batches": len(steady),
            "slowest_over_mean_mean": float(np.mean([b["slowest_over_mean"] for b in steady])) if steady else None,
            "slowest_over_mean_last10": float(np.mean([b["slowest_over_mean"] for b in steady[-10:]]))
            if steady
            else None,
            "delay_p50_ms": float(np.percentile(everything, 50)) if len(everything) else None,
            "delay_p99_ms": float(np.percentile(everything, 99)) if len(everything) else None,
            "pairs": int(len(everything)),
            "moves_applied": sorted({p for b in batches for p in b["moved_in"]}),
        },
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 11), sharex=True)
    for run, ax in zip(result["runs"], axes[:2], strict=True):
        slots = max(len(b["slot_seconds"]) for b in run["batches"])
        t = [b["t"] for b in run["batches"]]
        for s in range(slots):
            ax.plot(
                t,
                [b["slot_seconds"][s] if s < len(b["slot_seconds"]) else 0 for b in run["batches"]],
                label=f"slot {s}",
            )
        for b in run["batches"]:
            if b["moved_in"]:
                ax.axvline(b["t"], color="grey", alpha=0.3)
        ax.set_ylabel("slot batch time (s)")
        ax.set_title(f"{run['mode']}: slowest/mean {run['summary']['slowest_over_mean_mean']:.2f} (after warm-up)")
        ax.legend(loc="upper right", fontsize=7)
    for run in result["runs"]:
        t = [b["t"] for b in run["batches"] if b["delay_p99_ms"] is not None]
        axes[2].plot(
            t, [b["delay_p99_ms"] / 1000 for b in run["batches"] if b["delay_p99_ms"] is not None], label=run["mode"]
        )
    axes[2].set_ylabel("batch p99 production delay (s)")
    axes[2].set_xlabel("time since start (s)")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="partitions")
    parser.add_argument("--seconds", type=float, default=Params.seconds)
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/reorganisation-WORKLOAD.json")
    args = parser.parse_args()
    p = Params(workload=args.workload, seconds=args.seconds, **WORKLOADS[args.workload])
    args.out = args.out or RESULTS / f"reorganisation-{args.workload}.json"
    from windjoin.connectors import services
    from windjoin.connectors.spark_session import build_local_spark
    from windjoin.pipelines.join_job import STATE_CONF

    workdir = Path(tempfile.mkdtemp(prefix="windjoin-bench-reorg-"))
    state_dir = workdir / "services"
    params = {**asdict(p), "th_sup": p.th_sup, "th_con": p.th_con}
    result: dict[str, Any] = {"benchmark": "reorganisation", "machine": machine_facts(), "params": params}
    result["load_avg_start"] = list(np.round(np.loadtxt("/proc/loadavg", usecols=(0, 1, 2)), 2))
    spark = None
    try:
        started = {s.service.name: s.service.url for s in services.up(services.ServicesConfig(state_dir=state_dir))}
        spark = build_local_spark(
            app_name="windjoin-bench-reorg", conf={**STATE_CONF, "spark.ui.showConsoleProgress": "false"}
        )
        spark.sparkContext.setLogLevel("ERROR")
        result["runs"] = []
        for mode in ("static", "controller"):
            print(f"{mode}: {p.rate:,.0f} events/s for {p.seconds:.0f} s", flush=True)
            run = run_mode(mode, p, spark, started["kafka"], started["redis"], workdir)
            print(f"{mode}: {run['summary']}", flush=True)
            result["runs"].append(run)
    finally:
        tear_down(spark, state_dir, workdir)
    result["load_avg_end"] = list(np.round(np.loadtxt("/proc/loadavg", usecols=(0, 1, 2)), 2))
    static, controlled = (r["summary"] for r in result["runs"])
    result["ratios"] = {
        "slowest_over_mean_static_vs_controller": static["slowest_over_mean_mean"]
        / controlled["slowest_over_mean_mean"],
        "delay_p99_static_over_controller": static["delay_p99_ms"] / controlled["delay_p99_ms"]
        if static["delay_p99_ms"] and controlled["delay_p99_ms"]
        else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=float))
    plot(result, args.out.with_suffix(".png"))
    print(f"written: {args.out}, {args.out.with_suffix('.png')}; ratios {result['ratios']}")


if __name__ == "__main__":
    main()
