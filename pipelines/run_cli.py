"""`windjoin run`: the streaming join job on Kafka topics, results to the spec's sinks, with progress."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import numpy as np

from windjoin.operators.spec import JoinSpec, SpecError, load_spec
from windjoin.pipelines.cli_options import BOOTSTRAP_OPTION, SPEC_ARGUMENT, STATE_DIR_OPTION, resolve_bootstrap
from windjoin.pipelines.join_job import STATE_CONF, BatchOutcome, JobConfigError, check_runnable, start_job


def build_sinks(spec: JoinSpec) -> list[Any]:
    """The sinks the spec names (Parquet, Redis), each idempotent per batch id."""
    from windjoin.connectors.parquet_sink import ParquetSink
    from windjoin.connectors.redis_sink import RedisSink

    sinks: list[Any] = []
    if spec.sinks.parquet is not None:
        sinks.append(ParquetSink(spec.sinks.parquet.path))
    if spec.sinks.redis is not None:
        sinks.append(RedisSink(spec.sinks.redis.url, spec.sinks.redis.retain_ms))
    return sinks


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
            p50, p99 = np.percentile(outcome.delays_ms, [50, 99])
            delay = f", delay p50 {p50 / 1000:.2f} s p99 {p99 / 1000:.2f} s"
        slowest = max((s["seconds"] for s in outcome.stats), default=0.0)
        return (
            f"batch {outcome.batch_id}: {outcome.records:,} records, {pairs:,} pairs{rates}{delay}, "
            f"dead letters {outcome.dead}, window {outcome.window_tuples:,} tuples, slowest slot {slowest:.2f} s"
        )


@click.command("run")
@SPEC_ARGUMENT
@click.option("--available-now", is_flag=True, help="Process what the topics hold now, then stop.")
@BOOTSTRAP_OPTION
@STATE_DIR_OPTION
def run(spec_path: Path, available_now: bool, bootstrap: str | None, state_dir: Path) -> None:
    """Join the spec's streams from Kafka with Spark, writing results to its sinks exactly once."""
    try:
        spec = load_spec(spec_path)
        check_runnable(spec)
    except (SpecError, JobConfigError) as err:
        raise click.ClickException(str(err)) from None
    bootstrap = resolve_bootstrap(bootstrap, state_dir)
    from windjoin.connectors.spark_session import build_local_spark

    spark = build_local_spark(app_name="windjoin-join", conf=STATE_CONF)
    sinks = build_sinks(spec)
    progress = Progress()
    query = start_job(
        spark, spec, bootstrap, sinks, available_now, on_batch=lambda o: click.echo(progress.line(o), err=True)
    )
    click.echo(f"windjoin: joining {', '.join(s.topic for s in spec.streams.values())} from {bootstrap}", err=True)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        click.echo("stopping (the checkpoint keeps the progress)", err=True)
        query.stop()
