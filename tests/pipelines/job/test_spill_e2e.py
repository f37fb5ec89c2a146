"""Disk pushes and exact clean-up in the running job (paper 004; real Kafka, Redis, Spark).

The test plays the controller: after chosen batches it records a spill request in Redis (partitions to push,
then partitions to clean up), which the job takes into exactly one batch's control epoch. Partitions are pushed
mid-run (one twice, so it has two generations on disk), a clean-up merges them with what stayed in memory and
emits the missing pairs, and the first push batch fails after its sinks wrote and is replayed from the
checkpoint (so the same generation is pushed again). The whole Parquet result must equal the brute-force
oracle: a pair lost or produced twice by a push, the clean-up or the replay shows up as a difference.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.pipelines.control_helpers import record_routing, run_with_one_replay
from tests.pipelines.pipeline_helpers import parquet_pairs
from tests.support.spill_workload import spill_workload
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.spill_files import SpillFiles
from windjoin.connectors.redis.control_decisions import DecisionStore
from windjoin.operators.control.memory import SpillRequest
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.job_metrics import JobMetrics
from windjoin.pipelines.job.join_job import BatchOutcome, ControlSource, spill_root

START = RoutingTable.round_robin(8, 2)
# spill requests recorded after the batch id named: push p1, p3; push p3 again and p6; clean all three up
REQUESTS = {
    1: SpillRequest(1, spill=(1, 3)),
    3: SpillRequest(2, spill=(3, 6)),
    7: SpillRequest(3, cleanup=(1, 3, 6)),
}


@pytest.mark.slow
def test_pushes_and_a_clean_up_during_the_run_lose_and_duplicate_nothing(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    spec_dict, events = spill_workload(unique_topic, tmp_path, kafka_bootstrap, seed=11, lateness_ms=400)
    spec = parse_spec(spec_dict)
    namespace = f"t{uuid.uuid4().hex[:8]}"
    parquet = ParquetSink(tmp_path / "parquet")
    store = DecisionStore(redis_url, namespace)
    metrics = JobMetrics(streams=list(spec.streams))
    committed: list[BatchOutcome] = []  # each batch once: a failed attempt never reaches `after`

    def after(outcome: BatchOutcome) -> None:
        metrics.observe(outcome)
        committed.append(outcome)
        if outcome.batch_id in REQUESTS:
            record_routing(store, START, spill=REQUESTS[outcome.batch_id])

    seen, _ = run_with_one_replay(
        spark,
        spec,
        kafka_bootstrap,
        [parquet],
        ControlSource(redis_url, namespace),
        after,
        fails=lambda outcome: any(s["spill"]["pushed"] for s in outcome.stats),  # the first push batch
    )

    spill = [s["spill"] for o in seen for s in o.stats]
    pushed = sorted({(p, g) for s in spill for p, g in s["pushed"]})
    assert pushed == [(1, 0), (3, 0), (3, 1), (6, 0)], pushed  # p3 pushed twice: two generations
    assert max(s["generations"].get("3", 0) for s in spill) == 2
    assert sorted(p for s in spill for p in s["cleaned"]) == [1, 3, 6]
    # the job's metrics (windjoin run --metrics-port) show the pushes and the clean-up's progress
    value = metrics.registry.get_sample_value
    done = [s for o in committed for s in o.stats]
    slots = sorted({str(s["slot"]) for s in done})

    def metric(name: str) -> float:
        return sum(value(name, {"slot": slot}) or 0 for slot in slots)

    assert metric("windjoin_job_spill_pushed_tuples_total") == sum(s["spill"]["pushed_tuples"] for s in done) > 0
    assert metric("windjoin_job_cleanup_pairs_total") == sum(s["spill"]["cleanup_pairs"] for s in done) > 0
    assert metric("windjoin_job_cleanup_partitions_total") == 3
    assert all(value("windjoin_job_spill_generations", {"slot": slot}) == 0 for slot in slots)
    # the clean-up's files are deleted by the slot's next batch; nothing stays on disk
    assert SpillFiles(Path(spill_root(spec))).files() == []

    expected, late = oracle_join(spec_dict, events)
    assert not late and len(expected) > 1000
    assert as_multiset(parquet_pairs(parquet, spec_dict)) == as_multiset(expected)
