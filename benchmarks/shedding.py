"""Shedding benchmark: a 3x burst against the controller's S2J load shedding, and the same run without shedding.

Workload: benchmarks.pipeline's (two JSON streams R(ts, k, x), S(ts, k, a), Poisson arrivals, keys from paper
000's b-model, b = 0.7 over [0, 10^7], `R.k = S.k AND |R.ts - S.ts| <= W`), on the embedded broker (4 partitions
per topic) and Redis, the join job in a local[2] Spark session (2 slots, trigger T, maxOffsetsPerTrigger M).

1. Calibration (unloaded run, i.e. no paced load and no controller): the job reads a prefilled backlog
   (event-time density `--calibration-density`) at M rows per batch, back to back; X = input rows/s over its
   steady batches after a window's worth of warm-up (benchmarks.pipeline.sustained). The controller measures
   utilisation by arrivals (`utilisation.measure: arrivals`: records appended to the input topics per second
   between its epochs, read from Kafka, per worker; `--measure rate` / `batch` for the other measures) against
   W = X / slots tuples/s per worker: tau = 1 means records arrive as fast as the job can take them at most.
2. Sustained rate R = tau_sustained * X, with tau_sustained = tau* = tau1 / 2 (S2J's recommended initial
   utilisation; tau1 = 0.6), so the burst 3R lands at tau = 0.9, inside the linear range of
   SR = (tau - tau1) / (1 - tau1) (0.75 there). A burst at or above tau = 1 sheds everything under S2J's formula
   (SR = 1 at tau = 1): `--tau-sustained 0.5` shows that case.
3. Paced load from a producer process (a non-homogeneous Poisson process: the workload at 3R thinned to R outside
   the burst; event time = scheduled time): R for `--pre` s, 3R for `--burst` s, R for `--post` s.
4. Two runs on fresh topics: with shedding (the job follows the controller's decisions, `ControlSource`; the
   controller, `control_loop.Controller`, is stepped in this process every `--epoch` seconds over the
   job's load reports), and the baseline without (the controller steps and records its tau on the same reports,
   but the job follows nothing: ratio 0).

Per batch: wall time, input rows (per stream from the batch's Kafka offsets in Spark's offset log), rate, tau of
the batch (offered tuples / slots / W) and the controller's decided tau, the shed ratio applied and the shed
fraction measured per stream, p50/p99 production delay (emission minus the later tuple's event time). Per run and
phase: p50/p99 over the pairs whose result time falls in the phase. The ratio of p99 delays (baseline / shedding)
over the burst is the headline.

    python -m benchmarks.shedding [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
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
from benchmarks.params_cli import add_param_flags, params_from
from benchmarks.pipeline import (
    DelayHistogram,
    generate_cmd,
    load_avg,
    progress_rows,
    run_generator,
    stop_process,
    sustained,
)
from benchmarks.pipeline import Params as PipelineParams
from benchmarks.teardown import exit_on_sigterm, tear_down

RESULTS = Path(__file__).parent / "results" / "shedding.json"


@dataclass
class Params:
    window_s: float = 5.0
    lateness_ms: int = 1000
    keys: int = 10_000_001
    skew: float = 0.7
    topic_partitions: int = 4
    join_partitions: int = 64
    slots: int = 2
    trigger_s: float = 2.0
    max_offsets: int = 100_000  # maxOffsetsPerTrigger (both topics), also the calibration's batch size
    calibration_density: float = 30_000.0  # event-time density of the calibration prefill, events/s
    tau1: float = 0.6
    tau_sustained: float = 0.3  # R = tau_sustained * X
    factor: float = 3.0  # burst rate = factor * R
    pre: float = 45.0  # seconds at R before the burst
    burst: float = 60.0
    post: float = 75.0
    epoch: float = 4.0  # controller epoch, seconds
    # the controller's utilisation.measure: "arrivals" or "rate" (W = X / slots tuples/s) or "batch" (X * T / slots)
    measure: str = "arrivals"
    warmup_s: float = 15.0  # pairs with result times in the first seconds are left out of the phase figures
    drain_s: float = 180.0  # after the producer ends, wait this long at most for the job to take everything
    seed: int = 0


QUICK = {
    "max_offsets": 30_000,
    "calibration_density": 10_000.0,
    "window_s": 2.0,
    "pre": 20.0,
    "burst": 25.0,
    "post": 30.0,
    "warmup_s": 8.0,
    "drain_s": 90.0,
}


# ---------------------------------------------------------------------------------------------------------
# The paced producer (its own process): R, then factor x R for the burst, then R
# ---------------------------------------------------------------------------------------------------------


def produce_profile(args: argparse.Namespace) -> None:
    """`python -m benchmarks.shedding produce ...`: the burst profile onto the spec's topics; a JSON summary."""
    from windjoin.connectors.formats.stream_encoder import stream_encoder
    from windjoin.connectors.kafka.producer import BatchProducer
    from windjoin.operators.spec import load_spec
    from windjoin.operators.workloads.b_model import Workload, WorkloadConfig
    from windjoin.pipelines.cli.produce import PRODUCER_CONFIG

    spec = load_spec(args.spec)
    encoders = {name: stream_encoder(spec, name, validate_records=False) for name in spec.streams}
    total = args.pre + args.burst + args.post
    peak = args.rate * args.factor
    thin = np.random.default_rng(args.seed + 1)
    lags: list[float] = []
    counts = {"pre": 0, "burst": 0, "post": 0}
    with BatchProducer(args.bootstrap, PRODUCER_CONFIG) as producer:
        time.sleep(2.0)  # the idempotent producer's id arrives in the background: not inside the schedule
        start_ms = int(time.time() * 1000)
        started = time.perf_counter()
        workload = Workload(
            spec,
            WorkloadConfig(
                rate=peak / 2, duration_s=total, seed=args.seed, bias=args.skew, n_keys=args.keys, start_ms=start_ms
            ),
        )
        for piece in workload.slices():
            offsets = piece.offsets_s
            in_burst = (offsets >= args.pre) & (offsets < args.pre + args.burst)
            keep = in_burst | (thin.random(len(offsets)) < 1 / args.factor)
            per_stream: dict[str, list] = {name: [] for name in encoders}
            for name, event, k in zip(piece.streams, piece.events, keep.tolist(), strict=True):
                if k:
                    per_stream[name].append(encoders[name].encode(event))
            wait = piece.end_s - (time.perf_counter() - started)
            if wait > 0:
                time.sleep(wait)
            for name, records in per_stream.items():
                if records:
                    producer.produce_batch(encoders[name].topic, records)
            phase = "pre" if piece.end_s <= args.pre else "burst" if piece.end_s <= args.pre + args.burst else "post"
            counts[phase] += int(keep.sum())
            lags.append(time.perf_counter() - started - piece.end_s)
    lag = np.asarray(lags)
    print(
        json.dumps(
            {
                "start_ms": start_ms,
                "counts": counts,
                "lag_mean_s": float(lag.mean()),
                "lag_p99_s": float(np.quantile(lag, 0.99)),
                "lag_max_s": float(lag.max()),
            }
        )
    )


def producer_cmd(spec_path: Path, bootstrap: str, p: Params, rate: float) -> list[str]:
    return [
        sys.executable,
        "-m",
        "benchmarks.shedding",
        "produce",
        str(spec_path),
        "--bootstrap",
        bootstrap,
        "--rate",
        f"{rate:.3f}",
        "--factor",
        str(p.factor),
        "--pre",
        str(p.pre),
        "--burst",
        str(p.burst),
        "--post",
        str(p.post),
        "--seed",
        str(p.seed),
        "--skew",
        str(p.skew),
        "--keys",
        str(p.keys),
    ]


# ---------------------------------------------------------------------------------------------------------
# The job and the controller
# ---------------------------------------------------------------------------------------------------------


def spec_dict(p: Params, topics: tuple[str, str], checkpoint: Path, trigger_ms: int) -> dict[str, Any]:
    return {
        "window": {"kind": "time", "size_ms": int(p.window_s * 1000)},
        "allowed_lateness_ms": p.lateness_ms,
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "topic": topics[0], "key": "k"},
            "S": {"fields": {"k": "int", "a": "int"}, "topic": topics[1], "key": "k"},
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": p.join_partitions,
        "slots": p.slots,
        "trigger_ms": trigger_ms,
        "max_offsets_per_trigger": p.max_offsets,
        "checkpoint": str(checkpoint),
    }


def control_config(p: Params, capacity: float) -> dict[str, Any]:
    """S2J's thresholds with tau* = tau1 / 2 over a rate; the slot count pinned and no moves: only shedding acts."""
    return {
        "scaling": "utilisation",
        "utilisation": {
            "measure": p.measure,
            "tau0": p.tau1 / 10,
            "tau_star": p.tau1 / 2,
            "tau1": p.tau1,
            "tau2": 1.0,
            "capacity": capacity,
            "min_workers": p.slots,
            "max_workers": p.slots,
        },
        "reorganisation": {"th_sup": 0.99, "th_con": 0.0},
        "shedding": {"base": 0.0, "model": "linear"},
    }


def offset_log(checkpoint: Path) -> dict[int, dict[str, int]]:
    """Per batch id: its end positions ("topic:partition" -> next offset), from Spark's offset log."""
    out = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            out[int(path.name)] = json.loads(path.read_text().splitlines()[2])["partitions"]
    return out


def per_topic_rows(log: dict[int, dict[str, int]]) -> dict[int, dict[str, int]]:
    """Per batch id: the records it read per topic."""
    out: dict[int, dict[str, int]] = {}
    previous: dict[str, int] = {}
    for batch_id in sorted(log):
        rows: dict[str, int] = {}
        for key, end in log[batch_id].items():
            topic = key.rpartition(":")[0]
            rows[topic] = rows.get(topic, 0) + end - previous.get(key, 0)
        out[batch_id] = rows
        previous = log[batch_id]
    return out


class Bench:
    def __init__(self, p: Params, workdir: Path, bootstrap: str, redis_url: str, spark: Any) -> None:
        self.p, self.workdir, self.bootstrap, self.redis_url, self.spark = p, workdir, bootstrap, redis_url, spark

    def _spec(self, label: str, trigger_ms: int) -> tuple[dict[str, Any], Path]:
        tag = uuid.uuid4().hex[:8]
        topics = (f"bench-shed-{label}-r-{tag}", f"bench-shed-{label}-s-{tag}")
        spec = spec_dict(self.p, topics, self.workdir / f"ckpt-{label}-{tag}", trigger_ms)
        path = self.workdir / f"spec-{label}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return spec, path

    def calibrate(self) -> dict[str, Any]:
        """X: the job's input rows/s on a prefilled backlog at M rows per batch, batches back to back."""
        from windjoin.operators.spec import parse_spec
        from windjoin.pipelines.job.join_job import start_job

        p = self.p
        spec, path = self._spec("calibration", trigger_ms=0)
        warmup = int(p.calibration_density * (p.window_s + p.lateness_ms / 1000))
        events = warmup + 4 * p.max_offsets
        gen = PipelineParams(keys=p.keys, skew=p.skew, topic_partitions=p.topic_partitions)
        cmd = generate_cmd(path, self.bootstrap, gen, p.calibration_density, events / p.calibration_density, False)
        proc = run_generator(cmd, self.workdir / "calibration-generator.log")
        if proc.wait() != 0:
            raise RuntimeError(f"prefill failed, see {self.workdir / 'calibration-generator.log'}")
        started = time.perf_counter()
        query = start_job(self.spark, parse_spec(spec), self.bootstrap, [])
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if query.exception() is not None:
                    raise RuntimeError(f"calibration query failed: {query.exception()}")
                done = sum(int(x["numInputRows"]) for x in progress_rows(query))
                if done >= warmup + 3 * p.max_offsets:
                    break
                time.sleep(1.0)
        finally:
            query.stop()
        result = sustained(progress_rows(query), warmup)
        result.update(prefill_events=events, density=p.calibration_density, wall_s=time.perf_counter() - started)
        return result

    def run(self, label: str, shedding: bool, rate: float, capacity: float) -> dict[str, Any]:
        from windjoin.connectors.kafka.admin import create_topics
        from windjoin.connectors.kafka.arrivals import KafkaArrivals
        from windjoin.connectors.redis.control_decisions import DecisionStore
        from windjoin.connectors.redis.load_reports import LoadReports
        from windjoin.operators.control.config import parse_control_config
        from windjoin.operators.spec import parse_spec
        from windjoin.pipelines.controller.control_loop import Controller
        from windjoin.pipelines.job.join_job import BatchOutcome, ControlSource, start_job
        from windjoin.pipelines.job.load_publisher import LoadPublisher

        p = self.p
        spec_d, path = self._spec(label, int(p.trigger_s * 1000))
        topics = [s["topic"] for s in spec_d["streams"].values()]
        create_topics(self.bootstrap, topics, p.topic_partitions)
        spec = parse_spec(spec_d)
        namespace = f"bench{uuid.uuid4().hex[:8]}"
        reports, decisions = LoadReports(self.redis_url, namespace), DecisionStore(self.redis_url, namespace)
        publisher = LoadPublisher(reports, p.trigger_s)
        config = parse_control_config(control_config(p, capacity))
        arrivals = KafkaArrivals(self.bootstrap, topics) if p.measure == "arrivals" else None
        controller = Controller(reports, decisions, config, spec.partitions, p.slots, arrivals=arrivals)
        outcomes: list[tuple[BatchOutcome, list[float]]] = []
        epochs: list[dict[str, Any]] = []
        stop = threading.Event()

        def on_batch(outcome: BatchOutcome) -> None:
            publisher(outcome)
            outcomes.append((outcome, load_avg()))

        def control_loop() -> None:
            while not stop.wait(p.epoch):
                try:
                    out = controller.step()
                except Exception as exc:  # noqa: BLE001 - report and go on, as the controller process does
                    print(f"controller step failed: {exc}", flush=True)
                    continue
                if out is not None:
                    d = out.decision
                    epochs.append(
                        {"t": time.time(), "tau": d.tau, "shed_ratio": d.state.shed_ratio, "batches": out.batches}
                    )

        control = ControlSource(self.redis_url, namespace) if shedding else None
        query = start_job(self.spark, spec, self.bootstrap, [], on_batch=on_batch, control=control)
        thread = threading.Thread(target=control_loop, daemon=True)
        proc = None
        try:
            deadline = time.monotonic() + 120
            while query.lastProgress is None and time.monotonic() < deadline:
                time.sleep(0.2)
            thread.start()
            proc = subprocess.Popen(producer_cmd(path, self.bootstrap, p, rate), stdout=subprocess.PIPE, text=True)
            out, _ = proc.communicate(timeout=p.pre + p.burst + p.post + 300)
            if proc.returncode != 0:
                raise RuntimeError(f"producer failed ({proc.returncode})")
            produced = json.loads(out.strip().splitlines()[-1])
            expected = sum(produced["counts"].values())
            deadline = time.monotonic() + p.drain_s
            taken = 0
            while time.monotonic() < deadline:
                if query.exception() is not None:
                    raise RuntimeError(f"query failed: {query.exception()}")
                taken = sum(sum(s["joined"] for s in o.stats) + sum(o.shed.values()) for o, _ in list(outcomes))
                if taken >= expected:
                    break
                time.sleep(1.0)
        finally:
            if proc is not None:
                stop_process(proc)
            stop.set()
            query.stop()
            thread.join(timeout=30)
            reports.client.delete(reports.key, decisions.latest_key, decisions.stream_key)
            reports.close()
            decisions.close()
            if arrivals is not None:
                arrivals.close()
        return summarise(p, spec_d, outcomes, epochs, produced, taken, capacity, shedding)


# ---------------------------------------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------------------------------------


def summarise(
    p: Params,
    spec: dict[str, Any],
    outcomes: list,
    epochs: list[dict[str, Any]],
    produced: dict[str, Any],
    taken: int,
    capacity: float,
    shedding: bool,
) -> dict[str, Any]:
    from windjoin.operators.control.shedding import shed_ratio

    start_s = produced["start_ms"] / 1000
    burst_from, burst_to = start_s + p.pre, start_s + p.pre + p.burst
    topic_rows = per_topic_rows(offset_log(Path(spec["checkpoint"])))
    stream_of = {s["topic"]: name for name, s in spec["streams"].items()}
    phases = {"pre": DelayHistogram(), "burst": DelayHistogram(), "post": DelayHistogram()}
    batches = []
    previous = None
    for outcome, load in sorted(outcomes, key=lambda x: x[0].batch_id):
        rows = {stream_of[t]: n for t, n in topic_rows.get(outcome.batch_id, {}).items() if t in stream_of}
        offered = sum(rows.values())
        interval = outcome.finished_at - previous if previous is not None else p.trigger_s
        previous = outcome.finished_at
        delays = outcome.delays_ms.expanded()
        result_s = outcome.finished_at - delays / 1000  # emission is within the sink's time of finished_at
        for name, lo, hi in (
            ("pre", start_s + p.warmup_s, burst_from),
            ("burst", burst_from, burst_to),
            ("post", burst_to, math.inf),
        ):
            phases[name].add(delays[(result_s >= lo) & (result_s < hi)])
        batches.append(
            {
                "batch_id": outcome.batch_id,
                "t": outcome.finished_at - start_s,
                "interval_s": interval,
                "rows": rows,
                "rate": offered / max(interval, p.trigger_s),
                "tau_batch": offered / (1 if p.measure == "batch" else max(interval, p.trigger_s)) / p.slots / capacity,
                "shed_ratio": outcome.shed_ratio,
                "shed": dict(outcome.shed),
                "shed_fraction": {s: outcome.shed.get(s, 0) / n for s, n in rows.items() if n},
                "pairs": int(len(delays)),
                "p50_ms": float(np.quantile(delays, 0.5)) if len(delays) else None,
                "p99_ms": float(np.quantile(delays, 0.99)) if len(delays) else None,
                "load_avg": load,
            }
        )
    # Shed fraction vs the decided ratio, per stream, over the batches that shed: observed vs expected count.
    fit = {}
    for stream in spec["streams"]:
        shed = sum(b["shed"].get(stream, 0) for b in batches)
        expected = sum(b["shed_ratio"] * b["rows"].get(stream, 0) for b in batches)
        var = sum(b["shed_ratio"] * (1 - b["shed_ratio"]) * b["rows"].get(stream, 0) for b in batches)
        offered = sum(b["rows"].get(stream, 0) for b in batches if b["shed_ratio"] > 0)
        fit[stream] = {
            "shed": shed,
            "expected": expected,
            "z": (shed - expected) / math.sqrt(var) if var else None,
            "offered_in_shedding_batches": offered,
            "fraction": shed / offered if offered else 0.0,
            "mean_ratio": expected / offered if offered else 0.0,
        }
    tau1 = p.tau1
    formula_ok = all(math.isclose(e["shed_ratio"], shed_ratio(e["tau"], tau1), abs_tol=1e-12) for e in epochs)
    for e in epochs:
        e["t"] -= start_s
    burst_end = p.pre + p.burst
    after = [b for b in batches if b["t"] > burst_end]
    first_zero = next((b["t"] for b in after if b["shed_ratio"] == 0 and b["t"] > burst_end), None)
    shed_after = sum(sum(b["shed"].values()) for b in after if first_zero is not None and b["t"] >= first_zero)
    burst_batches = [b for b in batches if burst_end - p.burst <= b["t"] <= burst_end + 30]
    return {
        "shedding": shedding,
        "produced": produced,
        "taken": taken,
        "kept_up": taken >= sum(produced["counts"].values()),
        "delay": {name: h.summary() for name, h in phases.items()},
        "max_batch_p99_ms_burst": max((b["p99_ms"] or 0 for b in burst_batches), default=None),
        "shed_fit": fit,
        "decisions_follow_formula": formula_ok,
        "epochs": epochs,
        "first_zero_ratio_after_burst_s": None if first_zero is None else first_zero - burst_end,
        "shed_after_ratio_back_to_zero": shed_after,
        "batches": batches,
    }


def print_table(result: dict[str, Any]) -> None:
    shed, base = result["shedding_run"], result["baseline_run"]
    print(f"\n{'':44} {'shedding':>12} {'no shedding':>12}")
    for phase in ("pre", "burst", "post"):
        for q in ("p50_ms", "p99_ms"):
            a, b = shed["delay"][phase][q], base["delay"][phase][q]
            label = f"{phase} delay {q[:3]}, s"
            print(f"{label:44} {_s(a):>12} {_s(b):>12}")
    print(
        f"{'max per-batch p99 in burst (+30 s), s':44} {_s(shed['max_batch_p99_ms_burst']):>12} "
        f"{_s(base['max_batch_p99_ms_burst']):>12}"
    )
    print(f"{'kept up (all records taken)':44} {str(shed['kept_up']):>12} {str(base['kept_up']):>12}")
    for stream, fit in shed["shed_fit"].items():
        print(
            f"stream {stream}: shed {fit['shed']:,} vs expected {fit['expected']:,.0f} from the decided ratios "
            f"(z = {fit['z'] if fit['z'] is None else round(fit['z'], 2)}); fraction {fit['fraction']:.3f}, "
            f"mean decided ratio {fit['mean_ratio']:.3f}"
        )
    print(
        f"decisions follow SR(tau): {shed['decisions_follow_formula']}; ratio back to 0 "
        f"{shed['first_zero_ratio_after_burst_s']} s after the burst; shed after that: "
        f"{shed['shed_after_ratio_back_to_zero']}"
    )
    print(f"p99 delay in the burst, no shedding / shedding: {_fmt(result['p99_ratio_burst'])}")


def _s(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.2f}"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = result["params"]
    fig, axes = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    for run, style in ((result["shedding_run"], "-"), (result["baseline_run"], "--")):
        label = "shedding" if run["shedding"] else "no shedding"
        b = run["batches"]
        t = [x["t"] for x in b]
        axes[0].plot(t, [x["rate"] for x in b], style, label=f"input rows/s ({label})")
        axes[1].step(
            [e["t"] for e in run["epochs"]],
            [e["tau"] for e in run["epochs"]],
            style,
            where="post",
            label=f"tau decided ({label})",
        )
        if run["shedding"]:
            axes[1].step(t, [x["shed_ratio"] for x in b], "-", where="post", label="shed ratio applied")
            for stream in ("R", "S"):
                axes[1].plot(t, [x["shed_fraction"].get(stream, 0) for x in b], ".", label=f"shed fraction {stream}")
        for q, alpha in (("p99_ms", 1.0), ("p50_ms", 0.5)):  # batches without pairs leave gaps
            values = [np.nan if x[q] is None else x[q] / 1000 for x in b]
            axes[2].plot(t, values, style, marker=".", alpha=alpha, label=f"{q[:3]} delay ({label})")
    axes[1].axhline(p["tau1"], color="grey", linewidth=0.8, linestyle=":", label="tau1")
    for ax in axes:
        ax.axvspan(p["pre"], p["pre"] + p["burst"], color="orange", alpha=0.12)
        ax.legend(fontsize=7, loc="upper right")
    axes[0].set_ylabel("rows/s")
    axes[1].set_ylabel("tau / ratio")
    axes[2].set_ylabel("production delay, s")
    axes[2].set_xlabel("seconds since the producer started (burst shaded)")
    axes[0].set_title(f"{p['factor']:g}x burst for {p['burst']:g} s; S2J shedding vs none (2 cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------


def parse_args() -> tuple[argparse.Namespace, Params]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller batches and window, shorter phases")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--capacity", type=float, default=None, help="skip calibration: X, input rows/s")
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG (and table) from --out's JSON")
    add_param_flags(parser, Params())
    args = parser.parse_args()
    return args, params_from(args, Params(), QUICK)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "produce":
        parser = argparse.ArgumentParser(prog="benchmarks.shedding produce")
        parser.add_argument("cmd")
        parser.add_argument("spec", type=Path)
        for flag, kind in (("bootstrap", str), ("rate", float), ("factor", float), ("pre", float)):
            parser.add_argument("--" + flag, type=kind, required=True)
        for flag, kind in (("burst", float), ("post", float), ("seed", int), ("skew", float), ("keys", int)):
            parser.add_argument("--" + flag, type=kind, required=True)
        produce_profile(parser.parse_args())
        return
    args, p = parse_args()
    if args.plot_only:
        result = json.loads(args.out.read_text())
        print_table(result)
        plot(result, args.out.with_suffix(".png"))
        return
    from windjoin.connectors.local import services
    from windjoin.connectors.spark.session import build_local_spark
    from windjoin.pipelines.job.join_job import STATE_CONF

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="windjoin-bench-shedding-"))
    workdir.mkdir(parents=True, exist_ok=True)
    state_dir = workdir / "services"
    facts = machine_facts()
    result: dict[str, Any] = {
        "benchmark": "shedding",
        "machine": facts,
        "date": facts["date"],
        "quick": args.quick,
        "params": asdict(p),
        "load_avg_start": load_avg(),
    }
    started = time.perf_counter()
    spark = None
    exit_on_sigterm()  # a killed run tears down too
    try:
        kafka, redis = services.up(services.ServicesConfig(state_dir=state_dir))
        # clients, and the processes started, log in with the embedded Redis' password file
        os.environ["WINDJOIN_REDIS_PASSWORD_FILE"] = str(services.redis_password_file(state_dir))
        bootstrap, redis_url = kafka.service.url, redis.service.url
        spark = build_local_spark(
            app_name="windjoin-bench-shedding",
            conf={**STATE_CONF, "spark.driver.memory": "3g", "spark.ui.showConsoleProgress": "false"},
        )
        spark.sparkContext.setLogLevel("ERROR")
        bench = Bench(p, workdir, bootstrap, redis_url, spark)
        print(f"workdir {workdir}; broker {bootstrap}; redis {redis_url}; load {load_avg()}", flush=True)
        if args.capacity:
            x = args.capacity
            result["calibration"] = {"rows_per_s": x, "given": True}
        else:
            result["calibration"] = bench.calibrate()
            x = result["calibration"]["rows_per_s"]
            if not x:
                raise RuntimeError(f"calibration measured nothing: {result['calibration']}")
        # W at the measured maximum: tuples/s per worker, or tuples per batch (trigger interval) per worker
        capacity = x * p.trigger_s / p.slots if p.measure == "batch" else x / p.slots
        rate = p.tau_sustained * x
        result.update(capacity_rows_per_s=x, capacity_w=capacity, sustained_rate=rate, burst_rate=p.factor * rate)
        print(
            f"calibration: X = {x:,.0f} rows/s -> W = {capacity:,.0f} ({p.measure}) per slot; R = {rate:,.0f}/s, "
            f"burst {p.factor * rate:,.0f}/s; load {load_avg()}",
            flush=True,
        )
        result["shedding_run"] = bench.run("shed", True, rate, capacity)
        print(f"shedding run: {result['shedding_run']['delay']}; load {load_avg()}", flush=True)
        result["baseline_run"] = bench.run("base", False, rate, capacity)
        print(f"baseline run: {result['baseline_run']['delay']}; load {load_avg()}", flush=True)
    finally:
        tear_down(spark, state_dir, workdir if args.workdir is None else None)
    result["load_avg_end"] = load_avg()
    result["wall_s"] = time.perf_counter() - started
    a = result["shedding_run"]["delay"]["burst"]["p99_ms"]
    b = result["baseline_run"]["delay"]["burst"]["p99_ms"]
    result["p99_ratio_burst"] = b / a if a and b else None
    print_table(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    png = args.out.with_suffix(".png")
    plot(result, png)
    print(f"written: {args.out}, {png}")


if __name__ == "__main__":
    main()
