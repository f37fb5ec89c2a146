"""Reorganisation benchmark: slot batch times and production delay on a skewed workload, with and without the
controller moving partitions (paper 000's supplier/consumer reorganisation), in the same run.

Workload: R(ts, k, x) and S(ts, k, a) produced live by `windjoin generate --pace` (Poisson arrivals, RATE
events/s over both streams), R.k = S.k within a time window, skewed by the b-model (b = 0.7) in one of three ways
(`--workload`): over the hash partitions with its first splits lined up with the round-robin slots (`slots`,
the default: the busiest slot gets 0.7^3 of the tuples on 8 slots, 2.74x the mean), over the hash partitions
as they come (`partitions`: round robin mixes hot and cold halves, 1.3-2.1x), or over a few key values
(`hotkeys`: 256 keys, so the hottest partition alone outweighs a slot and only a SplitJoin spread relieves it).
Over 10^7 key values the b-model hashes evenly onto partitions, so skew over keys alone loads slots alike.
The job: local[2], PARTITIONS hash partitions on SLOTS slots (round robin at first), a batch per TRIGGER.
With the controller: every batch's load is published to Redis, `control_loop.Controller` steps every
EPOCH seconds (occupancy = each slot's share of the batch's CPU seconds; suppliers above 1.2 fair shares,
consumers below 0.8; the yielded partition is the one that best evens the pair, `--pick balance`, or the
paper's random one, `--pick random`; a hot slot holding one partition spreads it), and the job follows its
decisions (partitions move, or spread, with their window state).

Per batch it records each slot's batch time as the CPU seconds of its stateful handler (`cpu_seconds`: not
inflated by waiting for a core when other processes load the machine; wall seconds are recorded too), and the
production delay (emission minus the later tuple's event time) of the batch's pairs. Summaries: the slowest
slot's summed CPU over the mean slot's, over the steady batches (after WARMUP) and over the last third of the
run (settled) and the last two thirds; p50/p99 delay. Results: benchmarks/results/reorganisation-WORKLOAD.json
and .png, with the machine's load average at the start and end (timing on a shared machine is rough).

The controller weighs partitions by their measured CPU (output pairs included), spreads a partition too heavy
for any slot, and damps its moves (`hold_epochs`); the runs (`--modes`) are static, the controller, and the
controller undamped (hold_epochs 0), each recording moves per epoch. `--workload throughput` drains a backlog
(`--backlog-s` seconds of events produced before the job starts, batches of `--batch-rows`) on 2 slots (as many
as cores: with more, a static placement's batch already takes the whole machine's CPU over the cores, so
balancing cannot shorten it): records per second, static against the controller, and against the floor run:
the same drain with a 1 ms window (`--modes ...,floor`), next to no join work, which no placement can beat.
Run: `python -m benchmarks.reorganisation [--workload slots|partitions|hotkeys|throughput] [--pick balance|random]`.
"""

from __future__ import annotations

import argparse
import json
import os
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
from benchmarks.params_cli import add_param_flags
from benchmarks.rs_spec import rs_eq_join
from benchmarks.teardown import exit_on_sigterm, tear_down, track

RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Params:
    workload: str = "slots"  # b-model over hash partitions lined up with slots, as they come, or over few keys
    rate: float = 12000.0  # events/s over both streams
    seconds: float = 150.0
    warmup_s: float = 40.0  # batches finishing earlier are left out of the summaries
    keys: int = 600  # few keys per partition: a partition's outputs grow with the square of its tuples
    skew: float = 0.7
    seed: int = 9
    partitions: int = 64
    slots: int = 8
    window_ms: int = 1000
    lateness_ms: int = 2000
    trigger_ms: int = 3000  # large batches: each slot's fixed CPU per batch (~20 ms) weighs less
    # at most 1.5 triggers' worth of records per batch: a run that falls behind gets batches of about the size of
    # one that keeps up, not ever larger ones (which would weigh each slot's fixed CPU per batch less)
    max_batch_factor: float = 1.5
    epoch_s: float = 8.0
    pick: str = "balance"  # the controller's choice of the yielded partition: "balance" or the paper's "random"
    hold_epochs: int = 2  # the controller's damping; the "undamped" run uses 0
    # > 0: a backlog of this many seconds of events (at `rate`) is produced before the job starts, which drains it
    # in batches of `batch_rows` as fast as it can: throughput, not delay (`seconds` is then unused)
    backlog_s: float = 0.0
    batch_rows: int = 140_000
    # how far (event time) a partition may end a batch ahead of the slowest (the spec's alignment_ms)
    alignment_ms: int = 10_000
    modes: str = "static,controller,undamped"  # the runs, in order, in one benchmark run

    @property
    def th_sup(self) -> float:  # 1.2 fair shares
        return 1.2 / self.slots

    @property
    def th_con(self) -> float:  # 0.8 fair shares
        return 0.8 / self.slots


WORKLOADS = {
    # skew between partitions lined up with the round-robin slots (the static placement's worst case)
    "slots": {},
    # skew between partitions as they come (round robin mixes it over the slots)
    "partitions": {},
    # a few hot keys (b-model over 256 values): the hottest partitions outweigh a slot, only a spread relieves them
    "hotkeys": {"keys": 256, "rate": 3000.0, "partitions": 32, "window_ms": 200, "trigger_ms": 1000},
    # throughput: the `slots` skew on as many slots as cores (with more, a static placement's batch already takes
    # about the machine's whole CPU / cores: nothing to gain), draining a backlog
    # (the floor run is the same drain with a 1 ms window)
    "throughput": {"slots": 2, "backlog_s": 240.0, "epoch_s": 6.0, "modes": "static,controller,floor"},
}
# static: round robin, no controller; controller: damped; undamped: hold_epochs 0; floor: static with a 1 ms window
# (the same read, adapt, shuffle and state path with next to no join work: the most any placement could reach)
MODES = ("static", "controller", "undamped", "floor")
SKEW_OVER = {"hotkeys": "keys", "throughput": "slots"}


FLOOR_WINDOW_MS = 1  # the floor run's window: next to no pairs, so next to no join work


def spec_dict(p: Params, topics: tuple[str, str], checkpoint: Path, window_ms: int | None = None) -> dict[str, Any]:
    return {
        "window": {"kind": "time", "size_ms": window_ms or p.window_ms},
        "alignment_ms": p.alignment_ms,
        "allowed_lateness_ms": p.lateness_ms,
        **rs_eq_join(topics),
        "partitions": p.partitions,
        "slots": p.slots,
        "trigger_ms": 0 if p.backlog_s else p.trigger_ms,
        "max_offsets_per_trigger": p.batch_rows
        if p.backlog_s
        else int(p.rate * p.trigger_ms / 1000 * p.max_batch_factor),
        "checkpoint": str(checkpoint),
    }


def generator(spec_path: Path, bootstrap: str, p: Params, log: Path) -> subprocess.Popen:
    """`windjoin generate`: paced over `seconds`, or a backlog of `backlog_s` seconds at once."""
    duration = p.backlog_s or p.seconds
    cmd = [
        sys.executable,
        "-m",
        "windjoin.pipelines.cli.produce",
        "generate",
        str(spec_path),
        *("--rate", f"{p.rate / 2:.3f}", "--duration", f"{duration:.3f}", "--seed", str(p.seed)),
        *("--keys", str(p.keys), "--skew", str(p.skew), "--skew-over", SKEW_OVER.get(p.workload, p.workload)),
        *("--no-pace" if p.backlog_s else "--pace", "--bootstrap", bootstrap, "--topic-partitions", "4"),
        "--no-progress",
    ]
    with open(log, "ab") as out:
        return track(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT))  # stopped by tear_down if left


class ControllerThread(threading.Thread):
    """Steps the controller every epoch until stopped (the `windjoin controller` loop, in-process)."""

    def __init__(self, controller: Any, epoch_s: float) -> None:
        super().__init__(daemon=True)
        self.controller, self.epoch_s = controller, epoch_s
        self.halt = threading.Event()
        self.lines: list[str] = []

        self.moves: list[int] = []  # units moved (or spread, or gathered) per decided epoch
        self.held: list[int] = []  # units the damping kept put per decided epoch

    def run(self) -> None:
        while not self.halt.wait(self.epoch_s):
            before = self.controller.state.routing
            outcome = self.controller.step()
            if outcome is not None:
                after = outcome.decision.state.routing
                changed = set(before.spread) ^ set(after.spread)
                self.moves.append(len(outcome.decision.moves) + len({p for p, _ in changed}))
                self.held.append(len(outcome.decision.held))
                self.lines.append(outcome.line())
                print("  controller:", outcome.line(), flush=True)


def run_mode(mode: str, p: Params, spark: Any, bootstrap: str, redis_url: str, workdir: Path) -> dict[str, Any]:
    from windjoin.connectors.kafka.admin import create_topics
    from windjoin.connectors.redis.control_decisions import DecisionStore
    from windjoin.connectors.redis.load_reports import LoadReports
    from windjoin.operators.control.config import parse_control_config
    from windjoin.operators.spec import parse_spec
    from windjoin.pipelines.controller.control_loop import Controller
    from windjoin.pipelines.job.join_job import BatchOutcome, ControlSource, start_job
    from windjoin.pipelines.job.load_publisher import LoadPublisher

    tag = uuid.uuid4().hex[:8]
    topics = (f"bench-reorg-r-{tag}", f"bench-reorg-s-{tag}")
    create_topics(bootstrap, list(topics), 4)
    spec = spec_dict(p, topics, workdir / f"ckpt-{mode}-{tag}", FLOOR_WINDOW_MS if mode == "floor" else None)
    spec_path = workdir / f"spec-{mode}.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    batches: list[dict[str, Any]] = []
    delays: list[np.ndarray] = []
    started = time.time()
    control, stepper, publish = None, None, None
    if mode in ("controller", "undamped"):
        namespace = f"bench{tag}"
        reorganisation = {"occupancy": "cpu", "pick": p.pick, "th_sup": p.th_sup, "th_con": p.th_con}
        config = parse_control_config(
            {
                "utilisation": {"capacity": 1e12, "min_workers": p.slots, "max_workers": p.slots},
                "reorganisation": {**reorganisation, "hold_epochs": 0 if mode == "undamped" else p.hold_epochs},
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
        cpu = {int(s["slot_index"]): float(s["cpu_seconds"]) for s in outcome.stats}
        wall = {int(s["slot_index"]): float(s["seconds"]) for s in outcome.stats}
        row = {
            "t": outcome.finished_at - started,
            "batch": outcome.batch_id,
            "rows": outcome.records,
            "slot_cpu_s": [cpu.get(s, 0.0) for s in range(p.slots)],
            "slot_wall_s": [wall.get(s, 0.0) for s in range(p.slots)],
            "slot_tuples": [
                next((x["joined"] for x in outcome.stats if x["slot_index"] == s), 0) for s in range(p.slots)
            ],
            "routing_version": outcome.routing_version,
            "budget_ms": outcome.budget,  # where the batch's time went (operators.batch_budget)
            "moved_in": sorted(p for s in outcome.stats for p in s.get("moved_in", [])),
            "delay_p50_ms": float(outcome.delays_ms.percentile(50)) if len(outcome.delays_ms) else None,
            "delay_p99_ms": float(outcome.delays_ms.percentile(99)) if len(outcome.delays_ms) else None,
        }
        batches.append(row)
        if row["t"] >= p.warmup_s:
            delays.append(outcome.delays_ms.expanded())
        if publish is not None:
            publish(outcome)

    backlog = produce_backlog(spec_path, bootstrap, p, workdir / f"generator-{mode}.log", topics)
    if backlog:
        print(f"  {backlog:,} events produced; draining", flush=True)
        started = time.time()
    query = start_job(spark, parse_spec(spec), bootstrap, [], on_batch=on_batch, control=control)
    proc = None if backlog else generator(spec_path, bootstrap, p, workdir / f"generator-{mode}.log")
    if stepper is not None:
        stepper.start()
    try:
        if proc is not None:
            proc.wait(timeout=p.seconds + 120)
            time.sleep(3 * p.trigger_ms / 1000)  # the last records' batch
        else:
            deadline = time.time() + 20 * p.backlog_s
            while sum(b["rows"] for b in batches) < backlog and time.time() < deadline:
                time.sleep(0.5)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        if stepper is not None:
            stepper.halt.set()
        query.stop()
    steady = [b for b in batches if b["t"] >= p.warmup_s and b["rows"] > 0]
    last_two_thirds = steady[len(steady) // 3 :]
    everything = np.concatenate(delays) if delays else np.zeros(0)
    return {
        "mode": mode,
        "batches": batches,
        "controller": stepper.lines if stepper else [],
        "load_avg": loadavg(),
        "summary": {
            "batches": len(steady),
            "cpu_slowest_over_mean": slowest_over_mean(steady, "slot_cpu_s"),
            "cpu_slowest_over_mean_settled": slowest_over_mean(steady[-max(1, len(steady) // 3) :], "slot_cpu_s"),
            "cpu_slowest_over_mean_last_two_thirds": slowest_over_mean(last_two_thirds, "slot_cpu_s"),
            "records_per_s": drain_rate(batches) if backlog else None,
            "moves_per_epoch": stepper.moves if stepper else [],
            "held_per_epoch": stepper.held if stepper else [],
            "moves_last_two_thirds_per_epoch": float(np.mean(stepper.moves[len(stepper.moves) // 3 :]))
            if stepper and stepper.moves
            else None,
            "wall_slowest_over_mean": slowest_over_mean(steady, "slot_wall_s"),
            "tuples_slowest_over_mean": slowest_over_mean(steady, "slot_tuples"),
            "batch_rows_mean": float(np.mean([b["rows"] for b in steady])) if steady else None,
            "delay_p50_ms": float(np.percentile(everything, 50)) if len(everything) else None,
            "delay_p99_ms": float(np.percentile(everything, 99)) if len(everything) else None,
            "pairs": int(len(everything)),
            "moves_applied": sorted({p for b in batches for p in b["moved_in"]}),
        },
    }


def produce_backlog(spec_path: Path, bootstrap: str, p: Params, log: Path, topics: tuple[str, str]) -> int:
    """With `backlog_s`: produce the backlog before the job starts and return how many records the topics hold
    (0 without: the events are produced live, paced)."""
    if not p.backlog_s:
        return 0
    from windjoin.connectors.kafka.arrivals import KafkaArrivals

    generator(spec_path, bootstrap, p, log).wait(timeout=20 * p.backlog_s)
    arrivals = KafkaArrivals(bootstrap, topics)
    try:
        return arrivals()
    finally:
        arrivals.close()


def drain_rate(batches: list[dict[str, Any]]) -> float | None:
    """Records per second from the end of the first batch with records to the end of the last: the drain's
    throughput without the job's start (the same for every run)."""
    full = [b for b in batches if b["rows"] > 0]
    if len(full) < 2:
        return None
    return sum(b["rows"] for b in full[1:]) / (full[-1]["t"] - full[0]["t"])


def slowest_over_mean(batches: list[dict[str, Any]], field: str) -> float | None:
    """The slowest slot's total of `field` over these batches, over the mean slot's total."""
    if not batches:
        return None
    totals = np.sum([b[field] for b in batches], axis=0)
    return float(totals.max() / totals.mean()) if totals.mean() > 0 else None


def loadavg() -> list[float]:
    return [float(x) for x in np.round(np.loadtxt("/proc/loadavg", usecols=(0, 1, 2)), 2)]


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = len(result["runs"])
    fig, axes = plt.subplots(runs + 1, 1, figsize=(10, 4 + 3.5 * runs), sharex=True)
    for run, ax in zip(result["runs"], axes[:runs], strict=True):
        if not run["batches"]:
            ax.set_title(f"{run['mode']}: no batch finished")
            continue
        t = [b["t"] for b in run["batches"]]
        for s in range(len(run["batches"][0]["slot_cpu_s"])):
            ax.plot(t, [b["slot_cpu_s"][s] for b in run["batches"]], label=f"slot {s}")
        for b in run["batches"]:
            if b["moved_in"]:
                ax.axvline(b["t"], color="grey", alpha=0.3)
        ax.set_ylabel("slot batch time (CPU s)")
        summary = run["summary"]
        ax.set_title(
            f"{run['mode']}: slowest/mean slot CPU {summary['cpu_slowest_over_mean'] or 0:.2f} after warm-up, "
            f"{summary['cpu_slowest_over_mean_last_two_thirds'] or 0:.2f} in the last two thirds"
            + (f", {summary['records_per_s']:,.0f} records/s" if summary["records_per_s"] else "")
        )
        ax.legend(loc="upper right", fontsize=7)
    for run in result["runs"]:
        t = [b["t"] for b in run["batches"] if b["delay_p99_ms"] is not None]
        axes[runs].plot(
            t, [b["delay_p99_ms"] / 1000 for b in run["batches"] if b["delay_p99_ms"] is not None], label=run["mode"]
        )
    axes[runs].set_ylabel("batch p99 production delay (s)")
    axes[runs].set_xlabel("time since start (s)")
    axes[runs].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def bounds(seeds: int = 30) -> dict[str, Any]:
    """What whole-partition moves can reach on a b-model (b = 0.7) over P partitions and n slots, without Spark.

    A partition's work is taken as (its tuple share)^alpha: alpha = 1 when work follows tuples, 2 when it
    follows outputs with few keys per partition (outputs grow with the square of the tuples). Per (P, n,
    alpha): the static slowest/mean under round robin (the largest over `seeds` b-model seeds) and with the
    skew lined up with the slots (`skew_over="slots"`), the hottest partition's work over a mean slot's (no
    placement of whole partitions gets below it) and the greedy (LPT) placement's slowest/mean."""
    from windjoin.operators.workloads.b_model import BModel

    def ratio(work: np.ndarray, slot: np.ndarray, n: int) -> float:
        loads = np.bincount(slot, weights=work, minlength=n)
        return float(loads.max() / loads.mean())

    rows = []
    for parts in (16, 32, 64, 128, 256, 512):
        for n in (4, 8, 16):
            position = np.arange(parts)
            aligned_at = (position % (parts // n)) * n + position // (parts // n)
            for alpha in (1.0, 1.25, 1.5, 2.0):
                round_robin, aligned = [], []
                for seed in range(seeds):
                    mass = BModel(parts, 0.7, seed).probabilities()
                    work = mass**alpha
                    round_robin.append(ratio(work, position % n, n))
                    lined_up = np.zeros(parts)
                    lined_up[aligned_at] = mass
                    aligned.append(ratio(lined_up**alpha, position % n, n))
                work = np.sort(mass**alpha)[::-1]
                loads = np.zeros(n)
                for w in work:  # greedy: heaviest partition first, onto the least loaded slot
                    loads[np.argmin(loads)] += w
                rows.append(
                    {
                        "partitions": parts,
                        "slots": n,
                        "alpha": alpha,
                        "round_robin_max": round(max(round_robin), 2),
                        "aligned": round(max(aligned), 2),
                        "hottest_partition_over_mean_slot": round(float(work[0] / work.sum() * n), 2),
                        "greedy_placement": round(float(loads.max() / loads.mean()), 2),
                    }
                )
    return {"benchmark": "reorganisation-bounds", "b": 0.7, "seeds": seeds, "rows": rows}


def ratios(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The headline figures, each against the static run of the same benchmark run."""
    static = summaries["static"]
    out: dict[str, Any] = {
        "cpu_slowest_over_mean_static": static["cpu_slowest_over_mean"],
        "cpu_slowest_over_mean_static_last_two_thirds": static["cpu_slowest_over_mean_last_two_thirds"],
    }
    floor = summaries.get("floor")
    if floor and static["records_per_s"] and floor["records_per_s"]:  # no placement of the join can beat it
        out["throughput_floor_over_static"] = floor["records_per_s"] / static["records_per_s"]
    for mode in [m for m in summaries if m not in ("static", "floor")]:
        run = summaries[mode]
        out[f"cpu_slowest_over_mean_{mode}_last_two_thirds"] = run["cpu_slowest_over_mean_last_two_thirds"]
        out[f"cpu_slowest_over_mean_{mode}_settled"] = run["cpu_slowest_over_mean_settled"]
        out[f"moves_per_epoch_{mode}_last_two_thirds"] = run["moves_last_two_thirds_per_epoch"]
        if static["delay_p99_ms"] and run["delay_p99_ms"] and not static["records_per_s"]:  # a backlog: no delay
            out[f"delay_p99_static_over_{mode}"] = static["delay_p99_ms"] / run["delay_p99_ms"]
        if static["records_per_s"] and run["records_per_s"]:
            out[f"throughput_{mode}_over_static"] = run["records_per_s"] / static["records_per_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_param_flags(parser, Params())  # --workload, --pick, --rate, --trigger-ms, ... (unset: the workload's)
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/reorganisation-WORKLOAD.json")
    parser.add_argument("--bounds", action="store_true", help="only the partition-placement bounds (no Spark)")
    args = parser.parse_args()
    if args.bounds:
        result = bounds()
        out = args.out or RESULTS / "reorganisation-bounds.json"
        out.write_text(json.dumps(result, indent=1))
        print(f"{'P':>4} {'n':>3} {'alpha':>5} {'rr max':>7} {'aligned':>7} {'hottest':>7} {'greedy':>7}")
        for r in result["rows"]:
            print(
                f"{r['partitions']:>4} {r['slots']:>3} {r['alpha']:>5} {r['round_robin_max']:>7} {r['aligned']:>7} "
                f"{r['hottest_partition_over_mean_slot']:>7} {r['greedy_placement']:>7}"
            )
        print(f"written: {out}")
        return
    workload = args.workload or Params.workload
    if workload not in WORKLOADS or (args.pick or "balance") not in ("balance", "random"):
        parser.error(f"--workload: one of {sorted(WORKLOADS)}; --pick: balance or random")
    given = {
        name: value for name, value in vars(args).items() if name in Params.__dataclass_fields__ and value is not None
    }
    p = Params(**{**WORKLOADS[workload], **given, "workload": workload})
    modes = p.modes.split(",")
    if modes[0] != "static" or not set(modes) <= set(MODES) or len(set(modes)) < len(modes):
        parser.error(f"--modes: static first, then any of controller, undamped, floor, once each (got {p.modes!r})")
    args.out = args.out or RESULTS / f"reorganisation-{workload}.json"
    from windjoin.connectors.local import services
    from windjoin.connectors.spark.session import build_local_spark
    from windjoin.pipelines.job.join_job import STATE_CONF

    workdir = Path(tempfile.mkdtemp(prefix="windjoin-bench-reorg-"))
    state_dir = workdir / "services"
    params = {**asdict(p), "th_sup": p.th_sup, "th_con": p.th_con}
    result: dict[str, Any] = {"benchmark": "reorganisation", "machine": machine_facts(), "params": params}
    result["load_avg_start"] = loadavg()
    spark = None
    exit_on_sigterm()  # a killed run tears down too
    try:
        started = {s.service.name: s.service.url for s in services.up(services.ServicesConfig(state_dir=state_dir))}
        # clients, and the processes started, log in with the embedded Redis' password file
        os.environ["WINDJOIN_REDIS_PASSWORD_FILE"] = str(services.redis_password_file(state_dir))
        spark = build_local_spark(
            app_name="windjoin-bench-reorg",
            conf={**STATE_CONF, "spark.ui.showConsoleProgress": "false", "spark.driver.memory": "3g"},
        )
        spark.sparkContext.setLogLevel("ERROR")
        result["runs"] = []
        for mode in p.modes.split(","):
            print(f"{mode}: {p.rate:,.0f} events/s for {p.backlog_s or p.seconds:.0f} s", flush=True)
            run = run_mode(mode, p, spark, started["kafka"], started["redis"], workdir)
            print(f"{mode}: {run['summary']}", flush=True)
            result["runs"].append(run)
    finally:
        tear_down(spark, state_dir, workdir)
    result["load_avg_end"] = loadavg()
    result["ratios"] = ratios({r["mode"]: r["summary"] for r in result["runs"]})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=float))
    plot(result, args.out.with_suffix(".png"))
    print(f"written: {args.out}, {args.out.with_suffix('.png')}; ratios {result['ratios']}")


if __name__ == "__main__":
    main()
