"""Disk pushes and exact clean-up in the running job (paper 004; real Kafka, Redis, Spark).

The test plays the controller: after chosen batches it records a spill request in Redis (partitions to push,
then partitions to clean up), which the job takes into exactly one batch's control epoch. Partitions are pushed
mid-run (one twice, so it has two generations on disk), a clean-up merges them with what stayed in memory and
emits the missing pairs, and the first push batch fails after its sinks wrote and is replayed from the
checkpoint (so the same generation is pushed again). The whole Parquet result must equal the brute-force
oracle: a pair lost or produced twice by a push, the clean-up or the replay shows up as a difference.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from tests.oracle import as_multiset, oracle_join
from tests.pipelines.control_helpers import record_routing
from tests.pipelines.pipeline_helpers import parquet_pairs, produce_events
from tests.pipelines.test_partition_moves import TASKS
from tests.pipelines.test_pipeline_e2e import _events, _spec
from windjoin.connectors.control_decisions import DecisionStore
from windjoin.connectors.parquet_sink import ParquetSink
from windjoin.connectors.spill_files import SpillFiles
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.control_epoch import SpillRequest
from windjoin.pipelines.join_job import BatchOutcome, ControlSource, spill_root, start_job

START = RoutingTable.round_robin(8, 2)
# spill requests recorded after the batch id named: push p1, p3; push p3 again and p6; clean all three up
REQUESTS = {
    1: SpillRequest(1, spill=(1, 3)),
    3: SpillRequest(2, spill=(3, 6)),
    5: SpillRequest(3, cleanup=(1, 3, 6)),
}


def _run_with_one_replay(
    spark, spec, bootstrap, sinks, control: ControlSource, requests: Mapping[int, SpillRequest], fails: Callable
) -> tuple[list[BatchOutcome], int]:
    store = DecisionStore(control.url, control.namespace)
    seen: list[BatchOutcome] = []
    failed: list[int] = []

    def on_batch(outcome: BatchOutcome) -> None:
        seen.append(outcome)
        if not failed and fails(outcome):
            failed.append(outcome.batch_id)
            raise RuntimeError("injected failure after the batch's sinks wrote")
        if outcome.batch_id in requests:
            record_routing(store, START, spill=requests[outcome.batch_id])

    query = start_job(spark, spec, bootstrap, sinks, True, on_batch, control)
    with pytest.raises(StreamingQueryException, match="injected failure"):
        query.awaitTermination(timeout=600)
    assert failed, "no batch met the failure condition"
    query = start_job(spark, spec, bootstrap, sinks, True, on_batch, control)
    query.awaitTermination(timeout=600)
    assert query.exception() is None
    assert [o.batch_id for o in seen].count(failed[0]) == 2, "the failed batch was not replayed"
    return seen, failed[0]


def _disordered(events: list[dict], seed: int, jitter: int) -> list[dict]:
    """Timestamps moved by up to `jitter` ms either way: arrivals out of event-time order (none late)."""
    rng = random.Random(seed)
    return [{**e, "ts": e["ts"] + rng.randint(-jitter, jitter)} for e in events]


@pytest.mark.slow
def test_pushes_and_a_clean_up_during_the_run_lose_and_duplicate_nothing(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    window = {"kind": "time", "size_ms": 300}
    spec_dict = _spec(
        unique_topic, tmp_path, window, keyed=True, tasks=TASKS, max_offsets_per_trigger=250, allowed_lateness_ms=5000
    )
    events = _disordered(_events(2400, seed=11, keys=24), seed=12, jitter=150)
    produce_events(kafka_bootstrap, spec_dict, events)
    spec = parse_spec(spec_dict)
    namespace = f"t{uuid.uuid4().hex[:8]}"
    parquet = ParquetSink(tmp_path / "parquet")
    seen, failed = _run_with_one_replay(
        spark,
        spec,
        kafka_bootstrap,
        [parquet],
        ControlSource(redis_url, namespace),
        REQUESTS,
        fails=lambda outcome: any(s["spill"]["pushed"] for s in outcome.stats),  # the first push batch
    )

    spill = [s["spill"] for o in seen for s in o.stats]  # the "spill" stats exist only in this branch's workers
    pushed = sorted({(p, g) for s in spill for p, g in s["pushed"]})
    assert pushed == [(1, 0), (3, 0), (3, 1), (6, 0)], pushed  # p3 pushed twice: two generations
    assert max(s["generations"].get("3", 0) for s in spill) == 2
    assert sorted(p for s in spill for p in s["cleaned"]) == [1, 3, 6]
    cleanup_pairs = sum(s["cleanup_pairs"] for s in spill)
    assert cleanup_pairs > 0
    assert sum(s["pushed_tuples"] for s in spill) > 0
    # the clean-up's files are deleted by the slot's next batch; nothing stays on disk
    assert SpillFiles(Path(spill_root(spec))).files() == []

    expected, late = oracle_join(spec_dict, events)
    assert not late and len(expected) > 1000
    assert as_multiset(parquet_pairs(parquet, spec_dict)) == as_multiset(expected)
