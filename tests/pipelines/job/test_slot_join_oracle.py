"""The slot's join over batches, without Spark, against the brute-force oracle: the pooled layout (one join for all
of a slot's partitions) and the per-partition one (count windows), with ties, empty batches and single-key skew."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pipelines.job.slot_harness import SlotRun
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job import join_state
from windjoin.pipelines.job.slot_windows import PartitionWindows, PooledWindows

T0 = 1_700_000_000_000


def spec_dict(window: dict, partitions: int, slots: int = 2) -> dict:
    return {
        "window": window,
        "allowed_lateness_ms": 0,
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "topic": "r", "key": "k"},
            "S": {"fields": {"k": "int", "a": "int"}, "topic": "s", "key": "k"},
        },
        "tasks": [
            {"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
            {
                "name": "band",
                "join": ["S", "R"],
                "on": [
                    {"op": "eq", "left": "S.k", "right": "R.k"},
                    {"op": "band", "left": "S.a", "right": "R.x", "width": 3},
                ],
            },
        ],
        "partitions": partitions,
        "slots": slots,
    }


events_strategy = st.lists(
    st.tuples(
        st.sampled_from(["R", "S"]),
        st.integers(0, 40),  # gap to the previous event's time (0: a tie)
        st.one_of(st.integers(0, 6), st.just(1)),  # keys, 1 often: single-key skew
        st.integers(0, 20),
        st.integers(0, 3),  # which batch ends after this event (0: this one)
    ),
    min_size=10,
    max_size=120,
)


def _batches(raw: list[tuple]) -> list[list[dict]]:
    """Events in time order, cut into batches (some empty)."""
    batches: list[list[dict]] = [[]]
    ts = T0
    for stream, gap, key, value, cut in raw:
        ts += gap
        field = "x" if stream == "R" else "a"
        batches[-1].append({"stream": stream, "ts": ts, "k": key, field: value})
        if cut == 0:
            batches.append([])
    return batches


def _rows(run: SlotRun, task: str) -> list[tuple]:
    left, right = next(t.join for t in run.spec.tasks if t.name == task)
    return [(task, row[left], row[right]) for row in run.sink.rows(task)]


TIME_WINDOWS = [
    {"kind": "time", "size_ms": 0},
    {"kind": "time", "size_ms": 25},
    {"kind": "time", "size_ms": 200},
    {"kind": "time", "lower_ms": -200, "upper_ms": 25},  # asymmetric around zero
    {"kind": "time", "lower_ms": 0, "upper_ms": 60},  # the second after the first
    {"kind": "time", "lower_ms": -60, "upper_ms": -10},  # the second before the first
    {"kind": "time", "lower_ms": 15, "upper_ms": 15},  # one point
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=events_strategy,
    window=st.sampled_from(TIME_WINDOWS),
    band_window=st.one_of(st.none(), st.sampled_from(TIME_WINDOWS)),
)
def test_pooled_slots_equal_the_oracle(raw, window, band_window, monkeypatch):
    """Symmetric and asymmetric bounds, for the spec and for one task of its own (`band` joins [S, R]: its
    bounds are read the other way round), with state expired as the bounds allow."""
    spec = spec_dict(window, partitions=8)
    if band_window is not None:
        spec["tasks"][1]["window"] = band_window
    run = SlotRun(parse_spec(spec), monkeypatch)
    watermark = None
    for batch in _batches(raw):
        stats = run.run(batch, watermark)
        assert sum(s["dead"] for s in stats) == 0
        # the next batch's watermark: no event of it is older (time order), so expiry is exercised, lateness never
        watermark = max((e["ts"] for e in batch), default=watermark)
    events = [e for batch in _batches(raw) for e in batch]
    expected, late = oracle_join(spec, events)
    assert not late
    got = _rows(run, "eq") + _rows(run, "band")
    assert as_multiset(got) == as_multiset(expected)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=events_strategy, size=st.sampled_from([1, 3, 10]))
def test_per_partition_slots_equal_the_oracle_on_a_count_window(raw, size, monkeypatch):
    """Count windows number each partition's arrivals: one partition here, events in the slot's arrival order
    (event time, then topic) so the oracle's single numbering is the slot's."""
    spec = spec_dict({"kind": "count", "size": size}, partitions=1, slots=1)
    run = SlotRun(parse_spec(spec), monkeypatch)
    batches = [sorted(b, key=lambda e: (e["ts"], e["stream"])) for b in _batches(raw)]
    for batch in batches:
        run.run(batch, None)
    expected, _ = oracle_join(spec, [e for b in batches for e in b])
    assert as_multiset(_rows(run, "eq") + _rows(run, "band")) == as_multiset(expected)


@pytest.mark.parametrize(
    ("window", "layout"),
    [({"kind": "time", "size_ms": 10}, PooledWindows), ({"kind": "count", "size": 4}, PartitionWindows)],
)
def test_the_spec_chooses_the_layout(window, layout, monkeypatch):
    run = SlotRun(parse_spec(spec_dict(window, partitions=4)), monkeypatch)
    run.run([{"stream": "R", "ts": T0, "k": 1, "x": 0}], None)
    from windjoin.pipelines.job.slot_windows import _CACHE

    assert all(isinstance(_CACHE[label], layout) for label in run.slots)


def test_tuples_behind_the_watermark_are_dead_lettered_and_join_nothing(monkeypatch):
    spec = spec_dict({"kind": "time", "size_ms": 100}, partitions=4)
    run = SlotRun(parse_spec(spec), monkeypatch)
    first = [{"stream": "R", "ts": T0 + i, "k": i % 3, "x": i} for i in range(0, 60, 3)]
    second = [{"stream": "S", "ts": T0 + i, "k": i % 3, "a": i} for i in range(0, 120, 4)]
    run.run(first, None)
    stats = run.run(second, T0 + 50)
    late = [e for e in second if e["ts"] < T0 + 50]
    assert sum(s["dead_by_reason"].get("late", 0) for s in stats) == len(late) > 0
    expected, _ = oracle_join(spec, first + [e for e in second if e["ts"] >= T0 + 50])
    assert as_multiset(_rows(run, "eq") + _rows(run, "band")) == as_multiset(expected)


def test_a_replayed_batch_makes_the_same_pieces_and_the_same_results(monkeypatch):
    """Spark rolls a failed batch's state back and runs it again: the adapter and the packer make the same pieces,
    and the slot, whose cached windows already hold the failed attempt's tuples, must not use them."""
    spec = spec_dict({"kind": "time", "size_ms": 50}, partitions=8)
    run = SlotRun(parse_spec(spec), monkeypatch)
    batches = [
        [{"stream": "RS"[i % 2], "ts": T0 + 10 * b + i, "k": i % 3, "xa"[i % 2]: i} for i in range(12)]
        for b in range(4)
    ]
    for batch in batches[:3]:
        run.run(batch, None)
    saved = run.save()
    pieces = run.pieces(batches[3], None)
    run.run(batches[3], None)
    first = {task: _rows(run, task) for task in ("eq", "band")}
    run.restore(saved)  # the attempt failed after the slots ran: state rolled back, results staged again
    assert run.pieces(batches[3], None) == pieces
    run.run(batches[3], None)
    again = {task: _rows(run, task) for task in ("eq", "band")}
    assert again == first and sum(map(len, first.values())) > 0


TRACKED_TYPES = ["left", "right", "full", "semi", "anti"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=events_strategy,
    window=st.sampled_from(TIME_WINDOWS),
    kinds=st.tuples(st.sampled_from(TRACKED_TYPES), st.sampled_from(["inner", *TRACKED_TYPES])),
    rebuilds=st.lists(st.booleans(), min_size=40, max_size=40),
    replays=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_outer_semi_and_anti_slots_equal_the_oracle_through_rebuilds_and_replays(
    raw, window, kinds, rebuilds, replays, monkeypatch
):
    """Outer, semi and anti tasks in the pooled layout: rows alone come once, whether a batch finds its windows
    cached or rebuilds them from the state segments (their flags recalled), and when a batch is run again after
    its state was rolled back."""
    spec = spec_dict(window, partitions=8)
    for task, kind in zip(spec["tasks"], kinds, strict=True):
        task["type"] = kind
    run = SlotRun(parse_spec(spec), monkeypatch)
    cached = join_state.cached_windows
    watermark = None
    for number, batch in enumerate(_batches(raw)):
        rebuild = rebuilds[number % 40]
        monkeypatch.setattr(join_state, "cached_windows", (lambda *a: None) if rebuild else cached)
        if replays[number % 40]:
            saved = run.save()
            run.run(batch, watermark)
            run.restore(saved)  # the attempt failed after the slots ran: it runs again
        run.run(batch, watermark)
        watermark = max((e["ts"] for e in batch), default=watermark)
    run.run([], watermark + 10**6 if watermark is not None else None)  # time passes every window: all closed
    events = [e for batch in _batches(raw) for e in batch]
    expected, _ = oracle_join(spec, events)
    got = _rows(run, "eq") + _rows(run, "band")
    assert as_multiset(got) == as_multiset(expected)


def _closers(size: int, after: int) -> list[dict]:
    """`size` tuples of each stream after every other, keyed apart from everything (they pair with nothing):
    they close every earlier tuple of a count window."""
    return [
        {"stream": stream, "ts": after + i, "k": 100 + i, "x" if stream == "R" else "a": 0}
        for i in range(size)
        for stream in ("R", "S")
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=events_strategy,
    size=st.sampled_from([1, 3, 10]),
    kinds=st.tuples(st.sampled_from(TRACKED_TYPES), st.sampled_from(["inner", *TRACKED_TYPES])),
    rebuilds=st.lists(st.booleans(), min_size=40, max_size=40),
    replays=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_outer_semi_and_anti_slots_over_a_count_window_equal_the_oracle_through_rebuilds_and_replays(
    raw, size, kinds, rebuilds, replays, monkeypatch
):
    """Count windows (the per-partition layout, one partition so the oracle's numbering is the slot's): a tuple
    alone comes out once `size` newer tuples of its stream arrived, whether the windows were cached or rebuilt
    from the segments (flags recalled from the stored arrival order), and when a batch runs again after its state
    was rolled back. Closers at the end close every tuple of the input; rows of the closers are left out."""
    spec = spec_dict({"kind": "count", "size": size}, partitions=1, slots=1)
    for task, kind in zip(spec["tasks"], kinds, strict=True):
        task["type"] = kind
    run = SlotRun(parse_spec(spec), monkeypatch)
    cached = join_state.cached_windows
    batches = [sorted(b, key=lambda e: (e["ts"], e["stream"])) for b in _batches(raw)]
    batches.append(_closers(size, max(e["ts"] for b in batches for e in b) + 1))
    for number, batch in enumerate(batches):
        monkeypatch.setattr(join_state, "cached_windows", (lambda *a: None) if rebuilds[number % 40] else cached)
        if replays[number % 40]:
            saved = run.save()
            run.run(batch, None)
            run.restore(saved)
        run.run(batch, None)

    def real(rows: list[tuple]) -> list[tuple]:
        return [r for r in rows if all(side is None or side["k"] < 100 for side in r[1:])]

    expected, _ = oracle_join(spec, [e for b in batches for e in b])
    assert as_multiset(real(_rows(run, "eq") + _rows(run, "band"))) == as_multiset(real(expected))


def test_segments_keep_the_partners_an_open_tuple_paired_with(monkeypatch):
    """Left outer over the newest 1: R0 pairs with S1, then S2 and S3 push S1 out of S's window while R0 stays
    open. The segment holding S1 must outlive S's window: rebuilt without it, R0 would close unpaired."""
    spec = spec_dict({"kind": "count", "size": 1}, partitions=1, slots=1)
    spec["tasks"][0]["type"] = "left"
    run = SlotRun(parse_spec(spec), monkeypatch)
    batches = [[{"stream": "R", "ts": T0, "k": 1, "x": 0}]]
    batches += [[{"stream": "S", "ts": T0 + i, "k": i, "a": 0}] for i in (1, 2, 3)]
    for batch in batches:
        run.run(batch, None)
    monkeypatch.setattr(join_state, "cached_windows", lambda *a: None)  # rebuilt from the segments
    run.run([{"stream": "R", "ts": T0 + 4, "k": 9, "x": 0}], None)  # closes R0
    assert [tuple(side and side["k"] for side in r[1:]) for r in _rows(run, "eq")] == [(1, 1)]  # no (1, None)
