"""The public Python API: the four things users do, each one call, over the modules the command line uses.

`join_events` (and its `Joined`) is the in-process join `windjoin join-file` runs on. The others defer their
imports to the call, so `import windjoin` stays cheap and needs neither Spark nor services.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE
from windjoin.operators.spec import JoinSpec, SpecError, load_spec, parse_spec
from windjoin.operators.testing.feed import Joined, join_events

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from windjoin.pipelines.job.job_process import JobProcess

__all__ = ["JoinSpec", "Joined", "SpecError", "join_events", "load_spec", "parse_spec", "query_results", "start_job"]


def start_job(
    spec: JoinSpec,
    bootstrap: str,
    *,
    spark: SparkSession | None = None,
    available_now: bool = False,
    on_batch: Callable[[Any], None] | None = None,
    fresh_sinks: bool = False,
    control_redis: str | None = None,
    control_namespace: str = DEFAULT_NAMESPACE,
    metrics_port: int | None = None,
) -> JobProcess:
    """Start the streaming join job: the spec's Kafka topics at `bootstrap`, its sinks (`sinks:`), exactly once.

    Returns the job (`awaitTermination()`, `stop()`, as Spark's query; Spark's own is `.query`). `spark` defaults
    to a local session with the job's state settings; `available_now` stops once the topics' current records are
    joined; `on_batch` gets each committed batch's outcome; `fresh_sinks` lets a new checkpoint take over sinks
    another one wrote. With a Redis sink the job reports its load for `windjoin controller`; `control_redis`
    applies that controller's decisions (moves with their state, the shed ratio) recorded in its namespace;
    `metrics_port` serves Prometheus metrics. As `windjoin run` does.
    """
    from windjoin.pipelines.job.job_process import JobProcessOptions, start_job_process

    options = JobProcessOptions(
        available_now=available_now,
        fresh_sinks=fresh_sinks,
        control_redis=control_redis,
        control_namespace=control_namespace,
        metrics_port=metrics_port,
    )
    return start_job_process(spec, bootstrap, options, spark=spark, on_batch=on_batch)


def query_results(
    spec: JoinSpec,
    task: str,
    t_from: int,
    t_to: int,
    where: Sequence[str] = (),
    fields: Sequence[str] | None = None,
    page_size: int = 1000,
    namespace: str = DEFAULT_NAMESPACE,
) -> Iterator[dict[str, Any]]:
    """The results of `task` with result time in [t_from, t_to] (epoch ms), read from the spec's sinks (Redis for
    recent batches, Parquet snapshots for older ones) in (result_time, batch_id, row) order, page by page; when
    Redis fails and the spec has Parquet, from Parquet alone (logged as a warning).

    `where`: conditions in the query proxy's language (`"R.k=3"`, `"S.b>=1.5"`, `"R.k in 1,2"`); `fields`: the fields to
    keep. A bad condition or field raises `windjoin.operators.query.errors.BadQuery`. Over HTTP, with tokens and
    limits, the query proxy (`windjoin proxy`) serves the same queries.
    """
    from windjoin.connectors.results.result_pages import result_pages

    for page in result_pages(spec, task, t_from, t_to, where, fields, page_size, namespace):
        yield from page
