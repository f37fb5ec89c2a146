"""Playing the controller in end-to-end tests: record routing decisions the job follows, and run the job with
one injected failure so a batch is replayed from the checkpoint."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from tests.pipelines.pipeline_helpers import parquet_pairs, produce_events, redis_pairs
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.redis.control_decisions import DecisionStore, routing_json
from windjoin.connectors.redis.load_reports import LoadReports
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.control.config import parse_control_config
from windjoin.operators.control.memory import SpillRequest
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.spec import JoinSpec, parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.controller.control_loop import Controller
from windjoin.pipelines.job.join_job import BatchOutcome, ControlSource, start_job
from windjoin.pipelines.job.load_publisher import LoadPublisher


class InProcessControl(NamedTuple):
    """`windjoin controller` stepped in the test's own process, over a Redis namespace of its own."""

    decisions: DecisionStore
    controller: Controller
    publish: LoadPublisher  # the driver's side: publish each batch's load as it ends
    source: ControlSource  # the job's side: follow the decisions


def in_process_control(redis_url: str, control: Mapping[str, Any], partitions: int, slots: int) -> InProcessControl:
    namespace = f"t{uuid.uuid4().hex[:8]}"
    decisions = DecisionStore(redis_url, namespace)
    controller = Controller(
        LoadReports(redis_url, namespace), decisions, parse_control_config(dict(control)), partitions, slots
    )
    publish = LoadPublisher(LoadReports(redis_url, namespace), trigger_s=0.0)
    return InProcessControl(decisions, controller, publish, ControlSource(redis_url, namespace))


def record_routing(
    store: DecisionStore, routing: RoutingTable, shed_ratio: float = 0.0, spill: SpillRequest | None = None
) -> None:
    """A decision as `windjoin controller` records it (the fields the job reads), with an optional spill request."""
    extra = {} if spill is None else {"spill": orjson.dumps(spill.to_json()).decode()}
    store.record(
        {
            **extra,
            "epoch": routing.version,
            "routing_version": routing.version,
            "routing": routing_json(routing),
            "slots": 1 + max(max(routing.holders(p)) for p in range(routing.partitions)),
            "shed_ratio": repr(shed_ratio),
            "sustained_above": 0,
            "sustained_below": 0,
            "load_cursor": "0-0",
        }
    )


def run_with_one_replay(
    spark: SparkSession,
    spec: JoinSpec,
    bootstrap: str,
    sinks: list,
    control: ControlSource,
    after: Callable[[BatchOutcome], None],
    fails: Callable[[BatchOutcome], bool],
) -> tuple[list[BatchOutcome], int]:
    """Run the job on what the topics hold, calling `after(outcome)` after each batch (to record the next
    decision, say). The first batch for which `fails` holds raises after its sinks wrote (the query dies); the
    job restarts from its checkpoint and replays it. Returns every batch outcome seen (the failed batch twice)
    and the failed batch's id."""
    seen: list[BatchOutcome] = []
    failed: list[int] = []

    def on_batch(outcome: BatchOutcome) -> None:
        seen.append(outcome)
        if not failed and fails(outcome):
            failed.append(outcome.batch_id)
            raise RuntimeError("injected failure after the batch's sinks wrote")
        after(outcome)

    query = start_job(spark, spec, bootstrap, sinks, True, on_batch, control)
    with pytest.raises(StreamingQueryException, match="injected failure"):
        query.awaitTermination(timeout=600)
    assert failed, "no batch met the failure condition"
    query = start_job(spark, spec, bootstrap, sinks, True, on_batch, control)
    query.awaitTermination(timeout=600)
    assert query.exception() is None
    assert [o.batch_id for o in seen].count(failed[0]) == 2, "the failed batch was not replayed"
    return seen, failed[0]


def recording(store: DecisionStore, decisions: Mapping[int, RoutingTable]) -> Callable[[BatchOutcome], None]:
    """An `after` for run_with_one_replay: record `decisions[b]` after batch b."""

    def after(outcome: BatchOutcome) -> None:
        if outcome.batch_id in decisions:
            record_routing(store, decisions[outcome.batch_id])

    return after


def run_holder_changes(
    spark: SparkSession,
    spec_dict: dict,
    events: list[dict],
    bootstrap: str,
    redis_url: str,
    folder: Path,
    decisions: Mapping[int, RoutingTable],
    moved: str,
    waves: tuple[Callable[[], None], Callable[[], None]] | None = None,
) -> tuple[list[BatchOutcome], ParquetSink, RedisSink]:
    """Produce `events` and run the job into Parquet and Redis following `decisions`, failing once after the first
    announce batch (one whose slot stats list `moved` groups) and replaying it; the outcomes and both sinks.
    `waves`: more input produced after the events, and after those runs (then the job runs once more, from its
    checkpoint): closers whose event time moves the watermark past every window (`produce_closers`)."""
    produce_events(bootstrap, spec_dict, events)
    if waves is not None:
        waves[0]()
    namespace = f"t{uuid.uuid4().hex[:8]}"
    parquet = ParquetSink(folder / "parquet")
    redis = RedisSink(redis_url, retain_ms=10**12, namespace=namespace)
    spec, control = parse_spec(spec_dict), ControlSource(redis_url, namespace)
    seen, _ = run_with_one_replay(
        spark,
        spec,
        bootstrap,
        [parquet, redis],
        control,
        recording(DecisionStore(redis_url, namespace), decisions),
        fails=lambda outcome: any(s[moved] for s in outcome.stats),
    )
    if waves is not None:
        waves[1]()
        query = start_job(spark, spec, bootstrap, [parquet, redis], True, seen.append, control)
        query.awaitTermination(timeout=600)
        assert query.exception() is None
    return seen, parquet, redis


def assert_sinks_equal_the_oracle(spec_dict: dict, events: list[dict], parquet: ParquetSink, redis: RedisSink) -> None:
    """Both sinks hold exactly the brute-force oracle's pairs (a few hundred at least), none late."""
    expected, late = oracle_join(spec_dict, events)
    assert not late and len(expected) > 300
    assert as_multiset(parquet_pairs(parquet, spec_dict)) == as_multiset(expected)
    assert as_multiset(redis_pairs(redis, spec_dict)) == as_multiset(expected)
