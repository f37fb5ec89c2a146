"""A window rebuilt from its stored tuples alone (as the streaming job rebuilds a slot's windows from its state
segments after a restart, a replay or a hand-over) remembers which tuples paired and which were closed: it emits
exactly what the window kept in memory emits, and both equal the brute-force oracle."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.operators.join_cases import STREAMS, events, time_windows
from windjoin.operators.join import WindowJoin
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.feed import EventFeed
from windjoin.operators.testing.oracle import as_multiset, oracle_join, ts_field

TRACKED = ["left", "right", "full", "semi", "anti"]


@st.composite
def tracked_specs(draw):
    """Time windows of every bound shape, one to three tasks of which at least one remembers its tuples."""
    tasks = []
    for i in range(draw(st.integers(1, 3))):
        join = ["R", "S"] if draw(st.booleans()) else ["S", "R"]
        on = [{"op": "eq", "left": "R.k", "right": "S.k"}] if draw(st.booleans()) else []
        task = {"name": f"t{i}", "join": join, "on": on, "type": draw(st.sampled_from(["inner", *TRACKED]))}
        if draw(st.integers(0, 3)) == 0:
            task["window"] = draw(time_windows())
        tasks.append(task)
    tasks[0]["type"] = draw(st.sampled_from(TRACKED))
    return {
        "window": draw(time_windows()),
        "allowed_lateness_ms": draw(st.integers(0, 15)),
        "streams": STREAMS,
        "tasks": tasks,
    }


def rebuilt(spec, join: WindowJoin, watermark: int | None) -> WindowJoin:
    """A new join holding `join`'s stored tuples (no flags), stream by stream in arrival order, its flags recalled
    as they stood at the last close (`watermark`)."""
    fresh = WindowJoin(spec, keep_partners=True)
    for stream, store in join.stores.items():
        for block in store.blocks:
            fresh.preload(stream, dict(block.tuples.columns))
    if join.max_event_ts is not None:
        fresh.advance_event_time(join.max_event_ts)
    fresh.recall_flags(watermark)
    return fresh


def run(spec_dict: dict, evs: list[dict], batch: int, rebuild_after: set[int]) -> tuple[list[tuple], list[int]]:
    """`evs` in batches of `batch`, each judged by the watermark of the batches before it (as the job plans it);
    the join rebuilt from its stored tuples before the batches numbered in `rebuild_after`. The results per
    batch (task, left, right; None for a side alone) and the positions refused as late."""
    spec = parse_spec(spec_dict)
    feed = EventFeed(spec, len(evs) + 1, WindowJoin(spec, keep_partners=True))
    lateness = spec_dict["allowed_lateness_ms"]
    results, late, newest, watermark = [], [], None, None
    for number, start in enumerate(range(0, len(evs), batch)):
        if number in rebuild_after:
            feed.join = rebuilt(spec, feed.join, watermark)
        watermark = None if newest is None else newest - lateness
        feed.join.set_watermark(watermark)
        chunk = evs[start : start + batch]
        for position, event in enumerate(chunk, start):
            feed.add(event, position)
        fed = feed.flush()
        late += fed.late
        results.append(as_multiset([_row(spec_dict, r) for r in fed.records()]))
        times = [e[ts_field(spec_dict, e["stream"])] for e in chunk]
        newest = max(times) if newest is None else max(newest, *times)
    results.append(as_multiset([_row(spec_dict, r) for r in feed.finish().records()]))
    return results, late


def _row(spec: dict, record: dict) -> tuple:
    task = next(t for t in spec["tasks"] if t["name"] == record["task"])
    return (record["task"], *(record[s] for s in task["join"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=tracked_specs(),
    evs=st.booleans().flatmap(lambda hot: events(hot_key=hot)),
    batch=st.integers(1, 12),
    rebuild_after=st.sets(st.integers(1, 30)),
)
def test_a_rebuilt_window_emits_what_the_kept_window_emits(spec, evs, batch, rebuild_after):
    kept, kept_late = run(spec, evs, batch, set())
    again, again_late = run(spec, evs, batch, rebuild_after)
    assert again_late == kept_late
    assert again == kept  # batch by batch: nothing emitted twice, nothing lost, nothing late or early
    accepted = [e for i, e in enumerate(evs) if i not in set(kept_late)]
    expected, _ = oracle_join({**spec, "allowed_lateness_ms": 10**9}, accepted)
    assert sum(kept, start=as_multiset([])) == as_multiset(expected)


def test_a_partner_stays_while_a_tuple_it_paired_with_can_still_close():
    """Left outer over [-10, 10]: R at 100 pairs with S at 95. S alone could go once the watermark passes 105, but R
    closes only after 110; a rebuild in between must still find S, or R's row would come out as unpaired."""
    spec = parse_spec(
        {
            "window": {"kind": "time", "size_ms": 10},
            "streams": STREAMS,
            "tasks": [{"name": "t", "join": ["R", "S"], "type": "left"}],
        }
    )
    assert spec.history_ms("S") == 10 and spec.recall_history_ms("S") == 20 and spec.recall_history_ms("R") == 10
    join = WindowJoin(spec, keep_partners=True)
    feed = EventFeed(spec, 2, join)
    join.set_watermark(0)
    feed.add({"stream": "S", "t": 95, "k": 0, "a": 0, "b": 0.0, "c": "", "d": False}, 0)
    fed = feed.add({"stream": "R", "ts": 100, "k": 0, "x": 0, "y": 0.0, "z": "", "f": False}, 1)
    assert [r["task"] for r in fed.records()] == ["t"]  # the pair
    join.set_watermark(107)
    feed.join = rebuilt(spec, join, 107)
    feed.join.set_watermark(111)  # R's window has passed: it closes, paired
    assert feed.join.finish() == [] and feed.finish().records() == []


def test_recall_needs_a_join_that_keeps_partners():
    spec = parse_spec(
        {
            "window": {"kind": "time", "size_ms": 10},
            "streams": STREAMS,
            "tasks": [{"name": "t", "join": ["R", "S"], "type": "anti"}],
        }
    )
    with pytest.raises(ValueError, match="keep_partners"):
        WindowJoin(spec).recall_flags(0)
