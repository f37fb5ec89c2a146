"""The `windjoin` command line."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson
import yaml

from windjoin.operators.spec import load_spec
from windjoin.operators.workloads.band import BAND_SPEC, band_events
from windjoin.pipelines.cli.bench import bench
from windjoin.pipelines.cli.controller import controller
from windjoin.pipelines.cli.join_file import DEFAULT_CHUNK, JoinFileReport, Refusal, default_workers, join_file
from windjoin.pipelines.cli.options import SPEC_ARGUMENT, load_spec_or_fail
from windjoin.pipelines.cli.plan import plan
from windjoin.pipelines.cli.produce import generate, produce
from windjoin.pipelines.cli.proxy import proxy
from windjoin.pipelines.cli.query import query
from windjoin.pipelines.cli.redis_acl import redis_acl
from windjoin.pipelines.cli.redis_functions import redis_functions
from windjoin.pipelines.cli.run import run
from windjoin.pipelines.cli.services import services
from windjoin.pipelines.cli.sites import sites
from windjoin.pipelines.cli.worker_pool import WorkerError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """windjoin: distributed sliding-window stream joins."""


for command in (services, produce, generate, run, proxy, query):
    cli.add_command(command)
cli.add_command(plan)
cli.add_command(controller)
cli.add_command(sites)
cli.add_command(bench)
cli.add_command(redis_acl)
cli.add_command(redis_functions)


@cli.command("join-file")
@SPEC_ARGUMENT
@click.argument("events", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), help="Results file (default: stdout).")
@click.option(
    "--dead-letter",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write refused lines (line, reason, detail, raw) to this JSON Lines file.",
)
@click.option(
    "--chunk-size",
    type=click.IntRange(min=1),
    default=DEFAULT_CHUNK,
    show_default=True,
    help="Lines decoded, and events each worker joins, per vectorised step; results do not depend on it.",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: on a terminal).")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=default_workers,
    show_default="this machine's cores",
    help="Processes that decode and join hash partitions of the events (1: all in this process); the results, "
    "their order and the refusals do not depend on it. A join that cannot be split exactly runs on one.",
)
def join_file_command(
    spec_path: Path,
    events: Path,
    out: Path | None,
    dead_letter: Path | None,
    chunk_size: int,
    progress: bool | None,
    workers: int,
) -> None:
    """Join the events of a JSON Lines file (one event per line, in arrival order) as SPEC says.

    Each result line is {"task": NAME, "<stream>": {fields...}, "<stream>": {fields...}}. A bad line is
    reported on stderr with its line number and reason, and the run goes on.
    """
    spec = load_spec_or_fail(spec_path)
    report = _run_join_file(spec, events, out, dead_letter, chunk_size, progress, workers)
    _print_summary(report, out)


@cli.command("demo")
@click.option("--rate", type=click.FloatRange(min=1), default=2000, show_default=True, help="Events/s per stream.")
@click.option("--duration", type=click.FloatRange(min=1), default=60, show_default=True, help="Seconds of load.")
@click.option("--keys", type=click.IntRange(min=1), default=5000, show_default=True, help="Join-key values.")
@click.option(
    "--out-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("out/demo"), show_default=True
)
@click.option("--offline", is_flag=True, help="No services or Spark: join-file over generated band-join events.")
@click.option(
    "--events",
    "n_events",
    type=click.IntRange(min=2),
    default=40_000,
    show_default=True,
    help="With --offline: how many events.",
)
def demo(rate: float, duration: float, keys: int, out_dir: Path, offline: bool, n_events: int) -> None:
    """Run windjoin on this machine: local broker and Redis, generated load, the streaming Spark join."""
    if offline:
        _offline_demo(n_events, out_dir)
        return
    from windjoin.pipelines.cli.demo import run_demo

    run_demo(out_dir, rate, duration, keys)


def _offline_demo(n_events: int, out_dir: Path) -> None:
    """Band join of the SplitJoin benchmark workload on generated events, through join-file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path, events_path = out_dir / "spec.yaml", out_dir / "events.jsonl"
    spec_path.write_text(yaml.safe_dump(BAND_SPEC, sort_keys=False))
    with events_path.open("wb") as f:
        for event in band_events(n_events):
            f.write(orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE))
    click.echo(f"spec: {spec_path}\nevents: {events_path} ({n_events} events)", err=True)
    results = out_dir / "results.jsonl"
    report = _run_join_file(load_spec(spec_path), events_path, results, None, DEFAULT_CHUNK, None, default_workers())
    _print_summary(report, results)


def _run_join_file(spec, events, out, dead_letter, chunk_size, progress, workers) -> JoinFileReport:
    dl_file = dead_letter.open("wb") if dead_letter else None

    def on_refusal(refusal: Refusal) -> None:
        click.echo(f"{events}:{refusal.line}: {refusal.reason}: {refusal.detail}", err=True)
        if dl_file:
            dl_file.write(orjson.dumps(refusal.__dict__, option=orjson.OPT_APPEND_NEWLINE))

    try:
        if out is None:
            return join_file(spec, events, sys.stdout.buffer, on_refusal, chunk_size, progress, workers)
        with out.open("wb") as sink:
            return join_file(spec, events, sink, on_refusal, chunk_size, progress, workers)
    except WorkerError as err:
        raise click.ClickException(str(err)) from None
    finally:
        if dl_file:
            dl_file.close()


def _print_summary(report: JoinFileReport, out: Path | None) -> None:
    rate = report.events / report.seconds if report.seconds else 0.0
    lines = [f"{report.events} events, {report.results} results in {report.seconds:.2f} s ({rate:,.0f} events/s)"]
    if report.refused:
        lines.append("refused: " + ", ".join(f"{reason} {n}" for reason, n in sorted(report.refused.items())))
    for name, t in report.tasks.items():
        lines.append(
            f"task {name}: in {sum(t['tuples_in'].values())}, comparisons {t['comparisons']}, outputs {t['outputs']}, "
            f"P={t['efficiency']:.3f}, production delay p50 {t['delay_p50_ms']:.1f} ms p99 {t['delay_p99_ms']:.1f} ms"
        )
    if out is not None:
        lines.append(f"results: {out}")
    click.echo("\n".join(lines), err=True)


def main() -> None:
    cli()
