"""`windjoin run`: the streaming join job on Kafka topics, results to the spec's sinks, with progress."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from windjoin.operators.spec import JoinSpec, SpecError, load_spec
from windjoin.pipelines.join_job import STATE_CONF, BatchOutcome, JobConfigError, check_runnable, start_job
from windjoin.pipelines.producer_cli import _BOOTSTRAP, _STATE_DIR, resolve_bootstrap


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


def describe(outcome: BatchOutcome) -> str:
    rows = sum(s["rows"] for s in outcome.stats)
    pairs = ", ".join(f"{task} {n:,}" for task, n in sorted(outcome.pairs.items())) or "none"
    slowest = max((s["seconds"] for s in outcome.stats), default=0.0)
    window = sum(s["window_tuples"] for s in outcome.stats)
    return (
        f"batch {outcome.batch_id}: {rows:,} records, pairs {pairs}, dead letters {outcome.dead}, "
        f"slowest slot {slowest:.2f} s, window {window:,} tuples"
    )


@click.command("run")
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--available-now", is_flag=True, help="Process what the topics hold now, then stop.")
@_BOOTSTRAP
@_STATE_DIR
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
    query = start_job(
        spark, spec, bootstrap, sinks, available_now, on_batch=lambda o: click.echo(describe(o), err=True)
    )
    click.echo(f"windjoin: joining {', '.join(s.topic for s in spec.streams.values())} from {bootstrap}", err=True)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        click.echo("stopping (the checkpoint keeps the progress)", err=True)
        query.stop()
