"""`windjoin run`: the streaming join job on Kafka topics, results to the spec's sinks, with progress."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click
from redis.exceptions import RedisError

from windjoin.connectors.files.checkpoint_layout import CheckpointLayoutError
from windjoin.connectors.redis.client import RedisAuthError
from windjoin.operators.batch_budget import budget_text
from windjoin.operators.sink_owner import OwnerRecordError
from windjoin.operators.spec import SpecError, load_spec
from windjoin.pipelines.cli.options import BOOTSTRAP_OPTION, SPEC_ARGUMENT, STATE_DIR_OPTION, resolve_bootstrap
from windjoin.pipelines.job.executor_scaling import DEFAULT_REDIS_KEY
from windjoin.pipelines.job.job_process import JobProcessOptions, start_job_process
from windjoin.pipelines.job.join_job import BatchOutcome, JobConfigError
from windjoin.pipelines.job.sink_fence import SinkOwnerError


class Progress:
    """One line per batch: input and output rates since the previous batch, delay, window size.

    The delay is emission minus the later tuple's event time: the production delay when event time is the
    arrival time (as `windjoin generate` stamps it); with historical event times it is their age instead.
    """

    def __init__(self) -> None:
        self.previous: float | None = None

    def line(self, outcome: BatchOutcome) -> str:
        elapsed = outcome.finished_at - self.previous if self.previous else None
        self.previous = outcome.finished_at
        pairs = sum(outcome.pairs.values())
        rates = f" ({outcome.records / elapsed:,.0f} in/s, {pairs / elapsed:,.0f} out/s)" if elapsed else ""
        delay = ""
        if len(outcome.delays_ms):
            p50, p99 = outcome.delays_ms.percentile([50, 99])
            delay = f", delay p50 {p50 / 1000:.2f} s p99 {p99 / 1000:.2f} s"
        slowest = max((s["seconds"] for s in outcome.stats), default=0.0)
        return (
            f"batch {outcome.batch_id}: {outcome.records:,} records, {pairs:,} pairs{rates}{delay}, "
            f"dead letters {outcome.dead}, window {outcome.window_tuples:,} tuples, slowest slot {slowest:.2f} s"
            f"{_event_time_note(outcome)}{_snapshot_note(outcome)}{_replay_note(outcome)}"
            f"{f', batch limit {outcome.batch_limit:,}' if outcome.batch_limit else ''}"
            f"{f', {outcome.waiting:,} records waiting' if outcome.waiting else ''}"
            f"{budget_text(outcome.budget, outcome.previous_spark)}"
        )


def _event_time_note(outcome: BatchOutcome) -> str:
    """The batch's watermark and its state's event-time span (live, and held with whole segments)."""
    if outcome.watermark is None:
        return ", no watermark yet"
    watermark = datetime.fromtimestamp(outcome.watermark / 1000, UTC).isoformat(timespec="milliseconds")
    return (
        f", watermark {watermark}, state spans {outcome.state_span_ms / 1000:.1f} s"
        f" (held {outcome.held_span_ms / 1000:.1f} s)"
    )


def _replay_note(outcome: BatchOutcome) -> str:
    """The sinks that skipped the batch as committed before (a replay after a restart), for its progress line."""
    skipped = [f"{sink} ({', '.join(tasks)})" for sink, tasks in outcome.replayed.items()]
    return f", replay skipped by {'; '.join(skipped)}" if skipped else ""


def _snapshot_note(outcome: BatchOutcome) -> str:
    """Punctuations seen and snapshots closed by a batch, for its progress line ("" when none)."""
    note = f", {outcome.punctuations} punctuation(s)" if outcome.punctuations else ""
    closed = [f"{s.task}#{s.id} {s.reason} batches {s.first_batch}..{s.last_batch}" for s in outcome.snapshots]
    return note + (f", snapshots {'; '.join(closed)}" if closed else "")


@click.command("run")
@SPEC_ARGUMENT
@click.option("--available-now", is_flag=True, help="Process what the topics hold now, then stop.")
@BOOTSTRAP_OPTION
@STATE_DIR_OPTION
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    envvar="WINDJOIN_METRICS_PORT",
    help="Serve the job's Prometheus metrics on this port (/metrics); off by default.",
)
@click.option(
    "--spark-master",
    default="local[2]",
    show_default=True,
    envvar="WINDJOIN_SPARK_MASTER",
    help="Spark master URL, e.g. k8s://https://kubernetes.default.svc (the driver runs here: client mode).",
)
@click.option(
    "--spark-conf",
    "spark_conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting overriding windjoin's local defaults (repeatable), e.g. spark.driver.host=HOST.",
)
@click.option("--executors", type=click.IntRange(1), help="Keep this many executors (a cluster master, not local).")
@click.option(
    "--executors-from-redis",
    metavar="URL",
    help="Follow the desired executor count that the controller writes to Redis at URL (key --executors-key).",
)
@click.option("--executors-key", default=DEFAULT_REDIS_KEY, show_default=True, help="Redis key of the desired count.")
@click.option(
    "--executors-hold",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds the decisions must ask for fewer executors before any is released (hysteresis).",
)
@click.option(
    "--control-redis",
    metavar="URL",
    envvar="WINDJOIN_CONTROL_REDIS",
    help="Apply the decisions `windjoin controller` records in Redis at URL: partition moves (with their window "
    "state) and the shed ratio. Off: the spec's round-robin routing, no shedding.",
)
@click.option("--control-namespace", default="windjoin", show_default=True, help="The controller's namespace.")
@click.option(
    "--fresh-sinks",
    is_flag=True,
    help="The sinks hold results of another checkpoint (or of one from before sinks recorded theirs): delete "
    "those results and write the sinks afresh from this checkpoint. Without it such a start is refused.",
)
def run(
    spec_path: Path,
    available_now: bool,
    bootstrap: str | None,
    state_dir: Path,
    metrics_port: int | None,
    spark_master: str,
    spark_conf: tuple[str, ...],
    executors: int | None,
    executors_from_redis: str | None,
    executors_key: str,
    executors_hold: float,
    control_redis: str | None,
    control_namespace: str,
    fresh_sinks: bool,
) -> None:
    """Join the spec's streams from Kafka with Spark, writing results to its sinks exactly once."""
    bad = [c for c in spark_conf if "=" not in c]
    if bad:
        raise click.BadParameter(f"expected KEY=VALUE, got {bad[0]!r}", param_hint="--spark-conf")
    if (executors or executors_from_redis) and spark_master.startswith("local"):
        raise click.UsageError(f"--executors/--executors-from-redis need a cluster --spark-master, got {spark_master}")
    options = JobProcessOptions(
        available_now=available_now,
        spark_master=spark_master,
        spark_conf=dict(c.split("=", 1) for c in spark_conf),
        metrics_port=metrics_port,
        executors=executors,
        executors_from_redis=executors_from_redis,
        executors_key=executors_key,
        executors_hold_s=executors_hold,
        control_redis=control_redis,
        control_namespace=control_namespace,
        fresh_sinks=fresh_sinks,
    )
    progress = Progress()
    try:
        spec = load_spec(spec_path)
    except SpecError as err:
        raise click.ClickException(str(err)) from None
    bootstrap = resolve_bootstrap(bootstrap, state_dir)
    try:
        job = start_job_process(
            spec,
            bootstrap,
            options,
            on_batch=lambda outcome: click.echo(progress.line(outcome), err=True),
            say=lambda line: click.echo(line, err=True),
        )
    except (JobConfigError, CheckpointLayoutError, SinkOwnerError, OwnerRecordError, RedisAuthError) as err:
        raise click.ClickException(str(err)) from None
    except RedisError as err:
        raise click.ClickException(f"sinks.redis: {err}") from None
    click.echo(f"windjoin: joining {', '.join(s.topic for s in spec.streams.values())} from {bootstrap}", err=True)
    try:
        job.awaitTermination()
    except KeyboardInterrupt:
        click.echo("stopping (the checkpoint keeps the progress)", err=True)
        job.stop()
