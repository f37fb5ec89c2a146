"""`windjoin sites run STATS.yaml` (a whole distributed run) and `windjoin sites site PLAN.json --site NAME`."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import click
import orjson
import yaml
from pydantic import ValidationError

from windjoin.connectors.kafka.security import PLAINTEXT, KafkaSecurity, KafkaSecurityError
from windjoin.connectors.local import services as svc
from windjoin.operators.pmjoin.execution import ExecutionError, ExecutionPlan
from windjoin.operators.pmjoin.stats import StatsError
from windjoin.operators.spec import KafkaSpec
from windjoin.pipelines.cli.options import BOOTSTRAP_ENV
from windjoin.pipelines.sites.driver import SitesRunConfig, SitesRunError, run_sites, stats_security
from windjoin.pipelines.sites.site import SiteConfig, SiteError, run_site

_BOOTSTRAP = click.option(
    "--bootstrap",
    metavar="HOST:PORT",
    envvar=BOOTSTRAP_ENV,
    help=f"Kafka bootstrap servers (default: env {BOOTSTRAP_ENV}; `run` starts an embedded broker without either).",
)
_TIMEOUT = click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=240,
    show_default=True,
    help="Seconds a site may run before it gives up (the run stops every site then).",
)


def load_kafka_config(path: Path) -> KafkaSecurity:
    """A YAML file holding the spec's `kafka:` section (its keys at the top level), validated like the spec's."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return KafkaSecurity.from_spec(KafkaSpec.model_validate(data or {}))
    except (OSError, yaml.YAMLError) as err:
        raise click.BadParameter(f"{path}: {err}", param_hint="--kafka-config") from None
    except ValidationError as err:
        problems = "; ".join(
            f"kafka.{'.'.join(map(str, e['loc'])) or '<section>'}: {e['msg']}" for e in err.errors(include_url=False)
        )
        raise click.BadParameter(f"{path}: {problems}", param_hint="--kafka-config") from None


@click.group("sites")
def sites() -> None:
    """Run a PMJoin plan distributed over site processes (Kafka topics between them)."""


@sites.command("site")
@click.argument("plan_path", metavar="PLAN.json", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--site", "site_name", required=True, help="Which node of the plan this process is.")
@_BOOTSTRAP
@click.option("--prefix", required=True, help="Topic prefix: <prefix>.src.<stream>, <prefix>.site.<site>.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@_TIMEOUT
@click.option(
    "--batch", type=click.IntRange(min=1), default=500, show_default=True, help="Messages consumed per join step."
)
@click.option(
    "--kafka-config",
    "kafka_config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML with the spec's `kafka:` section (TLS / SASL of the site's clients; `run` writes it).",
)
def site_command(
    plan_path: Path,
    site_name: str,
    bootstrap: str | None,
    prefix: str,
    out_dir: Path,
    timeout_s: float,
    batch: int,
    kafka_config: Path | None,
):
    """One site: consume local source topics and this site's inter-site topic, run its joins, ship the rest.

    Writes <out>/<site>.results.jsonl and <out>/<site>.report.json (bytes crossing sites per link and edge).
    """
    if not bootstrap:
        raise click.UsageError("--bootstrap HOST:PORT is required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = ExecutionPlan.from_dict(orjson.loads(plan_path.read_bytes()))
    if site_name not in plan.sites:
        raise click.BadParameter(
            f"{site_name!r} is not a site of the plan (sites: {list(plan.sites)})", param_hint="--site"
        )
    security = PLAINTEXT if kafka_config is None else load_kafka_config(kafka_config)
    config = SiteConfig(bootstrap, prefix, out_dir, timeout_s, consume_batch=batch, security=security)
    try:
        run_site(plan, site_name, config)
    except SiteError as err:
        raise click.ClickException(str(err)) from None


@sites.command("run")
@click.argument("stats_path", metavar="STATS.yaml", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_BOOTSTRAP
@click.option(
    "--span", "span_s", type=click.FloatRange(min=1), default=300, show_default=True, help="Event-time seconds."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("out/sites"), show_default=True
)
@_TIMEOUT
@click.option(
    "--method",
    type=click.Choice(["none", "value", "hash", "range", "rate"]),
    help="Override planner.partitioning.method (none: the unpartitioned plan).",
)
@click.option("--partitions", type=click.IntRange(min=1), help="Override planner.partitioning.partitions.")
@click.option("--json", "as_json", is_flag=True, help="Print the run report as JSON.")
def run_command(
    stats_path: Path,
    bootstrap: str | None,
    span_s: float,
    seed: int,
    out_dir: Path,
    timeout_s: float,
    method: str | None,
    partitions: int | None,
    as_json: bool,
):
    """Plan STATS, generate its workload, run every site as a process, compare traffic with the plan's cost.

    Without --bootstrap (or WINDJOIN_KAFKA_BOOTSTRAP) an embedded broker is started for the run and stopped after.
    STATS' `kafka:` section (the join spec's: security_protocol, sasl_mechanism, username, password_file or
    password_env, ca_file) applies to every client of the run: topic creation, the producer, each site's.
    """
    state_dir = None
    try:
        security = stats_security(stats_path)
        if not bootstrap and security != PLAINTEXT:
            raise click.UsageError(
                f"kafka.security_protocol {security.security_protocol} needs --bootstrap HOST:PORT of a broker "
                "that speaks it (the embedded broker started without one is PLAINTEXT)"
            )
        if not bootstrap:
            state_dir = Path(tempfile.mkdtemp(prefix="windjoin-sites-"))
            [started] = svc.up(svc.ServicesConfig(state_dir=state_dir, redis=False))
            bootstrap = started.service.url
        config = SitesRunConfig(
            stats_path,
            bootstrap,
            out_dir,
            span_s,
            seed,
            timeout_s=timeout_s,
            method=method,
            partitions=partitions,
            security=security,
        )
        report = run_sites(config)
    except (StatsError, ExecutionError, SitesRunError, KafkaSecurityError) as err:
        raise click.ClickException(str(err)) from None
    finally:
        if state_dir is not None:
            svc.down(state_dir)
    if as_json:
        click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        return
    click.echo(summary(report))


def summary(report: dict) -> str:
    cost = report["cost"]
    lines = [
        f"plan: {report['stats']}  span {report['span_s']:g} s of event time  events {report['events']}",
        f"communication cost (planner units/s): predicted {cost['predicted_cost']:.4g}  measured "
        f"{cost['measured_cost']:.4g}  ratio {cost['ratio']:.3f}",
    ]
    for link, v in cost["links"].items():
        per = v.get("encoded_bytes_per_tuple")
        lines.append(
            f"  {link}: predicted {v['predicted_units_per_s']:.4g}  measured {v['measured_units_per_s']:.4g}  "
            f"({v['tuples']} tuples, {v.get('encoded_bytes', 0)} B encoded"
            + (f", {per:.0f} B/tuple" if per else "")
            + f", {v.get('watermark_messages', 0)} watermark messages)"
        )
    ref = report.get("equals_centralized_mjoin")
    ref_text = "" if ref is None else f"; equal to a centralized MJoin ({report['reference_results']}): {ref}"
    lines.append(f"results: {report['results']} {report['results_per_site']}{ref_text}")
    lines.append(f"wall: {report['wall_s']['total']:.1f} s (sites {report['wall_s']['sites']:.1f} s)")
    return "\n".join(lines)


if __name__ == "__main__":  # the driver starts sites this way: only the sites' own modules are imported
    sites()
