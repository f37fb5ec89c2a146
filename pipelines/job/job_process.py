"""The join job as a process: the start checked before Spark starts, then the streaming query with what runs
beside it: load reports for the controller, the controller's decisions, the executor count it asks for, and
Prometheus metrics. `windjoin run` and `windjoin.start_job` both start it here; the CLI only parses options."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from windjoin.connectors.redis.client import RedisAuth, spec_auth
from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.control_feed import RefusalCounts, refusals_path
from windjoin.pipelines.job.executor_scaling import DEFAULT_REDIS_KEY, executor_count, start_following
from windjoin.pipelines.job.join_job import (
    BATCH_RUNNING,
    STATE_CONF,
    BatchOutcome,
    ControlSource,
    JobConfigError,
    check_start,
    start_query,
)
from windjoin.pipelines.job.sinks import bind_job_broker, build_sinks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from windjoin.pipelines.job.executor_scaling import ExecutorFollower


@dataclass(frozen=True)
class JobProcessOptions:
    """How the job runs beside its spec (the `windjoin run` options); checked when built."""

    available_now: bool = False
    spark_master: str = "local[2]"
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    metrics_port: int | None = None
    executors: int | None = None  # keep this many executors (a cluster master)
    executors_from_redis: str | None = None  # follow the controller's desired count in this Redis
    executors_key: str = DEFAULT_REDIS_KEY
    executors_hold_s: float = 30.0
    control_redis: str | None = None  # apply the controller's decisions recorded in this Redis
    control_namespace: str = DEFAULT_NAMESPACE
    fresh_sinks: bool = False

    def __post_init__(self) -> None:
        if (self.executors or self.executors_from_redis) and self.spark_master.startswith("local"):
            raise JobConfigError(
                f"executors / executors_from_redis need a cluster spark_master, got {self.spark_master}"
            )


class JobProcess:
    """A started job: Spark's query and the parts beside it, stopped together. `awaitTermination` and `stop`
    are the calls of Spark's StreamingQuery (`query`), so a caller of either treats them alike."""

    def __init__(self, query: Any, follower: ExecutorFollower | None) -> None:
        self.query = query
        self.follower = follower

    def awaitTermination(self, timeout: float | None = None) -> bool | None:  # noqa: N802 (Spark's name)
        try:
            ended = self.query.awaitTermination(timeout) if timeout is not None else self.query.awaitTermination()
        except BaseException:
            self._stop_beside()
            raise
        if not self.query.isActive:
            self._stop_beside()
        return ended

    def stop(self) -> None:
        try:
            self.query.stop()
        finally:
            self._stop_beside()

    def _stop_beside(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None


def start_job_process(
    spec: JoinSpec,
    bootstrap: str,
    options: JobProcessOptions = JobProcessOptions(),  # noqa: B008 (frozen)
    *,
    spark: SparkSession | None = None,
    on_batch: Callable[[BatchOutcome], None] | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> JobProcess:
    """Check the start, then start Spark (`spark`, or a session at `options.spark_master`) and the job.

    Raises what the checks raise (`JobConfigError`, `CheckpointLayoutError`, `SinkOwnerError`, Redis errors) before
    Spark starts. A start that fails after Spark started stops the executor follower and the session it built (not
    a session the caller passed), then raises. `say` gets the notices a user should see (sinks cleared or adopted,
    executors changed, where the metrics are)."""
    sinks = build_sinks(spec)
    bind_job_broker(sinks, bootstrap)  # a Kafka sink without its own bootstrap writes to the job's broker
    for line in check_start(spec, sinks, options.fresh_sinks):
        say(line)
    built = spark is None
    if spark is None:
        from windjoin.connectors.spark.session import build_local_spark

        spark = build_local_spark(
            app_name="windjoin-join", master=options.spark_master, conf={**STATE_CONF, **options.spark_conf}
        )
    auth = spec_auth(spec.sinks.redis)
    follower: ExecutorFollower | None = None
    try:
        follower = _follow_executors(spark, options, auth, say)
        query = start_query(
            spark,
            spec,
            bootstrap,
            sinks,
            options.available_now,
            _observers(spec, spark, options, auth, on_batch, say),
            _control(spec, options, auth),
        )
    except BaseException:
        if follower is not None:
            follower.stop()
        if built:
            spark.stop()
        raise
    return JobProcess(query, follower)


def _follow_executors(
    spark: SparkSession, options: JobProcessOptions, auth: RedisAuth, say: Callable[[str], None]
) -> ExecutorFollower | None:
    """Follow a fixed or the controller's executor count (None: neither asked)."""
    try:
        return start_following(
            spark.sparkContext,
            options.executors,
            options.executors_from_redis,
            options.executors_key,
            options.executors_hold_s,
            on_change=lambda target, live, killed: say(
                f"executors: target {target}, live {len(live)} {live}" + (f", killing {killed}" if killed else "")
            ),
            auth=auth,
            between_batches=BATCH_RUNNING,
        )
    except ValueError as err:  # a local master, or dynamic allocation on
        raise JobConfigError(str(err)) from None


def _observers(
    spec: JoinSpec,
    spark: SparkSession,
    options: JobProcessOptions,
    auth: RedisAuth,
    on_batch: Callable[[BatchOutcome], None] | None,
    say: Callable[[str], None],
) -> Callable[[BatchOutcome], None]:
    """What each batch's outcome goes to: the caller's `on_batch`, the metrics, the controller's load reports."""
    observers = [on_batch] if on_batch is not None else []
    if options.metrics_port is not None:
        observers.append(_serve_metrics(spec, spark, options, say))
    if spec.sinks.redis is not None:  # per-slot and per-partition load for `windjoin controller`
        from windjoin.connectors.redis.load_reports import LoadReports
        from windjoin.pipelines.job.load_publisher import LoadPublisher

        trigger_s = 0.0 if options.available_now else spec.trigger_ms / 1000
        observers.append(LoadPublisher(LoadReports(spec.sinks.redis.url, auth=auth), trigger_s))

    def observe(outcome: BatchOutcome) -> None:
        for observer in observers:
            observer(outcome)

    return observe


def _control(spec: JoinSpec, options: JobProcessOptions, auth: RedisAuth) -> ControlSource | None:
    """The controller's decisions to follow, when `options.control_redis` names them."""
    if not options.control_redis:
        return None
    return ControlSource(options.control_redis, options.control_namespace, auth, refusals_path(spec))


def _serve_metrics(
    spec: JoinSpec, spark: SparkSession, options: JobProcessOptions, say: Callable[[str], None]
) -> Callable[[BatchOutcome], None]:
    """Serve the job's Prometheus metrics on `options.metrics_port`; returns what observes each batch."""
    from windjoin.pipelines.job.job_metrics import JobMetrics

    sc = spark.sparkContext
    metrics = JobMetrics(
        streams=list(spec.streams),
        tasks=[t.name for t in spec.tasks],
        executors=lambda: executor_count(sc),
        refused=RefusalCounts(refusals_path(spec)).read if options.control_redis else None,
    )
    metrics.serve(options.metrics_port)
    say(f"windjoin: metrics on :{options.metrics_port}/metrics")
    return metrics.observe
