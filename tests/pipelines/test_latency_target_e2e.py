"""A latency target sizes the job's batches (operators.batch_size) and the results stay exact."""

from __future__ import annotations

import random

import pytest

from tests.oracle import as_multiset, oracle_join
from tests.pipelines.pipeline_helpers import keyed_eq_spec, parquet_pairs, produce_events
from windjoin.connectors.parquet_sink import ParquetSink
from windjoin.operators.batch_size import FIT_SAMPLES
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.join_job import BatchOutcome, start_job


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
