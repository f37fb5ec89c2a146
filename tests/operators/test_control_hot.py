"""SplitJoin's spread of a hot group over k slots: store at one (by the record's hash, as the job's adapter
does), probe at all; real WindowJoins per slot together give exactly the global join."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.models.control_sim import SimSlot, equi_spec
from windjoin.operators.batch import Arrivals
from windjoin.operators.control.hot import Spread, plan_spread, store_turns
from windjoin.operators.control.shedding import record_hash
from windjoin.operators.control.window_rows import take_rows
from windjoin.operators.join import WindowJoin
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join


def run_spread(events: list[dict], spread: Spread, batch: int, window_ms: int) -> tuple[list, dict[int, int]]:
    """Each batch goes to every slot of the spread; each slot keeps the pairs whose earlier tuple it stores, then
    forgets the tuples it only probed with."""
    spec = parse_spec(equi_spec(window_ms, 1, 1))
    slots = {s: SimSlot(s, RoutingTable.round_robin(1, 1), spec) for s in spread.slots}
    stored_at = store_slots(spread, [e["id"] for e in events])
    results = []
    for start in range(0, len(events), batch):
        chunk = events[start : start + batch]
        for s, slot in slots.items():
            for task, r, s_tuple in slot.run(chunk):
                earlier = min(r["id"], s_tuple["id"])  # ids are arrival positions
                if stored_at[earlier] == s:
                    results.append((task, r, s_tuple))
            for stream in "RS":
                take_rows(
                    slot.join, stream, lambda cols, s=s: np.array([stored_at[i] != s for i in cols["id"].tolist()])
                )
    held = {s: sum(len(store) for store in slot.join.stores.values()) for s, slot in slots.items()}
    return results, held


def store_slots(spread: Spread, offsets: list[int]) -> dict[int, int]:
    """Where the job stores each record of a spread partition: by the hash of its (topic, partition, offset)."""
    turns = store_turns(record_hash("hot", 0, np.asarray(offsets, dtype=np.int64)), len(spread.slots))
    return {o: spread.slots[t] for o, t in zip(offsets, turns.tolist(), strict=True)}


@st.composite
def hot_events(draw):
    n = draw(st.integers(0, 150))
    out, clock = [], 0
    for i in range(n):
        clock += draw(st.integers(0, 2))
        key = draw(st.sampled_from([7, 7, 7, 7, 3]))  # one hot key and a colder one in the same group
        out.append({"stream": draw(st.sampled_from("RS")), "ts": clock, "k": key, "id": i})
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=hot_events(), k=st.integers(1, 4), batch=st.integers(1, 40), window_ms=st.integers(1, 25))
def test_store_at_one_probe_at_all_is_the_global_join(events, k, batch, window_ms):
    spread = Spread(Group(0), tuple(range(10, 10 + k)))
    got, _ = run_spread(events, spread, batch, window_ms)
    expected, _ = oracle_join(equi_spec(window_ms, 1, 1), events)
    assert as_multiset(got) == as_multiset(expected)


def test_each_slot_stores_a_kth_of_the_window():
    events = [{"stream": "RS"[i % 2], "ts": i, "k": 7, "id": i} for i in range(600)]
    spread = Spread(Group(0), (0, 1, 2))
    _, held = run_spread(events, spread, batch=50, window_ms=10**6)
    chosen = list(store_slots(spread, list(range(600))).values())
    assert held == {s: chosen.count(s) for s in spread.slots}
    assert all(160 <= n <= 240 for n in held.values())  # a third each, within hashing's spread


def test_storing_everywhere_would_duplicate():
    """The filter is what makes it exact: keeping every slot's pairs counts each pair k times."""
    events = [{"stream": "RS"[i % 2], "ts": i, "k": 7, "id": i} for i in range(40)]
    spec = parse_spec(equi_spec(100, 1, 1))
    slots = [SimSlot(s, RoutingTable.round_robin(1, 1), spec) for s in range(3)]
    everything = [p for slot in slots for p in slot.run(events)]
    expected, _ = oracle_join(equi_spec(100, 1, 1), events)
    assert len(everything) == 3 * len(expected)


def test_store_turns_are_a_function_of_the_record_alone():
    """A replayed or differently cut batch stores every record where it did the first time."""
    hashes = record_hash("orders", 3, np.arange(1000))
    whole = store_turns(hashes, 3)
    assert np.array_equal(np.concatenate([store_turns(hashes[:7], 3), store_turns(hashes[7:], 3)]), whole)
    assert set(whole.tolist()) == {0, 1, 2}
    assert np.array_equal(store_turns(record_hash("orders", 3, np.arange(1000)), 3), whole)
    with pytest.raises(ValueError, match="distinct"):
        Spread(Group(0), (1, 1))


def test_placement():
    spread = plan_spread(Group(3), home=2, k=3, occupancy={0: 0.5, 1: 0.1, 2: 0.99, 3: 0.1})
    assert spread.slots == (2, 1, 3)
    with pytest.raises(ValueError, match="only 4 exist"):
        plan_spread(Group(3), home=2, k=5, occupancy={0: 0.5, 1: 0.1, 2: 0.99, 3: 0.1})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=hot_events(), k=st.integers(1, 4), batch=st.integers(1, 40), window_ms=st.integers(1, 25))
def test_probe_only_rows_give_the_global_join_without_filtering(events, k, batch, window_ms):
    """The operator's own probe-only rows (Arrivals.stored): k joins, each storing its share, emit each pair once."""
    spec_dict = equi_spec(window_ms, 1, 1)
    spec = parse_spec(spec_dict)
    joins = [WindowJoin(spec) for _ in range(k)]
    results = []
    for start in range(0, len(events), batch):
        chunk = events[start : start + batch]
        for s, join in enumerate(joins):
            arrivals = {}
            for stream in "RS":
                rows = [i for i, e in enumerate(chunk) if e["stream"] == stream]
                if rows:
                    columns = {f: np.array([chunk[i][f] for i in rows]) for f in ("ts", "k", "id")}
                    stored = np.array([chunk[i]["id"] % k == s for i in rows])
                    arrivals[stream] = Arrivals(columns, np.array(rows), stored=stored)
            for pairs in join.process(arrivals).pairs:
                sides = [
                    [dict(zip(("ts", "k", "id"), map(int, t), strict=True)) for t in _tuples(pairs, s)] for s in "RS"
                ]
                results += [(pairs.task, r, s_) for r, s_ in zip(*sides, strict=True)]
    expected, _ = oracle_join(spec_dict, events)
    assert as_multiset(results) == as_multiset(expected)


def _tuples(pairs, stream: str):
    columns = pairs.sides[stream]
    return zip(columns["ts"], columns["k"], columns["id"], strict=True)
