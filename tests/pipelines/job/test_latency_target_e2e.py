"""A latency target sizes the job's batches (operators.batch_size) and the results stay exact."""

from __future__ import annotations

import random

import pytest

from tests.pipelines.pipeline_helpers import keyed_eq_spec, parquet_pairs, produce_events
from windjoin.connectors.files.batch_costs import BatchCosts
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.operators.batch_size import FIT_SAMPLES
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.adapted_source import AdaptedStreamReader
from windjoin.pipelines.job.adapter import Adapter
from windjoin.pipelines.job.join_job import BatchOutcome, start_job


@pytest.mark.slow
def test_batches_sized_for_a_target_join_exactly(spark, kafka_bootstrap, unique_topic, tmp_path):
    spec_dict = {**keyed_eq_spec(unique_topic, tmp_path), "max_offsets_per_trigger": 400, "latency_target_ms": 1}
    rng = random.Random(7)
    events = [
        {"stream": rng.choice("RS"), "ts": 1_700_000_000_000 + i, "k": rng.randrange(20), "x": i, "a": i}
        for i in range(2400)
    ]
    events = [{k: v for k, v in e.items() if k != ("a" if e["stream"] == "R" else "x")} for e in events]
    produce_events(kafka_bootstrap, spec_dict, events)
    outcomes: list[BatchOutcome] = []
    parquet = ParquetSink(tmp_path / "parquet")
    query = start_job(spark, parse_spec(spec_dict), kafka_bootstrap, [parquet], True, outcomes.append)
    query.awaitTermination(timeout=600)
    assert query.exception() is None
    expected, late = oracle_join(spec_dict, events)
    assert not late and len(expected) > 1000
    assert as_multiset(parquet_pairs(parquet, spec_dict)) == as_multiset(expected)
    limits = [o.batch_limit for o in outcomes if o.records]
    # the record cap until enough batches are measured; then the target's size: a 1 ms target is below any
    # batch's fixed cost, so the size is the floor, doubled from the last batch while behind, under the cap
    assert limits[:FIT_SAMPLES] == [400] * FIT_SAMPLES
    assert len(limits) > FIT_SAMPLES and all(limit <= 400 for limit in limits)
    assert sum(o.records for o in outcomes) == len(events)
    # each batch's size and time reached the source's sizing, and Spark's own parts of the batch before
    measured = BatchCosts(tmp_path / "checkpoint" / "batch_costs.json").samples()
    assert [rows for rows, _ in measured] == [o.records for o in outcomes][-len(measured) :] and len(measured) > 4
    assert all(o.previous_spark.get("plan", 0) > 0 for o in outcomes[1:])


def test_the_source_sizes_a_batch_from_the_measured_costs(tmp_path) -> None:
    spec = parse_spec({**keyed_eq_spec(lambda name: name, tmp_path), "latency_target_ms": 1000})
    costs = BatchCosts(tmp_path / "costs.json")
    reader = AdaptedStreamReader(
        KafkaSourceOptions("127.0.0.1:9", ("r", "s")),
        Adapter(spec, RoutingTable.round_robin(4, 2), (0, 1)),
        costs=costs,
    )
    bounds = {"r:0": (0, 50_000)}
    assert reader.batch_limit(100_000, {"r:0": 0}, bounds) == 100_000  # nothing measured yet: the cap
    for batch, rows in enumerate((1_000, 3_000, 2_000, 4_000)):
        costs.record(batch, rows, 0.3 + 1e-5 * rows)
    assert reader.batch_limit(100_000, {"r:0": 45_000}, bounds) == 20_000  # (0.5 s - 0.3 s) / 10 us
    assert reader.batch_limit(100_000, {"r:0": 0}, bounds) == 20_000  # behind: twice the last batch is less
