"""The in-process harness a user tries a spec with (operators.testing): its module example, and late events coming
back as the caller's tags."""

from __future__ import annotations

from windjoin.operators.spec import parse_spec
from windjoin.operators.testing import EventFeed, as_multiset, join_events, oracle_mjoin

SPEC = {
    "window": {"kind": "time", "size_ms": 10},
    "allowed_lateness_ms": 5,
    "streams": {"R": {"fields": {"k": "int"}}, "S": {"fields": {"k": "int"}}},
    "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
}
EVENTS = [
    {"stream": "R", "ts": 100, "k": 1},
    {"stream": "S", "ts": 105, "k": 1},
    {"stream": "S", "ts": 120, "k": 1},  # too far from the R
    {"stream": "R", "ts": 90, "k": 1},  # 30 ms behind: late
    {"stream": "R", "ts": 118, "k": 1},
]


def test_the_module_example_holds():
    spec = parse_spec(SPEC)
    joined = join_events(spec, EVENTS, chunk_size=2)
    got = joined.rows(spec)
    expected, expected_late = oracle_mjoin(SPEC, EVENTS)
    assert as_multiset(got) == as_multiset(expected) and joined.late == expected_late == [3]
    assert [(r["ts"], s["ts"]) for _, r, s in got] == [(100, 105), (118, 120)]


def test_late_events_come_back_as_their_tags():
    feed = EventFeed(parse_spec(SPEC), chunk_size=10)
    for i, event in enumerate(EVENTS):
        assert feed.add(event, f"line {i + 1}") is None  # the chunk is not full yet
    fed = feed.flush()
    assert fed is not None and fed.late == ["line 4"]
    assert [(rec["R"]["ts"], rec["S"]["ts"]) for rec in fed.records()] == [(100, 105), (118, 120)]
    assert feed.flush() is None
