"""`windjoin controller`: the control loop over a job's load reports, one decision per epoch, with metrics."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import click
import yaml

from windjoin.operators.control.config import ControlConfig, ControlConfigError, parse_control_config
from windjoin.operators.spec import JoinSpec
from windjoin.operators.spec_support import CONTROLLER_CUTS, refusals
from windjoin.pipelines.cli.options import (
    BOOTSTRAP_OPTION,
    SPEC_ARGUMENT,
    STATE_DIR_OPTION,
    load_spec_or_fail,
    resolve_bootstrap,
)


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


def start_leader_election(
    name: str, namespace: str, identity: str, duration_s: float, deadline_s: float, retry_s: float
) -> Any:
    """A running LeaderLoop on the Lease `namespace/name` (transitions echoed), or a click error."""
    from windjoin.pipelines.controller import leader_election as le

    try:
        config = le.LeaseConfig(name, namespace, identity, duration_s, deadline_s, retry_s)
    except le.LeaseConfigError as err:
        raise click.UsageError(f"leader election: {err}") from None
    try:
        api = le.kube_lease_api()
    except Exception as err:  # no in-cluster service account and no kubeconfig
        raise click.ClickException(f"leader election needs the Kubernetes API: {err}") from None

    def on_change(leading: bool) -> None:
        where = f"lease {namespace}/{name}"
        click.echo(
            f"leader election: {identity} leads ({where}): running epochs"
            if leading
            else f"leader election: {identity} is standby ({where}): no epochs",
            err=True,
        )

    click.echo(f"leader election: {identity} is a candidate for lease {namespace}/{name}", err=True)
    return le.LeaderLoop(le.LeaderElector(api, config), on_change=on_change).start()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@click.command("controller")
@SPEC_ARGUMENT
@click.option("--once", is_flag=True, help="Decide one epoch over the reports published so far, then exit.")
@click.option(
    "--clean-up",
    "clean_up",
    is_flag=True,
    help="Record a request to merge every partition's generations on disk (memory adaptation's clean-up at the end "
    "of a bounded run: the job emits the missing pairs in its next batch), then exit.",
)
@click.option(
    "--epoch-s", type=click.FloatRange(min=0.1), default=20.0, show_default=True, help="Reorganisation epoch length."
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Controller thresholds (YAML sections: reorganisation, declustering, utilisation, shedding, fine_tuning, "
    "hot, memory, scaling).",
)
@click.option("--redis-url", help="Redis holding the load reports (default: the spec's Redis sink).")
@BOOTSTRAP_OPTION
@STATE_DIR_OPTION
@click.option("--namespace", default="windjoin", show_default=True, help="Key namespace of the job's Redis keys.")
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    envvar="WINDJOIN_CONTROLLER_METRICS_PORT",
    help="Serve the controller's Prometheus metrics on this port (/metrics); off by default.",
)
@click.option(
    "--leader-election",
    is_flag=True,
    envvar="WINDJOIN_LEADER_ELECTION",
    help="Run epochs only while holding a Kubernetes Lease (one active controller among replicas).",
)
@click.option(
    "--lease-name",
    default="windjoin-controller",
    show_default=True,
    envvar="WINDJOIN_LEASE_NAME",
    help="Name of the Lease (coordination.k8s.io/v1).",
)
@click.option(
    "--lease-namespace",
    default="default",
    show_default=True,
    envvar="POD_NAMESPACE",
    help="Namespace of the Lease [env POD_NAMESPACE].",
)
@click.option(
    "--lease-identity",
    default=socket.gethostname,
    show_default="the host name",
    envvar="POD_NAME",
    help="This candidate's holderIdentity [env POD_NAME].",
)
@click.option(
    "--lease-duration",
    type=click.IntRange(1),
    default=15,
    show_default=True,
    help="Seconds without renewal after which a standby takes the Lease over.",
)
@click.option(
    "--lease-renew-deadline",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds the leader keeps leading without a successful renewal before it steps down.",
)
@click.option(
    "--lease-retry-period",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="Seconds between attempts to acquire or renew the Lease.",
)
def controller(
    spec_path: Path,
    once: bool,
    clean_up: bool,
    epoch_s: float,
    config_path: Path | None,
    redis_url: str | None,
    bootstrap: str | None,
    state_dir: Path,
    namespace: str,
    metrics_port: int | None,
    leader_election: bool,
    lease_name: str,
    lease_namespace: str,
    lease_identity: str,
    lease_duration: int,
    lease_renew_deadline: float,
    lease_retry_period: float,
) -> None:
    """Each epoch, turn the join job's load reports into a decision (routing moves, slot count, shed ratio),
    recorded in Redis. With --leader-election, only the replica holding the Lease runs epochs; a standby that
    becomes leader resumes from the latest recorded decision. With --once, a candidate waits up to two lease
    durations to lead and fails if it does not."""
    spec = load_spec_or_fail(spec_path)
    config = load_control_config(config_path)
    refuse_cuts(spec, config, spec_path, config_path)
    if redis_url is None:
        if spec.sinks.redis is None:
            raise click.UsageError("the spec has no Redis sink: pass --redis-url")
        redis_url = spec.sinks.redis.url
    from windjoin.connectors.redis.client import spec_auth
    from windjoin.connectors.redis.control_decisions import DecisionStore
    from windjoin.connectors.redis.load_reports import LoadReports
    from windjoin.pipelines.controller.control_loop import Controller, EpochFailed
    from windjoin.pipelines.controller.metrics import ControllerMetrics

    try:
        auth = spec_auth(spec.sinks.redis)
        reports = LoadReports(redis_url, namespace, auth=auth)
        decisions = DecisionStore(redis_url, namespace, auth=auth)
    except ValueError as err:
        raise click.ClickException(str(err)) from None

    arrivals = None
    if config.utilisation.measure == "arrivals":  # tau from the records added to the input topics
        from windjoin.connectors.kafka.arrivals import KafkaArrivals
        from windjoin.connectors.kafka.security import KafkaSecurity

        topics = [s.topic for s in spec.streams.values() if s.topic]
        arrivals = KafkaArrivals(
            resolve_bootstrap(bootstrap, state_dir), topics, security=KafkaSecurity.from_spec(spec.kafka)
        )

    def resume() -> Controller:
        """A controller resuming from the latest recorded decision (at start, and each time we become leader:
        another replica may have decided epochs meanwhile)."""
        try:
            return Controller(
                reports,
                decisions,
                config,
                spec.partitions,
                spec.slots,
                arrivals=arrivals,
                on_skip=metrics.skipped_report,
                on_fail=metrics.failed_epoch,
            )
        except ValueError as err:
            raise click.ClickException(str(err)) from None

    metrics = ControllerMetrics()
    control = None if leader_election else resume()
    if metrics_port is not None:
        metrics.serve(metrics_port)
        click.echo(f"windjoin controller: metrics on :{metrics_port}/metrics", err=True)
    election = None
    if leader_election:
        election = start_leader_election(
            lease_name, lease_namespace, lease_identity, lease_duration, lease_renew_deadline, lease_retry_period
        )
    metrics.leader.set(0 if leader_election else 1)
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if on_main else None  # a pod stops by SIGTERM: release
    standby_since, term = time.monotonic(), 0
    try:
        while True:
            started = time.monotonic()
            if election is not None and not election.is_leader():
                control = None
                metrics.leader.set(0)
                if once and started - standby_since > 2 * lease_duration:
                    holder = election.elector.holder or "nobody"
                    raise click.ClickException(f"not the leader after {2 * lease_duration} s (lease held by {holder})")
                time.sleep(lease_retry_period if once else min(lease_retry_period, epoch_s))
                continue
            if election is not None and election.elector.term != term:
                control, term = None, election.elector.term  # led again after a gap (maybe unseen while asleep)
            if control is None:
                control = resume()
                metrics.leader.set(1)
            if clean_up:
                request = control.request_cleanup()
                click.echo(f"epoch {request.version}: clean-up of every partition's generations requested")
                return
            outcome = control.step()
            if outcome is None:
                click.echo(f"epoch {control.state.epoch + 1}: no load reports since the last epoch, no decision")
            elif isinstance(outcome, EpochFailed):
                click.echo(outcome.line(), err=True)
            else:
                metrics.observe(outcome)
                click.echo(outcome.line())
            if once:
                return
            time.sleep(max(0.0, epoch_s - (time.monotonic() - started)))
    except KeyboardInterrupt:
        click.echo("controller stopped (the last decision stays recorded)", err=True)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if election is not None:
            released = election.stop()
            click.echo(f"leader election: lease {'released' if released else 'not held'}", err=True)
        reports.close()
        decisions.close()


def refuse_cuts(spec: JoinSpec, config: ControlConfig, spec_path: Path, config_path: Path | None) -> None:
    """Refuse, before any decision, a switch that cuts state in a way the job cannot follow on this spec
    (`operators.spec_support`): spreads and mini-groups cut a partition's window over slots, disk pushes cut it in
    generations."""
    switches = {"hot.spread": config.hot.spread, "fine_tuning.enabled": config.fine_tuning.enabled}
    switches["memory.enabled"] = config.memory.enabled
    for key, cut in CONTROLLER_CUTS.items():
        why = refusals(spec, cut) if switches[key] else None
        if why and why.shape:
            raise click.UsageError(
                f"{config_path}: {key}: true needs two-stream tasks over a time window ({spec_path}: {why}); "
                "accepted here: false"
            )
        if why:
            raise click.UsageError(
                f"{config_path}: {key}: true cuts a partition's tuples over slots or onto disk, which {spec_path} "
                f"cannot follow ({why}); accepted here: false (moves and splits are fine)"
            )
