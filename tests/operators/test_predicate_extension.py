"""A new predicate op is one class: a toy op, registered for these tests only, joins exactly like the oracle."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.operators.join_cases import STREAMS, check_against_oracle, events
from tests.operators.run import run_join
from tests.support import mjoin_cases
from windjoin.operators.predicate_ops import REGISTRY, IndexKind, PredicateOp
from windjoin.operators.predicate_ops.base import Buffer, Width
from windjoin.operators.spec import SpecError, parse_spec
from windjoin.operators.testing.oracle import OPS


class Lead(PredicateOp):
    """`0 <= left - right <= width`: left leads right by at most the width (asymmetric, so it has a mirror)."""

    name = "lead"
    index = IndexKind.ORDERED
    takes_width = True
    numeric_only = True
    sign = 1  # the mirror, `lag`, compares probe - stored

    def mirrored(self) -> PredicateOp:
        return Lag()

    def evaluate(self, stored: np.ndarray, probe: np.ndarray, width: Width, out: Buffer, scratch: Buffer) -> np.ndarray:
        lead = np.subtract(stored, probe) * self.sign
        return np.logical_and(lead >= 0, lead <= width, out=out)

    def bounds(self, probe: np.ndarray, width: Width) -> tuple[np.ndarray, np.ndarray]:
        return (probe, probe + width) if self.sign > 0 else (probe - width, probe)

    def bucket_width(self, width: Width) -> float:
        return float(width) or 1.0

    def selectivity(self, stored: np.ndarray, width: Width) -> float:
        return 0.01  # cheap enough that the index always serves it


class Lag(Lead):
    sign = -1

    def mirrored(self) -> PredicateOp:
        return Lead()


@pytest.fixture(autouse=True, scope="module")
def lead_op() -> Iterator[None]:
    """`lead` is known to specs and to the oracle while this module runs, and nowhere else."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(REGISTRY, Lead.name, Lead())
        patch.setitem(OPS, Lead.name, lambda left, right, width: 0 <= left - right <= width)
        yield


@st.composite
def lead_specs(draw):
    """Specs whose tasks join R and S on `lead` (either side first), sometimes with an `eq` beside it."""
    if draw(st.booleans()):
        window = {"kind": "time", "size_ms": draw(st.integers(0, 40))}
    else:
        window = {"kind": "count", "size": draw(st.integers(1, 12))}
    tasks = []
    for i in range(draw(st.integers(1, 2))):
        r_field, s_field = draw(st.sampled_from([("x", "a"), ("y", "b"), ("x", "b"), ("ts", "t")]))
        left, right = ("R." + r_field, "S." + s_field)
        if draw(st.booleans()):
            left, right = right, left
        width = draw(st.one_of(st.integers(0, 6), st.sampled_from([0.5, 1.25, 3.75])))
        on = [{"op": "lead", "left": left, "right": right, "width": width}]
        if draw(st.booleans()):
            on.append({"op": "eq", "left": "R.k", "right": "S.k"})
        tasks.append({"name": f"t{i}", "join": draw(st.sampled_from([["R", "S"], ["S", "R"]])), "on": on})
    return {"window": window, "allowed_lateness_ms": draw(st.integers(0, 15)), "streams": STREAMS, "tasks": tasks}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=lead_specs(), evs=events(), chunk_size=st.integers(1, 80))
def test_a_toy_op_joins_like_the_oracle(spec, evs, chunk_size):
    check_against_oracle(spec, evs, chunk_size)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    evs=mjoin_cases.events(),
    widths=st.tuples(st.sampled_from([0, 1, 2]), st.sampled_from([0.5, 1, 2.5])),
    chunk_size=st.integers(1, 50),
    data=st.data(),
)
def test_a_toy_op_joins_three_streams_like_the_oracle(evs, widths, chunk_size, data):
    """MJoin turns it toward whichever stream probes, in any probe order."""
    on = [
        {"op": "eq", "left": "A.k", "right": "B.k"},
        {"op": "lead", "left": "B.x", "right": "C.y", "width": widths[0]},
        {"op": "lead", "left": "C.v", "right": "A.v", "width": widths[1]},
    ]
    spec = {
        "window": {"kind": "time", "size_ms": 20},
        "streams": mjoin_cases.STREAMS,
        "tasks": [{"name": "t", "join": ["A", "B", "C"], "on": on}],
    }
    order = data.draw(st.one_of(st.none(), st.permutations(["A", "B", "C"]).map(lambda o: {"t": o})))
    mjoin_cases.check_against_oracle(spec, evs, chunk_size, order)


def test_the_ordered_index_serves_a_toy_op():
    """Its bounds narrow the candidates: far fewer comparisons than the nested loop's, the same pairs."""
    rng = random.Random(7)
    evs = []
    for i in range(1200):
        stream = rng.choice("RS")
        value = rng.randint(0, 2000)
        if stream == "R":
            evs.append({"stream": "R", "ts": i, "k": 0, "x": value, "y": 0.0, "z": "", "f": True})
        else:
            evs.append({"stream": "S", "t": i, "k": 0, "a": value, "b": 0.0, "c": "", "d": True})
    spec = {
        "window": {"kind": "count", "size": 5000},
        "streams": STREAMS,
        "tasks": [
            {"name": "lead", "join": ["R", "S"], "on": [{"op": "lead", "left": "R.x", "right": "S.a", "width": 3}]}
        ],
    }
    check_against_oracle(spec, evs, 200)
    _, _, join = run_join(spec, evs, 200)
    pairs_considered = sum(1 for e in evs if e["stream"] == "R") * sum(1 for e in evs if e["stream"] == "S")
    assert join.counters["lead"].comparisons < pairs_considered / 20


@pytest.mark.parametrize(
    ("pred", "expected"),
    [
        ({"op": "lead", "left": "R.x", "right": "S.a"}, ["tasks[0].on[0].width: op 'lead' needs a width"]),
        ({"op": "lead", "left": "R.z", "right": "S.c", "width": 1}, ["tasks[0].on[0]: op 'lead' compares numbers"]),
        ({"op": "eq", "left": "R.x", "right": "S.a", "width": 1}, ["(width is for ops ['band', 'outside', 'lead'])"]),
        (
            {"op": "leads", "left": "R.x", "right": "S.a"},
            ["tasks[0].on[0].op: unknown op 'leads'", "'outside', 'lead'])"],
        ),
    ],
)
def test_a_toy_op_is_checked_like_the_others(pred, expected):
    spec = {"window": {"kind": "count", "size": 3}, "streams": STREAMS, "tasks": [{"name": "t", "join": ["R", "S"]}]}
    spec["tasks"][0]["on"] = [pred]
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    for part in expected:
        assert part in str(err.value)
