"""Playing the controller in end-to-end tests: record routing decisions the job follows, and run the job with
one injected failure so a batch is replayed from the checkpoint."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import orjson
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from windjoin.connectors.control_decisions import DecisionStore, routing_json
from windjoin.operators.control.memory import SpillRequest
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.join_job import BatchOutcome, ControlSource, start_job


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
