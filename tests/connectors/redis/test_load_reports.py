"""Load reports through real Redis: published per batch by the driver's publisher, read back by the controller."""

from __future__ import annotations

import re
import uuid

import orjson
import pytest

from windjoin.connectors.redis.load_reports import LoadReports, load_key
from windjoin.operators.control.load import Load
from windjoin.operators.control.load_entries import LoadEntry, fine_histograms, slot_batches
from windjoin.operators.control.load_entry_check import ReportBounds
from windjoin.operators.partitioning import Group
from windjoin.pipelines.job.join_job import BatchOutcome
from windjoin.pipelines.job.load_publisher import LoadPublisher, slot_reports


def _stat(label: int, index: int, parts: list[int], tuples: list[int], seconds: float) -> dict:
    share = [seconds * n / sum(tuples) for n in tuples]
    return {
        "slot": label,
        "slot_index": index,
        "rows": sum(tuples) + 1,
        "joined": sum(tuples),
        "dead": 1,
        "outputs": 2 * sum(tuples),
        "window_tuples": 10 * sum(tuples),
        "state_bytes": 80 * sum(tuples),
        "seconds": seconds,
        "segments": 3,
        "groups": {
            "part": parts,
            "tuples_in": tuples,
            "outputs": [2 * n for n in tuples],
            "window_tuples": [10 * n for n in tuples],
            "state_bytes": [80 * n for n in tuples],
            "seconds": share,
        },
    }


def _outcome(batch_id: int, finished_at: float) -> BatchOutcome:
    return BatchOutcome(
        batch_id,
        stats=[_stat(13, 1, [1, 3], [5, 15], 0.4), _stat(6, 0, [0, 2], [30, 10], 0.8)],
        finished_at=finished_at,
    )


@pytest.fixture
def reports(redis_url):
    reports = LoadReports(redis_url, namespace=f"t{uuid.uuid4().hex[:8]}", maxlen=50)
    yield reports
    reports.client.delete(reports.key)
    reports.close()


def test_published_batches_read_back_as_slot_batches_by_slot_index(reports):
    publish = LoadPublisher(reports, trigger_s=1.0)
    publish(_outcome(0, 1000.0))
    publish(_outcome(1, 1003.5))  # 3.5 s after the first: the batch's interval
    publish(_outcome(2, 1004.0))  # sooner than the trigger interval: counted as the trigger interval
    entries = reports.read()
    assert [e.batch_id for e in entries] == [0, 1, 2]
    assert [e.interval_s for e in entries] == [1.0, 3.5, 1.0]
    assert [r["slot"] for r in entries[0].slots] == [0, 1] and entries[0].slots[1]["label"] == 13
    batches = slot_batches(entries)
    assert [(b.batch_id, b.slot) for b in batches] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    slot1 = batches[1]
    assert slot1.total == Load(tuples_in=20, processing_s=0.4, state_bytes=1600, outputs=40)
    # a report without the cpu column (older jobs): its wall seconds stand in
    assert slot1.groups[Group(3)] == Load(15, pytest.approx(0.3), 0, 1200, 30, pytest.approx(0.3))
    assert set(slot1.groups) == {Group(1), Group(3)}


def test_the_records_waiting_in_the_topics_are_each_slots_backlog_by_its_share_of_the_tuples(reports):
    """Paper 000's occupancy is a slot's input buffer over its capacity: the job's buffer is the topics."""
    outcome = _outcome(0, 1000.0)
    outcome.waiting = 600  # slot 0 joined 40 tuples, slot 1 joined 20
    LoadPublisher(reports, trigger_s=1.0)(outcome)
    batches = slot_batches(reports.read())
    assert [b.total.backlog for b in batches] == [400, 200]
    caught_up = _outcome(1, 1001.0)  # nothing waiting: no backlog
    LoadPublisher(reports, trigger_s=1.0)(caught_up)
    assert [b.total.backlog for b in slot_batches(reports.read()) if b.batch_id == 1] == [0, 0]


def test_reading_after_a_cursor_returns_only_newer_entries_and_replays_keep_the_latest(reports):
    publish = LoadPublisher(reports, trigger_s=0.0)
    publish(_outcome(0, 10.0))
    cursor = reports.last_id()
    assert reports.read(after=cursor) == []
    publish(_outcome(1, 11.0))
    replay = _outcome(1, 12.0)
    replay.stats[0]["seconds"] = 9.0
    publish(replay)  # batch 1 again after a failure: reported twice
    newer = reports.read(after=cursor)
    assert [e.batch_id for e in newer] == [1, 1]
    batches = slot_batches(newer)
    assert [(b.batch_id, b.slot) for b in batches] == [(1, 0), (1, 1)]
    assert batches[1].total.processing_s == 9.0


def test_the_stream_is_capped(reports):
    publish = LoadPublisher(reports, trigger_s=0.0)
    for i in range(500):
        publish(_outcome(i, float(i)))
    length = reports.client.xlen(reports.key)
    assert 50 <= length < 500  # MAXLEN ~ trims whole macro nodes: about maxlen, never everything
    assert reports.read()[-1].batch_id == 499


def test_a_redis_outage_does_not_stop_the_batch():
    reports = LoadReports("redis://127.0.0.1:1/0", socket_timeout=0.5)
    assert LoadPublisher(reports, 1.0)(_outcome(0, 1.0)) is None


def test_namespace_is_checked():
    assert load_key("windjoin") == "windjoin:{control}:load"
    with pytest.raises(ValueError, match="namespace 'a b'"):
        load_key("a b")


def _fine_report(slot: int, parts: list[int], fine: list[list[int]]) -> dict:
    return {"slot": slot, "groups": {"part": parts, "fine": fine}}


def test_fine_histograms_sum_a_partitions_shares_over_slots_as_of_its_latest_batch():
    one, two, three = [1] * 16, [2] * 16, [3] * 16
    entries = [
        LoadEntry("1-0", 7, 0.0, 1.0, [_fine_report(0, [0, 2], [one, one]), _fine_report(1, [1], [one])]),
        # batch 8: partition 0's mini-groups sit on both slots; partition 2 is reported no more
        LoadEntry("2-0", 8, 0.0, 1.0, [_fine_report(0, [0], [two]), _fine_report(1, [0, 1], [three, two])]),
        LoadEntry("3-0", 8, 0.0, 1.0, [_fine_report(1, [0, 1], [one, two])]),  # batch 8 replayed: latest wins
        LoadEntry("4-0", 9, 0.0, 1.0, [{"slot": 0, "groups": {"part": [0], "tuples_in": [4]}}]),  # no histogram
    ]
    got = fine_histograms(entries)
    assert sorted(got) == [0, 1, 2]
    assert got[0].tolist() == [3.0] * 16 and got[1].tolist() == [2.0] * 16 and got[2].tolist() == [1.0] * 16


def _entry(**slot_changes: object) -> dict[str, bytes]:
    """A good entry's fields (slot 0 of a real batch) with its slot report changed."""
    report = slot_reports(_outcome(7, 1007.0))[0]
    fields = {"batch_id": b"7", "finished_at": b"1007.0", "interval_s": b"1.0"}
    return {**fields, "slots": orjson.dumps([{**report, **slot_changes}])}


GROUPS = slot_reports(_outcome(7, 1007.0))[0]["groups"]  # partitions 0 and 2


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({k: v for k, v in _entry().items() if k != "batch_id"}, "batch_id is missing"),
        ({**_entry(), "batch_id": b"\xff"}, "batch_id is not ASCII"),
        ({**_entry(), "batch_id": str(2**63).encode()}, r"batch_id must be a whole number in 0\.\."),
        ({**_entry(), "interval_s": b"-1.0"}, "interval_s must be a finite decimal number >= 0"),
        ({**_entry(), "interval_s": b"inf"}, "interval_s must be"),
        ({**_entry(), "finished_at": b" 1007"}, "finished_at must be"),
        ({**_entry(), "slots": b'{"slot": 0}'}, "slots must be a JSON array"),
        (_entry(slot=9), r"slots\[0\]\.slot 9 is outside the job's slots 0\.\.3"),
        (_entry(slot=True), r"slots\[0\]\.slot: Input should be a valid integer"),
        (_entry(seconds=-0.5), r"slots\[0\]\.seconds: Input should be greater than or equal to 0"),
        (_entry(shed={"R": "many"}), r"slots\[0\]\.shed\.R"),
        (_entry(groups={**GROUPS, "seconds": [0.1]}), "column 'seconds' has 1 values, 'part' has 2"),
        (_entry(groups={**GROUPS, "part": [0, 0]}), "part lists a partition twice"),
        (_entry(groups={**GROUPS, "fine": [[1] * 16, [1] * 15]}), r"slots\[0\]\.groups\.fine\.1"),
        (_entry(groups={**GROUPS, "fine_in": [[1] * 16] * 2}), "'fine_in' comes with 'fine'"),
        (_entry(spill={"generations": {"x": 1}}), r"slots\[0\]\.spill\.generations\.x"),
        (_entry(spill={"reload_bytes": {"8": 1}}), r"partition\(s\) \[8\] outside the job's 0\.\.3"),
        (_entry(spill={"spill_version": -1}), r"spill\.spill_version"),
    ],
)
def test_a_malformed_entry_is_skipped_with_its_reason_and_read_past(reports, fields, says):
    publish = LoadPublisher(reports, trigger_s=1.0)
    publish(_outcome(0, 1000.0))
    bad = reports.client.xadd(reports.key, fields).decode()
    good = publish(_outcome(1, 1001.0))
    read = reports.scan(bounds=ReportBounds(partitions=4, slots=4))
    assert [e.batch_id for e in read.entries] == [0, 1]
    [(entry_id, reason)] = read.skipped
    assert entry_id == bad and re.search(says, reason), reason
    assert read.last_id == good
    assert reports.scan(after=bad).entries == read.entries[1:]


def test_an_entry_as_the_job_writes_it_passes_every_check(reports):
    reports.client.xadd(reports.key, _entry(spill={"spill_version": 2, "generations": {"2": 1}}))
    read = reports.scan(bounds=ReportBounds(partitions=4, slots=4))
    assert read.skipped == [] and [e.batch_id for e in read.entries] == [7]
