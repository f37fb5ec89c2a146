"""Epoch aggregation of per-batch slot reports: average occupancy, counters and gauges, utilisation."""

from __future__ import annotations

import pytest

from windjoin.operators.control.load import Load, SlotBatch, aggregate_epoch, group_weights, utilisation
from windjoin.operators.partitioning import Group

G0, G1, G2 = Group(0), Group(1), Group(2)


def reports():
    return [
        SlotBatch(
            10, 0, 2.0, Load(100, 1.0, 40, 1000, 5), {G0: Load(60, 0.6, 0, 600, 3), G2: Load(40, 0.4, 0, 400, 2)}
        ),
        SlotBatch(10, 1, 2.0, Load(10, 0.2, 0, 200, 0), {G1: Load(10, 0.2, 0, 200, 0)}),
        SlotBatch(11, 0, 2.0, Load(300, 2.0, 80, 3000, 7), {G0: Load(300, 2.0, 0, 2600, 7)}),
        # slot 1 did not report batch 11: idle for the average; slot 2 never reported
    ]


def test_busy_occupancy_averages_over_the_epochs_batches():
    epoch = aggregate_epoch(reports(), slots=[0, 1, 2])
    assert epoch.batches == 2
    assert epoch.occupancy == pytest.approx({0: (0.5 + 1.0) / 2, 1: (0.1 + 0.0) / 2, 2: 0.0})


def test_backlog_occupancy_is_the_papers_buffer_measure():
    epoch = aggregate_epoch(reports(), slots=[0, 1], kind="backlog", backlog_capacity=100)
    assert epoch.occupancy == pytest.approx({0: (0.4 + 0.8) / 2, 1: 0.0})
    with pytest.raises(ValueError, match="backlog_capacity"):
        aggregate_epoch(reports(), slots=[0], kind="backlog")


def test_counters_add_and_gauges_keep_the_latest():
    epoch = aggregate_epoch(reversed(reports()), slots=[0, 1])  # report order does not matter
    assert epoch.slot_load[0] == Load(400, 3.0, 80, 3000, 12)
    assert epoch.group_load[G0] == Load(360, 2.6, 0, 2600, 10)
    assert epoch.group_load[G2] == Load(40, 0.4, 0, 400, 2)
    assert epoch.group_slot == {G0: 0, G1: 1, G2: 0}
    assert group_weights(epoch, "state_bytes") == {G0: 2600.0, G1: 200.0, G2: 400.0}


def test_utilisation_is_tuples_per_batch_per_worker_over_capacity():
    epoch = aggregate_epoch(reports(), slots=[0, 1])
    # 410 tuples over 2 batches and 2 workers = 102.5 tuples per worker-batch; W = 205
    assert utilisation(epoch, capacity=205) == pytest.approx(0.5)
    assert utilisation(epoch, capacity=205, workers=1) == pytest.approx(1.0)
    assert utilisation(aggregate_epoch([], slots=[0]), capacity=1) == 0.0


def test_share_occupancy_compares_slots_within_each_batch():
    reports = [
        SlotBatch(0, 0, 10.0, Load(processing_s=3.0)),
        SlotBatch(0, 1, 10.0, Load(processing_s=1.0)),
        SlotBatch(1, 0, 1.0, Load(processing_s=0.5)),  # a faster batch: the shares, not the seconds, count
        SlotBatch(1, 1, 1.0, Load(processing_s=0.5)),
    ]
    epoch = aggregate_epoch(reports, [0, 1, 2], kind="share")
    assert epoch.occupancy == pytest.approx({0: (0.75 + 0.5) / 2, 1: (0.25 + 0.5) / 2, 2: 0.0})
    by_tuples = [SlotBatch(0, 0, 1.0, Load(tuples_in=30)), SlotBatch(0, 1, 1.0, Load(tuples_in=10))]
    assert aggregate_epoch(by_tuples, [0, 1], kind="tuples").occupancy == pytest.approx({0: 0.75, 1: 0.25})
