"""Three- and four-stream join cases: four streams of one schema, Hypothesis events over them, and a run of the
MJoin operator checked against the n-way oracle."""

from __future__ import annotations

from hypothesis import event
from hypothesis import strategies as st

from tests.operators.run import run_mjoin
from windjoin.operators.testing.oracle import as_multiset, oracle_mjoin

FIELDS = {"k": "int", "x": "int", "y": "int", "v": "float", "s": "string"}
STREAMS = {
    "A": {"timestamp": "ts", "fields": FIELDS},
    "B": {"timestamp": "t", "fields": FIELDS},
    "C": {"timestamp": "ts", "fields": FIELDS},
    "D": {"timestamp": "time", "fields": FIELDS},
}


@st.composite
def events(draw, max_size: int = 60, hot: bool = False):
    out, clock = [], 0
    for _ in range(draw(st.integers(0, max_size))):
        clock += draw(st.integers(0, 3))  # ties are common
        ts = max(0, clock - draw(st.integers(0, 12)))  # out of order, sometimes beyond the lateness
        stream = draw(st.sampled_from(sorted(STREAMS)))
        out.append(
            {
                "stream": stream,
                STREAMS[stream]["timestamp"]: ts,
                "k": 0 if hot else draw(st.integers(0, 2)),
                "x": draw(st.integers(0, 2)),
                "y": draw(st.integers(0, 2)),
                "v": draw(st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, 3.0])),
                "s": draw(st.sampled_from(["", "a", "b"])),
            }
        )
    return out


def by_task(results: list[tuple], name: str) -> list[tuple]:
    return [r for r in results if r[0] == name]


def check_against_oracle(spec: dict, evs: list[dict], chunk_size: int, probe_order=None) -> list[tuple]:
    expected, expected_late = oracle_mjoin(spec, evs)
    event(f"results: {'none' if not expected else 'some' if len(expected) < 10 else '10+'}")
    got, late, join = run_mjoin(spec, evs, chunk_size, probe_order)
    assert late == expected_late
    assert as_multiset(got) == as_multiset(expected)
    for task in spec["tasks"]:
        name = task["name"]
        assert join.counters[name].outputs == len(by_task(expected, name))
        assert join.counters[name].comparisons >= join.counters[name].outputs or task["on"] == []
    return got
