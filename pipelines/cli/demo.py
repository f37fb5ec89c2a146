"""`windjoin demo`: the whole system on one machine — local broker and Redis, generated load, the Spark join.

Brings up the embedded services (reusing running ones), writes a spec with two tasks over two keyed streams,
starts the streaming join, warms it up with a second of the load (its first batch starts Spark's Python workers,
and the reader learns each partition's density), waits until that is joined, then starts the paper-000 load
generator (`windjoin generate`, paced) in a subprocess, with a line of progress per batch (input and output rates,
production delay, window size); stops once the load is over and drained, and says where the results are. Spark's
and its Python workers' own output goes to a log file the demo names, not the terminal.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import numpy as np
import yaml

from windjoin.connectors.local import services as svc
from windjoin.operators.spec import load_spec
from windjoin.pipelines.cli.produce import ensure_topics
from windjoin.pipelines.cli.run import Progress
from windjoin.pipelines.job.join_job import STATE_CONF, BatchOutcome, start_job
from windjoin.pipelines.job.sinks import build_sinks

STALL_S = 120
DEMO_TOPIC_PARTITIONS = 4
WARM_UP_S = 1.0  # of the demo's load before its own: starts the workers, and the reader learns its density


def demo_spec(run: str, out_dir: Path, redis_url: str, redis_password_file: str) -> dict:
    return {
        "window": {"kind": "time", "size_ms": 10_000},
        "allowed_lateness_ms": 3_000,
        "streams": {
            "orders": {"fields": {"user": "int", "amount": "float"}, "key": "user", "topic": f"demo-{run}-orders"},
            "clicks": {"fields": {"user": "int", "price": "float"}, "key": "user", "topic": f"demo-{run}-clicks"},
        },
        "tasks": [
            {
                "name": "same_user",
                "join": ["orders", "clicks"],
                "on": [{"op": "eq", "left": "orders.user", "right": "clicks.user"}],
            },
            {
                "name": "same_user_near_price",
                "join": ["orders", "clicks"],
                "on": [
                    {"op": "eq", "left": "orders.user", "right": "clicks.user"},
                    {"op": "band", "left": "orders.amount", "right": "clicks.price", "width": 100.0},
                ],
            },
        ],
        "partitions": 16,
        "slots": 2,
        # back to back, batches sized for a 1 s delay: the lowest delay of benchmarks.latency's variants
        "trigger_ms": 0,
        "latency_target_ms": 1000,
        "checkpoint": str(out_dir / f"checkpoint-{run}"),
        "sinks": {
            "redis": {"url": redis_url, "password_file": redis_password_file, "retain_ms": 600_000},
            "parquet": {"path": str(out_dir / "parquet")},
        },
        "dead_letter_topic": f"demo-{run}-dead",
    }


class DemoSummary:
    """The load's production delay (p50, p99 over the pairs of every batch after its first; and the worst batch's
    p99), and its median time budget per batch part. The demo adds the load's batches only, not the warm-up's."""

    BUCKET_MS = 10

    def __init__(self) -> None:
        self.counts = np.zeros(0, dtype=np.int64)  # pairs per 10 ms of delay: bounded whatever the pair count
        self.budgets: list[dict[str, float]] = []
        self.batches = 0
        self.worst_p99_ms = 0  # the largest per-batch p99 (ms) after the first batch

    def add(self, outcome: BatchOutcome) -> None:
        self.batches += 1
        if self.batches == 1:
            return
        self.budgets.append(outcome.budget)
        if len(outcome.delays_ms):
            delays = outcome.delays_ms
            self.worst_p99_ms = max(self.worst_p99_ms, int(delays.percentile(99)))
            buckets = np.bincount(np.maximum(delays.values, 0) // self.BUCKET_MS, weights=delays.counts).astype(int)
            size = max(len(self.counts), len(buckets))
            self.counts = np.pad(self.counts, (0, size - len(self.counts))) + np.pad(buckets, (0, size - len(buckets)))

    def percentile(self, q: float) -> float:
        """The q-th percentile of the delays, in seconds, to the bucket's upper edge (never understated)."""
        cumulative = np.cumsum(self.counts)
        bucket = int(np.searchsorted(cumulative, q / 100 * cumulative[-1]))
        return (bucket + 1) * self.BUCKET_MS / 1000

    def text(self) -> str:
        if not self.counts.sum():
            return "delay:    no pairs after the first batch"
        parts = {p: float(np.median([b.get(p, 0.0) for b in self.budgets])) for p in self.budgets[-1]}
        budget = " + ".join(f"{p} {ms / 1000:.2f}" for p, ms in parts.items())
        return (
            f"delay:    p50 {self.percentile(50):.2f} s, p99 {self.percentile(99):.2f} s, worst batch's p99 "
            f"{self.worst_p99_ms / 1000:.2f} s (batches after the first)\n"
            f"budget:   median batch {sum(parts.values()) / 1000:.2f} s = {budget}"
        )


def run_demo(out_dir: Path, rate: float, duration: float, keys: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    state_dir = out_dir / "services"
    started = svc.up(svc.ServicesConfig(state_dir=state_dir))
    urls = {s.service.name: s.service.url for s in started}
    redis_login = next(s.service.password_file for s in started if s.service.name == svc.REDIS)
    for s in started:
        click.echo(f"{s.service.name}: {s.service.url} ({'reused' if s.reused else 'started'})", err=True)
    run = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]
    spec_path = out_dir / f"spec-{run}.yaml"
    spec_path.write_text(yaml.safe_dump(demo_spec(run, out_dir, urls[svc.REDIS], redis_login), sort_keys=False))
    spec = load_spec(spec_path)
    ensure_topics(urls[svc.KAFKA], [s.topic for s in spec.streams.values()], DEMO_TOPIC_PARTITIONS)
    from windjoin.connectors.spark.session import build_local_spark

    spark_log = out_dir / f"spark-{run}.log"
    with _output_to(spark_log):  # the JVM, and the Python workers it starts, keep writing there
        conf = {**STATE_CONF, "spark.ui.showConsoleProgress": "false"}
        spark = build_local_spark(app_name="windjoin-demo", conf=conf)
        spark.sparkContext.setLogLevel("ERROR")
    click.echo(f"spark:    its log and its Python workers' output go to {spark_log}", err=True)
    progress, totals = Progress(), {"records": 0, "pairs": 0, "last": time.time(), "loaded": False}
    summary = DemoSummary()
    started_ms = int(time.time() * 1000)

    def on_batch(outcome: BatchOutcome) -> None:
        click.echo(progress.line(outcome), err=True)
        if totals["loaded"]:  # the summary is the load's, not the warm-up's
            summary.add(outcome)
        totals["records"] += outcome.records
        totals["pairs"] += sum(outcome.pairs.values())
        totals["last"] = time.time()

    def drained() -> bool:
        status = query.status
        quiet = time.time() - totals["last"] > max(3 * spec.trigger_ms, 2000) / 1000  # no batch for a while
        return not status["isDataAvailable"] and not status["isTriggerActive"] and quiet

    # Every demo run has a new checkpoint and topics over the same sinks: it replaces an earlier run's results.
    query = start_job(spark, spec, urls[svc.KAFKA], build_sinks(spec), on_batch=on_batch, fresh_sinks=True)

    def generate(events_per_s: float, seconds: float) -> subprocess.Popen:
        command = ["generate", str(spec_path), "--rate", str(events_per_s), "--duration", str(seconds)]
        command += ["--keys", str(keys), "--bootstrap", urls[svc.KAFKA], "--no-progress"]
        return subprocess.Popen([sys.executable, "-m", "windjoin.pipelines", *command])

    def wait(until: Callable[[], bool]) -> None:
        while not until():
            if query.exception() is not None:
                raise click.ClickException(f"the join job failed: {query.exception()} (Spark's log: {spark_log})")
            if time.time() - totals["last"] > STALL_S:
                raise click.ClickException(f"no batch for {STALL_S} s; see Spark's log: {spark_log}")
            time.sleep(0.2)

    click.echo(
        f"join job started; warming it up with {WARM_UP_S:.0f} s of the load (its first batch starts the workers)",
        err=True,
    )
    generator = generate(rate, WARM_UP_S)
    totals["last"] = time.time()
    try:
        wait(lambda: totals["records"] > 0 and generator.poll() is not None and drained())
        click.echo("join job running; generating load", err=True)
        totals["loaded"] = True
        generator = generate(rate, duration)
        wait(lambda: generator.poll() is not None and drained())
    finally:
        query.stop()
        if generator.poll() is None:
            generator.kill()
    first_task = spec.tasks[0].name
    click.echo(
        f"\n{totals['records']:,} records joined into {totals['pairs']:,} pairs.\n"
        f"{summary.text()}\n"
        f"query:    windjoin query results {spec_path} {first_task} --from {started_ms} --to {int(time.time() * 1000)}"
        f" --limit 10\n"
        f"spec:     {spec_path}\n"
        f"parquet:  {spec.sinks.parquet.path}/task=<task>/batch=<id>/ (pyarrow.dataset, hive partitioning)\n"
        f"redis:    {urls[svc.REDIS]} pieces windjoin:{{<task>}}:piece:<batch>:<slot>, indexed by result time\n"
        f"services still run; stop them with: windjoin services down --state-dir {state_dir}",
        err=True,
    )


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """This process' stdout and stderr file descriptors point at `path` while the block runs, so that what it
    starts there (the JVM, and through it the Python workers) writes there for good; Python's own writes come
    back to the terminal after."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, original in zip((1, 2), saved, strict=True):
            os.dup2(original, fd)
            os.close(original)
