"""Command-line pieces shared by windjoin's commands: the spec argument, where services are, which broker."""

from __future__ import annotations

from pathlib import Path

import click

from windjoin.connectors.local import services as svc
from windjoin.operators.spec import JoinSpec, SpecError, load_spec

BOOTSTRAP_ENV = "WINDJOIN_KAFKA_BOOTSTRAP"

SPEC_ARGUMENT = click.argument(
    "spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
BOOTSTRAP_OPTION = click.option(
    "--bootstrap",
    metavar="HOST:PORT",
    envvar=BOOTSTRAP_ENV,
    help=f"Kafka bootstrap servers (default: env {BOOTSTRAP_ENV}, else the broker of `windjoin services up`).",
)
STATE_DIR_OPTION = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=svc.DEFAULT_STATE_DIR,
    show_default=True,
    envvar="WINDJOIN_SERVICES_DIR",
    help="Where `windjoin services up` records PIDs, ports and logs (env WINDJOIN_SERVICES_DIR).",
)


def load_spec_or_fail(spec_path: Path) -> JoinSpec:
    """The validated spec, or a click error listing every problem by key."""
    try:
        return load_spec(spec_path)
    except SpecError as err:
        raise click.ClickException(str(err)) from None


def resolve_bootstrap(explicit: str | None, state_dir: Path) -> str:
    """The broker to use: `explicit` (option or env), else the running broker recorded by `services up`."""
    if explicit:
        return explicit
    kafka = [s for s in svc.status(state_dir) if s.service.name == svc.KAFKA]
    how = (
        f"pass --bootstrap HOST:PORT, set {BOOTSTRAP_ENV}, or start a local broker with "
        f"`windjoin services up --state-dir {state_dir}`"
    )
    if not kafka:
        raise click.UsageError(f"no Kafka broker: none is recorded in {state_dir}; {how}")
    service, running, reachable = kafka[0]
    if not reachable:
        state = "is not answering" if running else "is not running"
        raise click.UsageError(f"the broker recorded in {state_dir} ({service.url}, pid {service.pid}) {state}; {how}")
    return service.url
