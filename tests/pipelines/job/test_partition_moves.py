"""Partition moves in the running job (real Kafka, Redis, Spark): the window state travels with the partition.

The test plays the controller: after chosen batches it records a new routing decision in Redis, which the job
follows (announce batch: old holders hand their state over; effective batch: new holders install it): partitions
moved whole, and hot partitions spread SplitJoin-style over several slots (stored at one, probed at all), shrunk
and gathered again. One announce
batch fails after its sinks wrote (the job dies there) and the job is restarted from its checkpoint, so the
replayed batch hands the same state over again. Every result must equal the brute-force oracle exactly: a
pair lost or joined twice at a move shows up as a difference.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tests.pipelines.control_helpers import assert_sinks_equal_the_oracle, run_holder_changes
from tests.pipelines.pipeline_helpers import produce_closers
from tests.support.join_tasks import TASKS, TRACKED
from tests.support.pipeline_events import pipeline_events, pipeline_spec
from windjoin.operators.partitioning import RoutingTable

START = RoutingTable.round_robin(8, 2)
# Routing decisions recorded after the batch id named: moves (to a new slot and back) ...
V1 = RoutingTable(1, (1, 1, 1, 1, 0, 1, 2, 1))  # p0, p2 to slot 1; p6 to a new slot 2
MOVES = {1: V1, 5: RoutingTable(2, (1, 0, 2, 1, 0, 2, 0, 2))}  # p1 to 0; p2, p5, p7 to 2; p6 back to 0
# ... and SplitJoin spreads: p3 stored over slots 1, 0, 2 and p4 over 0, 1; then slot 0 leaves p3's spread while
# p4 goes whole to slot 1 (slot 0 hands its share over); then p3 goes whole to slot 0 (both shares handed over).
S1 = START.with_spread(3, (1, 0, 2)).with_spread(4, (0, 1))
S2 = S1.with_spread(3, (1, 2)).with_spread(4, (1,))
SPREADS = {1: S1, 4: S2, 7: S2.with_spread(3, (0,))}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("decisions", "changed"), [(MOVES, {0, 1, 2, 5, 6, 7}), (SPREADS, {3, 4})], ids=["moves", "spreads"]
)
def test_holder_changes_during_the_run_lose_and_duplicate_nothing(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path, decisions, changed
):
    window = {"kind": "time", "size_ms": 40}
    spec_dict = pipeline_spec(
        unique_topic, tmp_path, window, keyed=True, tasks=TASKS, max_offsets_per_trigger=250, allowed_lateness_ms=5000
    )
    spec_dict["output_order"] = "strict"  # a spread partition's results come from several slots
    events = pipeline_events(2400, seed=7, keys=24)
    seen, parquet, redis = run_holder_changes(
        spark, spec_dict, events, kafka_bootstrap, redis_url, tmp_path, decisions, "moved_out"
    )  # fails once after its first announce batch

    moved_in = {p for o in seen for s in o.stats for p in s["moved_in"]}
    assert moved_in == changed, moved_in
    assert max(o.routing_version for o in seen) == max(d.version for d in decisions.values())
    assert_sinks_equal_the_oracle(spec_dict, events, parquet, redis)
    pieces = 0
    for task in TASKS:  # each slot orders its piece of a batch (the pieces follow one another, README)
        for batch in parquet.committed_batches(task["name"]):
            for file in parquet.batch_files(task["name"], batch):
                rows = pq.read_table(file).to_pylist()
                keys = [sorted((r[s]["ts"] for s in task["join"]), reverse=True) for r in rows]
                assert keys == sorted(keys), f"{task['name']}: {file} is not in strict order"
                pieces += bool(rows)
    assert pieces > len(TASKS)


@pytest.mark.slow
def test_left_outer_and_anti_tasks_lose_and_duplicate_nothing_through_moves_and_a_replay(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    """Which tuples paired travels with the moved partitions and survives the replayed announce batch: each
    unpaired row comes exactly once, from whichever slot holds its tuple when its window closes (asymmetric
    bounds). Closers in every input partition, in two waves, move the watermark past every window (the second
    wave read by a restarted run from the checkpoint). The replayed batch rebuilds its windows from the state
    segments (the failed attempt's windows are of another state version); a restart that finds its version's
    windows cached in a worker or the machine's window files uses them instead."""
    window = {"kind": "time", "lower_ms": -40, "upper_ms": 15}
    spec_dict = pipeline_spec(
        unique_topic, tmp_path, window, keyed=True, tasks=TRACKED, max_offsets_per_trigger=250, allowed_lateness_ms=5000
    )
    events = pipeline_events(2400, seed=11, keys=24)
    end = max(e["ts"] for e in events)
    waves = (
        lambda: produce_closers(kafka_bootstrap, spec_dict, end + 100_000, 2, wave=1),
        lambda: produce_closers(kafka_bootstrap, spec_dict, end + 200_000, 2, wave=2),
    )
    seen, parquet, redis = run_holder_changes(
        spark, spec_dict, events, kafka_bootstrap, redis_url, tmp_path, MOVES, "moved_out", waves
    )
    assert {p for o in seen for s in o.stats for p in s["moved_in"]} == {0, 1, 2, 5, 6, 7}
    assert_sinks_equal_the_oracle(spec_dict, events, parquet, redis)
