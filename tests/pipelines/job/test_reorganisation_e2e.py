"""The control loop end to end (real Kafka, Redis, Spark): load reports in, paper 000's reorganisation decided by
the controller, partitions moved with their state by the job, results still exact.

The workload skews the b-model (b = 0.7) over the hash partitions, so the round-robin placement loads one slot
well above the others. The controller classifies slots by their share of each batch's tuples (deterministic,
so the run is repeatable) and each epoch lets every supplier yield one partition to a consumer.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.pipelines.control_helpers import in_process_control
from tests.pipelines.pipeline_helpers import keyed_eq_spec, parquet_pairs, produce_events
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.operators.partitioning import partition_of
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.operators.workloads.b_model import PartitionSkewedKeys
from windjoin.pipelines.controller.control_loop import recorded_moves
from windjoin.pipelines.job.join_job import BatchOutcome, start_job

PARTITIONS, SLOTS = 16, 4
CONTROL = {
    "utilisation": {"capacity": 1e12, "min_workers": SLOTS, "max_workers": SLOTS},  # no shedding, no scaling
    "reorganisation": {"occupancy": "tuples", "th_sup": 0.3, "th_con": 0.2},  # fair share 0.25
}


def skewed_events(n: int, seed: int) -> list[dict]:
    keys = PartitionSkewedKeys(2_000, PARTITIONS, 0.7, seed).sample(n, np.random.default_rng(seed))
    rng = random.Random(seed)
    base = 1_700_000_000_000
    return [
        {"stream": "R", "ts": base + i, "k": int(k), "x": rng.randrange(100)}
        if rng.random() < 0.5
        else {"stream": "S", "ts": base + i, "k": int(k), "a": rng.randrange(100)}
        for i, k in enumerate(keys)
    ]


def imbalance(per_slot: dict[int, int]) -> float:
    loads = np.array([per_slot.get(s, 0) for s in range(SLOTS)], dtype=float)
    return float(loads.max() / loads.mean())


@pytest.mark.slow
def test_controller_moves_even_out_a_skewed_placement_without_losing_a_pair(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    spec_dict = keyed_eq_spec(unique_topic, tmp_path)
    spec_dict.update(partitions=PARTITIONS, slots=SLOTS, max_offsets_per_trigger=600)
    spec_dict["window"] = {"kind": "time", "size_ms": 200}
    events = skewed_events(12_000, seed=9)
    produce_events(kafka_bootstrap, spec_dict, events)
    keys = np.array([e["k"] for e in events])
    static = imbalance(dict(enumerate(np.bincount(partition_of(keys, PARTITIONS) % SLOTS, minlength=SLOTS))))
    assert static > 1.6  # the workload is skewed enough to matter (an independent count of the events)

    decisions, controller, publish, control = in_process_control(redis_url, CONTROL, PARTITIONS, SLOTS)
    per_batch: list[dict[int, int]] = []
    moved_in: list[int] = []

    def on_batch(outcome: BatchOutcome) -> None:
        per_batch.append({s["slot_index"]: s["joined"] for s in outcome.stats})
        moved_in.extend(p for s in outcome.stats for p in s["moved_in"])
        publish(outcome)
        if outcome.batch_id % 2 == 1:  # a reorganisation epoch every two batches
            controller.step()

    parquet = ParquetSink(tmp_path / "parquet")
    spec = parse_spec(spec_dict)
    query = start_job(spark, spec, kafka_bootstrap, [parquet], True, on_batch, control)
    query.awaitTermination(timeout=900)
    assert query.exception() is None

    moves = [m for _, fields in decisions.history() for m in recorded_moves(fields)]
    assert moves and moved_in, f"decided {len(moves)} moves, the job applied {len(moved_in)}"
    assert set(moved_in) <= {group.partition for group, _, _ in moves}
    loaded = [imbalance(b) for b in per_batch if sum(b.values()) > 0]
    settled = float(np.mean(loaded[-4:]))
    trace = f"slot tuple imbalance {settled:.2f} after moves vs {static:.2f} static: {np.round(loaded, 2)}"
    assert settled < min(1.5, static), trace
    expected, late = oracle_join(spec_dict, events)
    assert not late and len(expected) > 300
    assert as_multiset(parquet_pairs(parquet, spec_dict)) == as_multiset(expected)
