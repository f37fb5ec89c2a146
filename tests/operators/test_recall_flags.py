"""A window rebuilt from its stored tuples alone (as the streaming job rebuilds a slot's windows from its state
segments after a restart, a replay or a hand-over) remembers which tuples paired and which were closed: it emits
exactly what the window kept in memory emits, and both equal the brute-force oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.operators.join_cases import STREAMS, events, time_windows
from windjoin.operators.batch import Arrivals, TupleBatch
from windjoin.operators.join import WindowJoin
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.feed import EventFeed
from windjoin.operators.testing.oracle import as_multiset, oracle_join, ts_field

TRACKED = ["left", "right", "full", "semi", "anti"]


@st.composite
def tracked_specs(draw):
    """Time windows of every bound shape and count windows, one to three tasks of which at least one remembers
    its tuples."""
    counted = draw(st.integers(0, 2)) == 0
    tasks = []
    for i in range(draw(st.integers(1, 3))):
        join = ["R", "S"] if draw(st.booleans()) else ["S", "R"]
        on = [{"op": "eq", "left": "R.k", "right": "S.k"}] if draw(st.booleans()) else []
        task = {"name": f"t{i}", "join": join, "on": on, "type": draw(st.sampled_from(["inner", *TRACKED]))}
        if not counted and draw(st.integers(0, 3)) == 0:
            task["window"] = draw(time_windows())
        tasks.append(task)
    tasks[0]["type"] = draw(st.sampled_from(TRACKED))
    return {
        "window": {"kind": "count", "size": draw(st.integers(1, 6))} if counted else draw(time_windows()),
        "allowed_lateness_ms": draw(st.integers(0, 15)),
        "streams": STREAMS,
        "tasks": tasks,
    }


def rebuilt(spec, join: WindowJoin, watermark: int | None) -> WindowJoin:
    """A new join holding `join`'s stored tuples (no flags, no numbers: as the job stores them, in arrival order
    across streams), its flags recalled as they stood at the last close (`watermark`)."""
    fresh = WindowJoin(spec, keep_partners=True)
    held = {s: TupleBatch.concat([b.tuples for b in store.blocks]) for s, store in join.stores.items() if store.blocks}
    if held:
        ranks = np.argsort(np.argsort(np.concatenate([t.seq for t in held.values()])))
        ends = np.cumsum([len(t) for t in held.values()])
        fresh.preload_arrivals(
            {s: Arrivals(dict(t.columns), ranks[e - len(t) : e]) for (s, t), e in zip(held.items(), ends, strict=True)}
        )
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


def test_a_count_window_keeps_the_partners_an_open_tuple_paired_with():
    """Left outer over the 2 newest: R0 pairs with S1 and S2, which three later S tuples push out of S's window.
    R0 stays open (no newer R); a rebuild must still find its partners, or R0 would close unpaired."""
    spec = parse_spec(
        {
            "window": {"kind": "count", "size": 2},
            "streams": STREAMS,
            "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.x", "right": "S.a"}],
                       "type": "left"}],
        }
    )  # fmt: skip
    join = WindowJoin(spec, keep_partners=True)
    feed = EventFeed(spec, 1, join)
    s = {"stream": "S", "k": 0, "b": 0.0, "c": "", "d": False}
    feed.add({**s, "t": 1, "a": 1}, 0)
    feed.add({**s, "t": 2, "a": 1}, 1)
    fed = feed.add({"stream": "R", "ts": 3, "k": 0, "x": 1, "y": 0.0, "z": "", "f": False}, 2)
    assert len(fed.records()) == 2
    for i in range(3):
        feed.add({**s, "t": 4 + i, "a": 9}, 3 + i)
    assert join.first_kept()["S"] == 0  # both partners kept while R0 is open
    feed.join = rebuilt(spec, join, None)
    for i in range(2):  # two newer R tuples close R0: paired, nothing alone
        fed = feed.add({"stream": "R", "ts": 8 + i, "k": 0, "x": 5, "y": 0.0, "z": "", "f": False}, 6 + i)
        assert fed.records() == []


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
