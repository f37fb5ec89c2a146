"""Event time per input partition, as planned with each batch: watermark, idleness, aligned reading."""

from __future__ import annotations

import logging

import pytest

from windjoin.connectors.files.mark_reports import MarkReports
from windjoin.operators.event_time import (
    DENSITY_MARGIN,
    PROBE_RECORDS,
    EventTime,
    EventTimeConfig,
    aligned_caps,
    first_event_time,
    next_event_time,
)
from windjoin.operators.offset_plan import plan_end

CONFIG = EventTimeConfig(allowed_lateness_ms=1_000, idle_timeout_ms=5_000, alignment_ms=2_000)
BOUNDS = {"r:0": (0, 1_000), "r:1": (0, 1_000)}


def _after(previous: EventTime, reported, positions, now_ms=0, bounds=BOUNDS, config=CONFIG) -> EventTime:
    return next_event_time(previous, reported, positions, bounds, now_ms, config)


def test_the_watermark_waits_for_every_partition_then_follows_the_slowest_and_never_moves_back():
    start = first_event_time({"r:0": 0, "r:1": 0})
    one = _after(start, {"r:0": (100, 50_000)}, {"r:0": 10, "r:1": 10})
    assert one.watermark is None  # r:1 has no mark yet: nothing may be judged late
    two = _after(one, {"r:1": (100, 9_000)}, {"r:0": 10, "r:1": 20})
    assert two.watermark == 9_000 - 1_000  # the slowest partition, however far r:0 ran ahead
    three = _after(two, {"r:1": (9_000, 12_000)}, {"r:0": 10, "r:1": 30})
    assert three.watermark == 11_000
    assert _after(three, {"r:1": (1, 2)}, {"r:0": 10, "r:1": 40}).watermark == 11_000  # an old report: no step back
    assert [s.seq for s in (start, one, two, three)] == [0, 1, 2, 3]


def test_a_partition_read_to_its_end_goes_idle_after_the_timeout_and_wakes_with_new_records():
    state = _after(first_event_time({"r:0": 0, "r:1": 0}), None, {"r:0": 0, "r:1": 0}, now_ms=0)
    state = _after(state, {"r:0": (0, 20_000), "r:1": (0, 5_000)}, {"r:0": 500, "r:1": 1_000}, now_ms=1_000)
    assert state.idle == () and state.watermark == 4_000  # r:1 is read to its end, but only just
    state = _after(state, {"r:0": (20_000, 30_000)}, {"r:0": 600, "r:1": 1_000}, now_ms=5_000)
    assert state.idle == ("r:1",) and state.watermark == 29_000  # its end has not moved for 5 s: it holds nothing
    grown = {"r:0": (0, 1_000), "r:1": (0, 1_200)}
    state = _after(state, None, {"r:0": 600, "r:1": 1_000}, now_ms=6_000, bounds=grown)
    assert state.idle == () and state.watermark == 29_000  # awake (new records), the watermark does not go back


def test_a_partition_that_has_records_left_to_read_is_never_idle():
    state = _after(first_event_time({"r:0": 0, "r:1": 0}), {"r:0": (0, 9), "r:1": (0, 9)}, {"r:0": 5, "r:1": 5})
    later = _after(state, None, {"r:0": 5, "r:1": 5}, now_ms=60_000)
    assert later.idle == ()


def test_aligned_reading_holds_back_partitions_ahead_of_where_the_slowest_ends_the_batch():
    state = EventTime(
        seq=4,
        marks={"r:0": 10_000, "r:1": 12_500, "r:2": 11_000, "r:4": 13_200},
        marked_at={"r:0": 100, "r:1": 100, "r:2": 100, "r:4": 100},
        density={"r:0": 0.1, "r:1": 0.1, "r:2": 1.0, "r:4": 0.1},
    )
    at = {"r:0": 100, "r:1": 100, "r:2": 100, "r:3": 0, "r:4": 100}
    reads = dict.fromkeys(at, 100)  # what each would read without alignment
    caps = aligned_caps(state, at, reads, CONFIG)
    # r:0 is the slowest and ends the batch at 11_000 (100 records at 0.1 per ms); the others may end it up to
    # DENSITY_MARGIN of the 2 s alignment past that
    assert caps["r:0"] >= reads["r:0"]  # the slowest is never held back
    assert caps["r:1"] == int(0.1 * (11_000 + DENSITY_MARGIN * 2_000 - 12_500))
    assert caps["r:2"] == int(1.0 * (11_000 + DENSITY_MARGIN * 2_000 - 11_000))
    assert caps["r:4"] == 0  # already 2.2 s ahead of where the slowest ends: paused
    assert caps["r:3"] == PROBE_RECORDS  # never read: a probe measures its density first
    # records read since the last mark count: r:0 is estimated 1 s further on (r:2 ends the batch first now)
    moved = aligned_caps(state, {**at, "r:0": 200}, {}, CONFIG)
    assert moved["r:1"] == int(0.1 * (11_000 + DENSITY_MARGIN * 2_000 - 12_500))
    # a partition done with a bounded run no longer holds the others back: r:2 ends the batch at 11_100
    done = aligned_caps(state, at, reads, CONFIG, done=frozenset({"r:0"}))
    assert done["r:1"] == int(0.1 * (11_100 + DENSITY_MARGIN * 2_000 - 12_500))
    assert aligned_caps(state, {"r:0": 100}, reads, EventTimeConfig(1_000, 5_000, None)) is None


def test_partitions_equally_behind_read_as_much_as_the_batch_allows():
    """A backlog spanning far more event time than the alignment, on partitions alike, is read at the batch's
    limit: the alignment bounds the partitions' spread, not the batch's span (which a longer trigger needs)."""
    state = EventTime(
        seq=4,
        marks={"r:0": 10_000, "r:1": 10_050},
        marked_at={"r:0": 100, "r:1": 100},
        density={"r:0": 1.0, "r:1": 1.0},
    )
    reads = {"r:0": 70_000, "r:1": 70_000}  # 70 s of event time each, the alignment is 2 s
    caps = aligned_caps(state, {"r:0": 100, "r:1": 100}, reads, CONFIG)
    assert all(caps[key] >= reads[key] for key in reads), caps


def test_the_plan_takes_no_more_than_the_caps_and_shares_the_rest():
    bounds = {"r:0": (0, 1_000), "r:1": (0, 1_000)}
    assert plan_end({"r:0": 0, "r:1": 0}, bounds, 600, caps={"r:1": 0}) == {"r:0": 600, "r:1": 0}
    assert plan_end({"r:0": 0, "r:1": 0}, bounds, 600, caps={"r:1": 100}) == {"r:0": 500, "r:1": 100}


def test_densities_are_measured_from_the_reports_and_smoothed():
    state = _after(first_event_time({"r:0": 0, "r:1": 0}), {"r:0": (0, 99)}, {"r:0": 100, "r:1": 0})
    assert state.density["r:0"] == 1.0  # 100 records over 99 ms: 99 gaps
    state = _after(state, {"r:0": (100, 399)}, {"r:0": 200, "r:1": 0})
    assert state.density["r:0"] == (1.0 + 100 / 300) / 2


def test_the_state_survives_its_json_and_the_reports_their_files(tmp_path):
    state = _after(first_event_time({"r:0": 0, "r:1": 0}), {"r:0": (0, 99)}, {"r:0": 100, "r:1": 0})
    assert EventTime.from_json(state.to_json()) == state
    reports = MarkReports(tmp_path)
    assert reports.read(3) is None
    reports.write(3, {"r:0": (5, 9)})
    assert reports.read(3) == {"r:0": (5, 9)}
    for seq in range(4, 40):
        reports.write(seq, {})
    assert reports.read(3) is None and reports.read(39) == {}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"r:0": [5]}', "'r:0'"),
        (b'{"r:0": [5, "9"]}', "'r:0'"),
        (b'{"r:0": [5, true]}', "'r:0'"),
        (b'{"r:0": [9, 5]}', "'r:0'"),
        (b'{"r:0": [5, 9223372036854775808]}', "signed 64-bit"),
    ],
)
def test_a_malformed_marks_report_reads_as_lost_with_a_warning(tmp_path, caplog, text, says):
    """Raising would stop the query's planning, and a restarted query would read the same report again."""
    reports = MarkReports(tmp_path)
    reports.write(4, {"r:0": (5, 9)})
    (tmp_path / f"{3:012d}.json").write_bytes(text)
    with caplog.at_level(logging.WARNING, logger="windjoin.connectors.files.mark_reports"):
        assert reports.read(3) is None
    [warning] = caplog.records
    assert f"{3:012d}.json skipped" in warning.getMessage() and says in warning.getMessage()
    assert reports.read(4) == {"r:0": (5, 9)}
