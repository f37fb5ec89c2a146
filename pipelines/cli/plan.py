"""`windjoin plan STATS.yaml`: the PMJoin planner on a STATS file, as text or JSON."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click
import orjson

from windjoin.operators.pmjoin.model import RateModel
from windjoin.operators.pmjoin.planner import PlannerOptions, plan_query
from windjoin.operators.pmjoin.render import report_text, report_to_dict
from windjoin.operators.pmjoin.stats import StatsError, load_stats


@click.command("plan")
@click.argument("stats_path", metavar="STATS.yaml", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the plan and its costs as JSON.")
@click.option(
    "--method",
    type=click.Choice(["none", "value", "hash", "range", "rate"]),
    help="Override planner.partitioning.method.",
)
@click.option("--partitions", type=click.IntRange(min=1), help="Override planner.partitioning.partitions.")
def plan(stats_path: Path, as_json: bool, method: str | None, partitions: int | None) -> None:
    """Plan a distributed multi-way window join (PMJoin) from rates, windows and value histograms.

    Prints which MJoin runs on which node, which stream (or substream) is shipped where, and the communication
    cost in bytes/s, next to the unpartitioned, Simple and best centralized plans.
    """
    try:
        query, options = load_stats(stats_path)
    except StatsError as err:
        raise click.ClickException(str(err)) from None
    how = options.partitioning
    if method is not None or partitions is not None:
        how = replace(how, method=method or how.method, partitions=partitions or how.partitions)
        options = PlannerOptions(how, options.optimal_max_streams)
    report = plan_query(query, options)
    model = RateModel(query)
    if as_json:
        click.echo(orjson.dumps(report_to_dict(report, model), option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(report_text(report, model))
