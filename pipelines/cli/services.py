"""`windjoin services up|down|status`: the local Kafka broker (Tansu, or Apache Kafka) and Redis for local runs."""

from __future__ import annotations

from pathlib import Path

import click

from windjoin.connectors.local import services as svc
from windjoin.pipelines.cli.options import STATE_DIR_OPTION


def _login(service: svc.RunningService) -> str:
    """Where a client finds the password (the file, never the password itself), if the service has one."""
    return f", password in {service.password_file}" if service.password_file else ""


def _where(service: svc.RunningService) -> str:
    """Its log, and where the password is."""
    return f"log {service.log}{_login(service)}"


def _kind(service: svc.RunningService) -> str:
    """Which broker serves the Kafka slot (nothing for Redis)."""
    return f"{service.broker}, " if service.broker else ""


@click.group("services")
def services() -> None:
    """Start, stop and inspect the local broker and Redis (loopback, free ports)."""


@services.command()
@STATE_DIR_OPTION
@click.option("--kafka/--no-kafka", default=True, show_default=True, help="Start a Kafka broker.")
@click.option(
    "--broker",
    type=click.Choice(svc.BROKERS),
    default=svc.TANSU,
    show_default=True,
    help="tansu: in memory, starts in ~0.1 s; kafka: Apache Kafka (KRaft, topics kept on disk across restarts).",
)
@click.option("--redis/--no-redis", default=True, show_default=True, help="Start redis-server.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True, help="Readiness wait, s.")
def up(state_dir: Path, kafka: bool, broker: str, redis: bool, timeout: float) -> None:
    """Start the services that are not running yet and print their addresses."""
    config = svc.ServicesConfig(state_dir=state_dir, kafka=kafka, broker=broker, redis=redis, ready_timeout_s=timeout)
    try:
        started = svc.up(config)
    except svc.ServiceStartError as exc:
        raise click.ClickException(str(exc)) from exc
    for service, reused in started:
        note = "already running" if reused else "started"
        click.echo(f"{service.name}: {service.url}  ({_kind(service)}pid {service.pid}, {note}, {_where(service)})")


@services.command()
@STATE_DIR_OPTION
@click.option("--grace", type=click.FloatRange(min=0), default=10.0, show_default=True, help="SIGTERM→SIGKILL, s.")
def down(state_dir: Path, grace: float) -> None:
    """Stop the recorded services by PID and forget them."""
    stopped = svc.down(state_dir, grace_s=grace)
    if not stopped:
        click.echo("nothing running")
    for service in stopped:
        click.echo(f"{service.name}: stopped (pid {service.pid})")


@services.command()
@STATE_DIR_OPTION
def status(state_dir: Path) -> None:
    """Show each recorded service; exit code 1 unless at least one is recorded and all answer."""
    statuses = svc.status(state_dir)
    if not statuses:
        click.echo("nothing running")
    for service, running, reachable in statuses:
        state = "reachable" if reachable else ("running, NOT answering" if running else "NOT running")
        click.echo(f"{service.name}: {service.url}  ({_kind(service)}pid {service.pid}, {state}, {_where(service)})")
    if not statuses or not all(s.reachable for s in statuses):
        raise SystemExit(1)
