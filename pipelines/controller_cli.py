"""`windjoin controller`: the control loop over a job's load reports, one decision per epoch, with metrics."""

from __future__ import annotations

import time
from pathlib import Path

import click
import yaml

from windjoin.operators.control.config import ControlConfig, ControlConfigError, parse_control_config
from windjoin.pipelines.cli_options import SPEC_ARGUMENT, load_spec_or_fail


def load_control_config(path: Path | None) -> ControlConfig:
    """The controller's thresholds from a YAML file (the defaults without one), or a click error naming the keys."""
    if path is None:
        return parse_control_config({})
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise click.ClickException(f"{path}: not YAML: {err}") from None
    try:
        return parse_control_config(data)
    except ControlConfigError as err:
        raise click.ClickException(f"{path}:\n{err}") from None


@click.command("controller")
@SPEC_ARGUMENT
@click.option("--once", is_flag=True, help="Decide one epoch over the reports published so far, then exit.")
@click.option(
    "--epoch-s", type=click.FloatRange(min=0.1), default=20.0, show_default=True, help="Reorganisation epoch length."
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Controller thresholds (YAML: reorganisation, declustering, utilisation, shedding, fine_tuning, scaling).",
)
@click.option("--redis-url", help="Redis holding the load reports (default: the spec's Redis sink).")
@click.option("--namespace", default="windjoin", show_default=True, help="Key namespace of the job's Redis keys.")
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    envvar="WINDJOIN_CONTROLLER_METRICS_PORT",
    help="Serve the controller's Prometheus metrics on this port (/metrics); off by default.",
)
def controller(
    spec_path: Path,
    once: bool,
    epoch_s: float,
    config_path: Path | None,
    redis_url: str | None,
    namespace: str,
    metrics_port: int | None,
) -> None:
    """Each epoch, turn the join job's load reports into a decision (routing moves, slot count, shed ratio),
    recorded in Redis. The job does not apply decisions yet."""
    spec = load_spec_or_fail(spec_path)
    config = load_control_config(config_path)
    if redis_url is None:
        if spec.sinks.redis is None:
            raise click.UsageError("the spec has no Redis sink: pass --redis-url")
        redis_url = spec.sinks.redis.url
    from windjoin.connectors.control_decisions import DecisionStore
    from windjoin.connectors.load_reports import LoadReports
    from windjoin.pipelines.controller import Controller
    from windjoin.pipelines.controller_metrics import ControllerMetrics

    try:
        reports, decisions = LoadReports(redis_url, namespace), DecisionStore(redis_url, namespace)
        control = Controller(reports, decisions, config, spec.partitions, spec.slots)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    metrics = ControllerMetrics()
    if metrics_port is not None:
        metrics.serve(metrics_port)
        click.echo(f"windjoin controller: metrics on :{metrics_port}/metrics", err=True)
    try:
        while True:
            started = time.monotonic()
            outcome = control.step()
            if outcome is None:
                click.echo(f"epoch {control.state.epoch + 1}: no load reports since the last epoch, no decision")
            else:
                metrics.observe(outcome)
                click.echo(outcome.line())
            if once:
                return
            time.sleep(max(0.0, epoch_s - (time.monotonic() - started)))
    except KeyboardInterrupt:
        click.echo("controller stopped (the last decision stays recorded)", err=True)
    finally:
        reports.close()
        decisions.close()
