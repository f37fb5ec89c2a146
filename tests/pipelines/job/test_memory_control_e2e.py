"""Memory adaptation decided by the controller and applied by the job (paper 004; real Kafka, Redis, Spark).

The controller reads the job's load reports every batch with a slot budget far below what the windows hold, so
its planner pushes the least productive partitions to disk, relocates partitions when one slot holds much more
than the other, and cleans pushed partitions up when memory allows; under active-disk it also forces pushes on
the slot with the lower output rate. The first batch that pushes fails after its
sinks wrote and is replayed. When the topics are drained, `request_cleanup` (as `windjoin controller
--clean-up`) asks for the end-of-run clean-up and the restarted job merges what is left on disk in a batch with
no new record. Normal run plus clean-ups must equal the brute-force oracle: a pair lost or produced twice by a
push, a relocation, a clean-up or the replay shows up as a difference.
"""

from __future__ import annotations

import orjson
import pytest

from tests.pipelines.control_helpers import in_process_control, run_with_one_replay
from tests.pipelines.pipeline_helpers import parquet_pairs
from tests.support.spill_workload import spill_workload
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.controller.control_loop import recorded_moves
from windjoin.pipelines.job.join_job import BatchOutcome, start_job

CONTROL = {
    "utilisation": {"capacity": 1e12, "min_workers": 2, "max_workers": 2},  # no shedding, no scaling
    "reorganisation": {"occupancy": "tuples", "th_sup": 0.95, "th_con": 0.05},  # no CPU moves: memory decides
    "memory": {"enabled": True, "memory_bytes": 12_000, "theta_m": 0.6, "cleanup_below": 0.5},
}


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lazy_disk", "active_disk"])
def test_controller_pushes_relocates_and_cleans_up_without_losing_a_pair(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path, policy
):
    spec_dict, events = spill_workload(unique_topic, tmp_path, kafka_bootstrap, seed=21, lateness_ms=800)
    spec = parse_spec(spec_dict)
    memory = {**CONTROL["memory"], "policy": policy, "query_bytes": 60_000}  # M_q: 2.5x the cluster's budget
    control_config = {**CONTROL, "memory": memory}
    decisions, controller, publish, control = in_process_control(redis_url, control_config, spec.partitions, spec.slots)
    parquet = ParquetSink(tmp_path / "parquet")

    def after(outcome: BatchOutcome) -> None:  # a control epoch after every committed batch
        publish(outcome)
        controller.step()

    seen, _ = run_with_one_replay(
        spark,
        spec,
        kafka_bootstrap,
        [parquet],
        control,
        after,
        fails=lambda outcome: any(s["spill"]["pushed"] for s in outcome.stats),
    )
    request = controller.request_cleanup()  # the end of the bounded run
    final: list[BatchOutcome] = []
    query = start_job(spark, spec, kafka_bootstrap, [parquet], True, final.append, control)
    query.awaitTermination(timeout=600)
    assert query.exception() is None

    history = [fields for _, fields in decisions.history()]
    asked = [orjson.loads(f["spill"]) for f in history if "spill" in f]
    pushes = {p for r in asked for p in r["spill"]}
    spill = [s["spill"] for o in [*seen, *final] for s in o.stats]
    pushed = {p for s in spill for p, _ in s["pushed"]}
    cleaned = [p for s in spill for p in s["cleaned"]]
    relocated = [m for f in history for m in recorded_moves(f)]
    trace = f"asked {asked}, pushed {sorted(pushed)}, cleaned {cleaned}, relocated {relocated}"
    assert pushed and pushed <= pushes, trace  # the job pushed what the controller decided, and only that
    assert [r["version"] for r in asked] == sorted(r["version"] for r in asked), trace
    in_run = [p for o in seen for s in o.stats for p in s["spill"]["cleaned"]]
    assert in_run, f"no clean-up while memory allowed: {trace}"
    assert relocated, f"no relocation: {trace}"
    assert final and any(s["spill"]["cleaned"] for o in final for s in o.stats), trace
    assert all(not s["spill"]["generations"] for s in final[-1].stats), "generations left on disk after the clean-up"
    assert request.version == max(r["version"] for r in asked)
    forced = int(history[-1]["forced_bytes"])  # active-disk's pushes on the slot with the lowest output rate
    assert (forced > 0) == (policy == "active_disk"), f"forced {forced} bytes under {policy}"

    # Kafka partitions are read at even offsets, not even event times (800 ms lateness allows for that; 400 ms
    # did not for this seed): the job dead-letters nothing, so a tuple judged late shows here, not as missing pairs
    assert not any(o.dead for o in [*seen, *final])
    expected, late = oracle_join(spec_dict, events)
    assert not late and len(expected) > 1000
    assert as_multiset(parquet_pairs(parquet, spec_dict)) == as_multiset(expected)
