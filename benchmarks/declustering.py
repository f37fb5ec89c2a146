"""Adaptive declustering through the Spark job: executor-seconds and delay against a fixed maximum allocation.

Paper 000 (Fig. 11) grows the degree of declustering when N_sup > beta * N_con and shrinks it when no slot is a
supplier. Here the rule runs through the real job: `windjoin run` on a Spark standalone cluster (a Master and
MAX_EXECUTORS one-core Workers on loopback), `windjoin controller` (`scaling: declustering`, busy occupancy: a
slot's join seconds over the batch interval) deciding the slot count every EPOCH seconds, the driver following
the slots (partition moves with their state) and asking the master for as many executors. Workload: R(ts, k, x)
and S(ts, k, a), R.k = S.k within WINDOW_MS, produced live by `windjoin generate --pace` (Poisson arrivals, event
time = scheduled arrival) at a rate that steps up and back down (`--steps`). Two runs on fresh topics, in the
same benchmark run: (a) adaptive, 1..MAX_EXECUTORS executors; (b) fixed, MAX_EXECUTORS executors, no controller.

Per batch (the driver's progress lines, stamped when read): time, rows, pairs, the batch's p99 production delay
(emission minus the later tuple's event time) and the executors the master's JSON reports running. Per run:
executor-seconds (the integral of running executors from the first step's start to DRAIN_S after the last
step's end) and p50/p99 production delay over every pair in the Parquet sink whose result time is past
WARMUP_S. Headline: executor-seconds(adaptive) / executor-seconds(fixed), with both p99 delays. Delays are not
corrected for the generators' start-up lag (recorded per step). Results: benchmarks/results/declustering.json
and .png (executors over time for both runs beside the offered rate), with the machine's facts and load averages.

    python -m benchmarks.declustering [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.machine import machine_facts
from benchmarks.pipeline import generator_lags
from benchmarks.results_file import write_results
from benchmarks.rs_spec import rs_eq_join

RESULTS = Path(__file__).parent / "results"
BATCH_LINE = re.compile(r"^batch (\d+): ([\d,]+) records, ([\d,]+) pairs(.*)$", re.M)
DELAY = re.compile(r"delay p50 ([\d.]+) s p99 ([\d.]+) s")


@dataclass(frozen=True)
class Params:
    steps: tuple[tuple[float, float], ...] = ((300.0, 45.0), (2200.0, 75.0), (300.0, 75.0))  # (events/s, s)
    keys: int = 64
    window_ms: int = 1000
    partitions: int = 8
    max_executors: int = 2
    trigger_ms: int = 1000
    epoch_s: float = 3.0
    th_sup: float = 0.25  # busy occupancy: a slot's seconds over the batch interval (Spark's ~0.7 s a batch
    th_con: float = 0.12  # outside the slots keeps it well under 1), as in tests/pipelines/job/test_executor_scaling.py
    beta: float = 0.5
    shrink_after_epochs: int = 3  # supplier-free epochs in a row before a shrink (paper 000: 1)
    executors_hold_s: float = 10.0  # the driver's hysteresis before it releases an executor
    warmup_s: float = 10.0
    drain_s: float = 20.0
    seed: int = 3

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.steps)


QUICK = Params(steps=((300.0, 12.0), (2200.0, 20.0), (300.0, 25.0)), warmup_s=5.0, drain_s=10.0)


def spec_dict(p: Params, topics: tuple[str, str], workdir: Path, redis_url: str) -> dict[str, Any]:
    rate_max = max(r for r, _ in p.steps)
    return {
        "window": {"kind": "time", "size_ms": p.window_ms},
        "allowed_lateness_ms": 2000,
        **rs_eq_join(topics),
        "partitions": p.partitions,
        "slots": p.max_executors,
        "trigger_ms": p.trigger_ms,
        "max_offsets_per_trigger": int(rate_max * p.trigger_ms / 1000 * 2),
        "checkpoint": str(workdir / "checkpoint"),
        # Redis: the load reports the controller reads (both runs publish them, so both pay the same)
        "sinks": {"parquet": {"path": str(workdir / "parquet")}, "redis": {"url": redis_url}},
    }


def control_config(p: Params) -> dict[str, Any]:
    return {
        "scaling": "declustering",
        "declustering": {
            "beta": p.beta,
            "min_slots": 1,
            "max_slots": p.max_executors,
            "shrink_after_epochs": p.shrink_after_epochs,
        },
        "reorganisation": {"occupancy": "busy", "th_sup": p.th_sup, "th_con": p.th_con},
    }


class Watch(threading.Thread):
    """Every 0.25 s: the executors the master reports running, and the driver's new batch lines (stamped)."""

    def __init__(self, cluster: Any, log: Path, started: float) -> None:
        super().__init__(daemon=True)
        self.cluster, self.log, self.started = cluster, log, started
        self.executors: list[tuple[float, int]] = []
        self.batches: list[dict[str, Any]] = []
        self.halt = threading.Event()
        self._read = 0

    def run(self) -> None:
        while not self.halt.wait(0.25):
            t = time.time() - self.started
            try:
                now = self.cluster.executors_running()
            except OSError:
                continue
            self.executors.append((t, now))
            self._batches(t, now)

    def _batches(self, t: float, executors: int) -> None:
        try:
            text = self.log.read_bytes()[self._read :].decode(errors="replace").replace("\r", "\n")
        except FileNotFoundError:
            return
        end = text.rfind("\n") + 1  # whole lines only
        self._read += len(text[:end].encode())
        for m in BATCH_LINE.finditer(text[:end]):
            delay = DELAY.search(m[4])
            self.batches.append(
                {
                    "t": round(t, 2),
                    "batch": int(m[1]),
                    "rows": int(m[2].replace(",", "")),
                    "pairs": int(m[3].replace(",", "")),
                    "delay_p99_ms": float(delay[2]) * 1000 if delay else None,
                    "executors": executors,
                }
            )


def executor_seconds(samples: list[tuple[float, int]], start: float, end: float) -> float:
    """The integral of running executors over [start, end] (each sample holds until the next)."""
    total = 0.0
    for (t0, n), (t1, _) in zip(samples, [*samples[1:], (end, 0)], strict=True):
        lo, hi = max(t0, start), min(t1, end)
        if hi > lo:
            total += n * (hi - lo)
    return total


def pair_delays_ms(parquet: Path, since_ms: int) -> np.ndarray:
    """Emission minus result time of every pair the Parquet sink holds whose result time is at least `since_ms`."""
    import pyarrow.compute as pc

    from windjoin.connectors.files.parquet_sink import ParquetSink

    try:
        table = ParquetSink(parquet).read("eq")
    except FileNotFoundError:
        return np.zeros(0)
    result = np.maximum(
        pc.struct_field(table["R"], [0]).to_numpy(), pc.struct_field(table["S"], [0]).to_numpy()
    )  # each stream's timestamp is its struct's first field
    delays = table["emitted_at"].to_numpy() - result
    return delays[result >= since_ms]


def run_mode(mode: str, p: Params, cluster: Any, bootstrap: str, redis_url: str, workdir: Path) -> dict[str, Any]:
    """One paced run: the job (and in `adaptive` the controller) in processes of their own; its figures."""
    from windjoin.connectors.kafka.admin import create_topics
    from windjoin.connectors.local import processes
    from windjoin.connectors.redis.client import redis_client
    from windjoin.connectors.redis.control_decisions import decision_key

    workdir.mkdir(parents=True)
    redis_client(redis_url).flushdb()
    tag = uuid.uuid4().hex[:8]
    topics = (f"bench-decl-r-{tag}", f"bench-decl-s-{tag}")
    create_topics(bootstrap, list(topics), 4)
    spec_path = workdir / "spec.yaml"
    spec_path.write_text(json.dumps(spec_dict(p, topics, workdir, redis_url)))  # JSON is YAML
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    run = [sys.executable, "-m", "windjoin.pipelines", "run", str(spec_path), "--bootstrap", bootstrap]
    run += ["--spark-master", cluster.master_url, "--spark-conf", "spark.executor.memory=512m"]
    run += ["--spark-conf", "spark.executor.cores=1", "--spark-conf", "spark.ui.showConsoleProgress=false"]
    if mode == "adaptive":
        run += ["--executors-from-redis", redis_url, "--executors-key", decision_key()]
        run += ["--executors-hold", str(p.executors_hold_s), "--control-redis", redis_url]
    else:
        run += ["--executors", str(p.max_executors)]
    log, control_log = workdir / "driver.log", workdir / "controller.log"
    started = time.time()
    watch = Watch(cluster, log, started)
    watch.start()
    driver = processes.spawn(run, log, cwd=workdir, env=env)
    controller = None
    if mode == "adaptive":
        (workdir / "control.yaml").write_text(json.dumps(control_config(p)))
        argv = [sys.executable, "-m", "windjoin.pipelines", "controller", str(spec_path)]
        argv += ["--config", str(workdir / "control.yaml"), "--epoch-s", str(p.epoch_s)]
        controller = processes.spawn(argv, control_log, cwd=workdir, env=env)
    steps, lags = [], []
    pid = None  # the step's generator
    try:
        deadline = time.monotonic() + 180
        while not watch.batches or not watch.executors or not watch.executors[-1][1]:  # batch 0 (Spark's start)
            if time.monotonic() > deadline or not processes.is_alive(driver):
                raise RuntimeError(f"{mode}: the job did not start:\n{processes.log_tail(log, 40)}")
            time.sleep(0.5)
        time.sleep(3.0)
        for i, (rate, seconds) in enumerate(p.steps):
            gen_log = workdir / f"generator-{i}.log"
            gen = [sys.executable, "-m", "windjoin.pipelines.cli.produce", "generate", str(spec_path)]
            gen += ["--rate", f"{rate / 2:.3f}", "--duration", f"{seconds:.3f}", "--seed", str(p.seed + i)]
            gen += ["--keys", str(p.keys), "--skew", "0.5", "--pace", "--bootstrap", bootstrap, "--no-progress"]
            steps.append({"rate": rate, "start": time.time() - started, "seconds": seconds})
            pid = processes.spawn(gen, gen_log, cwd=workdir)
            while processes.is_alive(pid):
                time.sleep(0.2)
            pid = None  # ended: its PID may be reused, never signal it again
            steps[-1]["end"] = time.time() - started
            lags.append(generator_lags(gen_log))
        caught_up = _catch_up(watch, bootstrap, topics, steps[-1]["end"] + p.drain_s, started)
    finally:
        watch.halt.set()
        watch.join()
        if pid is not None:
            processes.stop(pid, grace_s=5.0)  # a step's generator still running when something failed
        if controller is not None:
            processes.stop(controller, grace_s=5.0)
        processes.stop(driver, grace_s=15.0)
    start, end = steps[0]["start"], max(steps[-1]["end"] + p.drain_s, caught_up[1])
    delays = pair_delays_ms(workdir / "parquet", int((started + start + p.warmup_s) * 1000))
    return {
        "mode": mode,
        "steps": steps,
        "generator_lags": [{"start_up_s": a, "steady": b} for a, b in lags],
        "executors": [[round(t, 2), n] for t, n in watch.executors],
        "batches": watch.batches,
        "controller": [line for line in _text(control_log).splitlines() if line.startswith("epoch")],
        "load_avg": loadavg(),
        "summary": {
            "window_s": [round(start, 2), round(end, 2)],
            "caught_up": caught_up[0],  # every record produced was in a batch before the window's end
            "executor_seconds": round(executor_seconds(watch.executors, start, end), 1),
            "max_executors_seen": max((n for _, n in watch.executors), default=0),
            "batches": len(watch.batches),
            "rows": sum(b["rows"] for b in watch.batches),
            "pairs": int(len(delays)),
            "delay_p50_ms": float(np.percentile(delays, 50)) if len(delays) else None,
            "delay_p99_ms": float(np.percentile(delays, 99)) if len(delays) else None,
            "batch_p99_max_ms": max((b["delay_p99_ms"] or 0.0 for b in watch.batches), default=None),
        },
    }


def _catch_up(
    watch: Watch, bootstrap: str, topics: tuple[str, str], not_before: float, started: float
) -> tuple[bool, float]:
    """Wait until the job's batches hold every record the topics hold, and `not_before` has passed (seconds
    since `started`); (whether it caught up within 180 s, when)."""
    from windjoin.connectors.kafka.arrivals import KafkaArrivals

    arrivals = KafkaArrivals(bootstrap, topics)
    try:
        produced = arrivals()
    finally:
        arrivals.close()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        now = time.time() - started
        if now >= not_before and sum(b["rows"] for b in watch.batches) >= produced:
            return True, now
        time.sleep(0.5)
    return False, time.time() - started


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def loadavg() -> list[float]:
    return [float(x) for x in np.round(np.loadtxt("/proc/loadavg", usecols=(0, 1, 2)), 2)]


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (ax, delay) = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    rate_axis = ax.twinx()
    for run, colour in zip(result["runs"], ("tab:blue", "tab:orange"), strict=True):
        t0 = run["steps"][0]["start"]
        t, n = zip(*run["executors"], strict=True) if run["executors"] else ((), ())
        summary = run["summary"]
        p99_s = (summary["delay_p99_ms"] or 0) / 1000
        label = f"{run['mode']}: {summary['executor_seconds']:.0f} executor-s, p99 {p99_s:.2f} s"
        ax.step([x - t0 for x in t], n, where="post", color=colour, label=label)
        steps = run["steps"]
        xs = [x for s in steps for x in (s["start"] - t0, s["end"] - t0)]
        ys = [s["rate"] for s in steps for _ in (0, 1)]
        rate_axis.plot(xs, ys, color=colour, linestyle=":", alpha=0.6)
        b = [x for x in run["batches"] if x["delay_p99_ms"] is not None]
        delay.plot([x["t"] - t0 for x in b], [x["delay_p99_ms"] / 1000 for x in b], color=colour, label=run["mode"])
    ax.set_ylim(0, result["params"]["max_executors"] + 0.5)
    ax.set_ylabel("executors running (master)")
    rate_axis.set_ylabel("offered rate, events/s (dotted)")
    ax.legend(loc="upper left", fontsize=8)
    ratio = result["headline"]["executor_seconds_adaptive_over_fixed"]
    ax.set_title(f"adaptive declustering vs fixed maximum: executor-seconds ratio {ratio:.2f}")
    delay.set_ylabel("batch p99 production delay (s)")
    delay.set_xlabel("time since the first step (s)")
    delay.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short steps: a smoke run (~4 minutes)")
    parser.add_argument("--out", type=Path, default=RESULTS / "declustering.json")
    args = parser.parse_args()
    p = QUICK if args.quick else Params()
    from windjoin.connectors.local import services
    from windjoin.connectors.spark.cluster import ClusterConfig, start_cluster

    workdir = Path(tempfile.mkdtemp(prefix="windjoin-bench-decl-"))
    state_dir = workdir / "services"
    result: dict[str, Any] = {"benchmark": "declustering", "machine": machine_facts(), "params": asdict(p)}
    result["params"]["control"] = control_config(p)
    result["load_avg_start"] = loadavg()
    cluster = None
    try:
        started = {s.service.name: s.service.url for s in services.up(services.ServicesConfig(state_dir=state_dir))}
        # clients, and the processes started, log in with the embedded Redis' password file
        os.environ["WINDJOIN_REDIS_PASSWORD_FILE"] = str(services.redis_password_file(state_dir))
        cluster = start_cluster(ClusterConfig(state_dir=workdir / "cluster", workers=p.max_executors))
        result["runs"] = []
        for i, mode in enumerate(("adaptive", "fixed")):
            print(f"{mode}: steps {p.steps} (events/s, s)", flush=True)
            url = started["redis"].rsplit("/", 1)[0] + f"/{i + 1}"
            run = run_mode(mode, p, cluster, started["kafka"], url, workdir / mode)
            print(f"{mode}: {run['summary']}", flush=True)
            result["runs"].append(run)
    finally:
        if cluster is not None:
            cluster.stop()
        services.down(state_dir)
        shutil.rmtree(workdir, ignore_errors=True)
    result["load_avg_end"] = loadavg()
    adaptive, fixed = (r["summary"] for r in result["runs"])
    result["headline"] = {
        "executor_seconds_adaptive_over_fixed": adaptive["executor_seconds"] / fixed["executor_seconds"],
        "delay_p99_ms_adaptive": adaptive["delay_p99_ms"],
        "delay_p99_ms_fixed": fixed["delay_p99_ms"],
    }
    print(write_results(result, args.out, plot), result["headline"], flush=True)


if __name__ == "__main__":
    main()
