"""The job's per-slot and per-partition load metrics from hand-built batch outcomes (no Spark)."""

from __future__ import annotations

import pytest

from windjoin.pipelines.job.job_metrics import JobMetrics
from windjoin.pipelines.job.join_job import BatchOutcome


def _outcome(batch_id: int, slot_of_part_5: int) -> BatchOutcome:
    def stat(label: int, index: int, parts: list[int]) -> dict:
        return {
            "slot": label,
            "slot_index": index,
            "rows": 10,
            "joined": 10,
            "seconds": 0.5,
            "outputs": 7,
            "state_bytes": 4096,
            "window_tuples": 30,
            "groups": {
                "part": parts,
                "tuples_in": [10 // len(parts)] * len(parts),
                "outputs": [1] * len(parts),
                "seconds": [0.5 / len(parts)] * len(parts),
                "window_tuples": [3] * len(parts),
                "state_bytes": [100 * (p + 1) for p in parts],
            },
        }

    other = 1 - slot_of_part_5
    return BatchOutcome(batch_id, stats=[stat(6, slot_of_part_5, [5]), stat(13, other, [0, 2])])


def test_partition_series_follow_a_partition_across_slots():
    m = JobMetrics()
    m.observe(_outcome(0, slot_of_part_5=0))
    m.observe(_outcome(1, slot_of_part_5=1))  # partition 5 reported by the other slot
    value = m.registry.get_sample_value
    assert value("windjoin_job_partition_tuples_in_total", {"partition": "5"}) == 20
    assert value("windjoin_job_partition_tuples_in_total", {"partition": "2"}) == 10
    assert value("windjoin_job_partition_outputs_total", {"partition": "0"}) == 2
    assert value("windjoin_job_partition_seconds_total", {"partition": "2"}) == pytest.approx(0.5)
    assert value("windjoin_job_partition_state_bytes", {"partition": "5"}) == 600
    assert value("windjoin_job_partition_window_tuples", {"partition": "0"}) == 3
    assert value("windjoin_job_partition_slot", {"partition": "5"}) == 1
    assert value("windjoin_job_state_bytes", {"slot": "13"}) == 4096
    assert value("windjoin_job_slot_outputs_total", {"slot": "6"}) == 14


def test_stats_without_groups_still_count():
    m = JobMetrics()
    m.observe(BatchOutcome(0, stats=[{"slot": 2, "rows": 5, "joined": 5, "seconds": 0.1, "window_tuples": 1}]))
    assert m.registry.get_sample_value("windjoin_job_input_rows_total", {"slot": "2"}) == 5
    assert m.registry.get_sample_value("windjoin_job_partition_tuples_in_total", {"partition": "0"}) is None
