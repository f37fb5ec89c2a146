"""The slot's join of tumbling and hopping windows and of as-of tasks over batches, without Spark, against the
brute-force oracles: whether a batch finds its windows cached or rebuilds them from the state segments, and when a
batch runs again after its state was rolled back. As-of versions outlive the segments' expiry by time (lateness 0
here: a segment expires the batch after it came), cut down to the versions a key still has."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pipelines.job.slot_harness import SlotRun
from tests.pipelines.job.test_slot_join_oracle import _batches, events_strategy, spec_dict
from tests.support.asof_oracle import oracle_asof
from tests.support.window_oracle import oracle_windowed
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.job import join_state

TYPES = ["inner", "left", "right", "full", "semi", "anti"]


def run_batches(spec: dict, raw: list, rebuilds: list[bool], replays: list[bool], monkeypatch) -> SlotRun:
    run = SlotRun(parse_spec(spec), monkeypatch)
    cached = join_state.cached_windows
    watermark = None
    for number, batch in enumerate(_batches(raw)):
        monkeypatch.setattr(join_state, "cached_windows", (lambda *a: None) if rebuilds[number % 40] else cached)
        if replays[number % 40]:
            saved = run.save()
            run.run(batch, watermark)
            run.restore(saved)  # the attempt failed after the slots ran: it runs again
        run.run(batch, watermark)
        watermark = max((e["ts"] for e in batch), default=watermark)
    run.run([], watermark + 10**6 if watermark is not None else None)  # time passes every window
    return run


def sink_rows(run: SlotRun, spec: dict, windowed: bool) -> Counter:
    out: Counter = Counter()
    for task in spec["tasks"]:
        for row in run.sink.rows(task["name"]):
            sides = [None if row[s] is None else tuple(sorted(row[s].items())) for s in task["join"]]
            window = (row["window_start"], row["window_end"]) if windowed else ()
            out[(task["name"], *window, *sides)] += 1
    return out


flags = st.lists(st.booleans(), min_size=40, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=events_strategy,
    window=st.sampled_from(
        [
            {"kind": "tumbling", "size_ms": 30},
            {"kind": "tumbling", "size_ms": 50, "offset_ms": 20},
            {"kind": "hopping", "size_ms": 60, "hop_ms": 20},
            {"kind": "hopping", "size_ms": 40, "hop_ms": 40, "offset_ms": 5},
        ]
    ),
    kinds=st.tuples(st.sampled_from(TYPES), st.sampled_from(TYPES)),
    rebuilds=flags,
    replays=flags,
)
def test_tumbling_and_hopping_slots_equal_the_oracle_through_rebuilds_and_replays(
    raw, window, kinds, rebuilds, replays, monkeypatch
):
    spec = spec_dict(window, partitions=8)
    for task, kind in zip(spec["tasks"], kinds, strict=True):
        task["type"] = kind
    run = run_batches(spec, raw, rebuilds, replays, monkeypatch)
    expected, _ = oracle_windowed(spec, [e for batch in _batches(raw) for e in batch])
    assert sink_rows(run, spec, windowed=True) == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=events_strategy,
    kinds=st.tuples(st.sampled_from(["asof", "asof_left"]), st.sampled_from(["asof", "asof_left", "inner"])),
    max_age=st.one_of(st.none(), st.integers(0, 100)),
    rebuilds=flags,
    replays=flags,
)
def test_as_of_slots_equal_the_oracle_through_rebuilds_and_replays(raw, kinds, max_age, rebuilds, replays, monkeypatch):
    spec = spec_dict({"kind": "time", "size_ms": 10}, partitions=8)
    for task, kind in zip(spec["tasks"], kinds, strict=True):
        task["type"] = kind
        if kind != "inner":
            task["on"] = [p for p in task["on"] if p["op"] == "eq"]
            if max_age is not None:
                task["max_age_ms"] = max_age
    run = run_batches(spec, raw, rebuilds, replays, monkeypatch)
    events = [e for batch in _batches(raw) for e in batch]
    expected, _ = oracle_asof({**spec, "tasks": [t for t in spec["tasks"] if t["type"] != "inner"]}, events)
    got = sink_rows(run, {**spec, "tasks": [t for t in spec["tasks"] if t["type"] != "inner"]}, windowed=False)
    assert got == expected
