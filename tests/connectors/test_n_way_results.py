"""Results of a 3-way task through the sinks and the query core, on real Redis and real Parquet files: one object
per joined stream everywhere, and the result time is the latest of all three timestamps (whichever stream holds
it), in Redis scores, decoded members, the feed, the Parquet span filter and one-time queries across the tiers."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.connectors.tiers import TiersLayout
from tests.support.redis_rows import redis_rows
from windjoin.connectors.results.redis_tier import read_all
from windjoin.connectors.results.result_query import MAX_LIMIT
from windjoin.operators.query.conditions import parse_condition
from windjoin.operators.result_table import result_schema, result_times, table_from_records
from windjoin.operators.spec import parse_spec

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SPEC = parse_spec(
    {
        "window": {"kind": "time", "size_ms": 1000},
        "streams": {
            "A": {"timestamp": "ts", "fields": {"k": "int", "x": "float"}},
            "B": {"timestamp": "t", "fields": {"k": "int", "z": "string"}},
            "C": {"timestamp": "u", "fields": {"k": "int", "d": "bool"}},
        },
        "tasks": [
            {
                "name": "tri",
                "join": ["C", "A", "B"],
                "on": [{"op": "eq", "left": "A.k", "right": "B.k"}, {"op": "eq", "left": "B.k", "right": "C.k"}],
            }
        ],
    }
)
JOIN = ["C", "A", "B"]
TS = {"A": "ts", "B": "t", "C": "u"}
times = st.integers(0, 1000)
combo = st.fixed_dictionaries(
    {
        "A": st.fixed_dictionaries({"ts": times, "k": st.integers(0, 3), "x": st.sampled_from([0.5, -1.0, 3.0])}),
        "B": st.fixed_dictionaries({"t": times, "k": st.integers(0, 3), "z": st.sampled_from(["", "a", 'q"\n'])}),
        "C": st.fixed_dictionaries({"u": times, "k": st.integers(0, 3), "d": st.booleans()}),
    }
)


def result_time(c: dict[str, Any]) -> int:
    return max(c[s][TS[s]] for s in JOIN)


def canonical(c: dict[str, Any]) -> bytes:
    return orjson.dumps({s: c[s] for s in JOIN}, option=orjson.OPT_SORT_KEYS)


def tri_table(task: str, batch: int, combos: list[dict[str, Any]], emitted_at: int) -> pa.Table:
    table = table_from_records(SPEC, task, combos, batch, emitted_at)
    assert table.column_names == [*JOIN, "batch_id", "emitted_at"]
    return table


def record(task: str, batch: int, row: int, combo: dict[str, Any], emitted_at: int) -> tuple[int, int, int, bytes]:
    return (result_time(combo), batch, row, canonical(combo))


@pytest.fixture
def tiers_layout() -> TiersLayout:
    return TiersLayout(SPEC, ("tri",), tri_table, record)


def got(rows: list[dict[str, Any]]) -> list[tuple[int, int, int, bytes]]:
    return [(r["result_time"], r["batch_id"], r["row"], canonical(r)) for r in rows]


def test_schema_member_and_result_time_of_a_three_way_result(tiers_factory) -> None:
    assert result_schema(SPEC, "tri").names == [*JOIN, "batch_id", "emitted_at"]
    tiers = tiers_factory()
    # the latest timestamp on each stream in turn: the result time must follow it
    combos = [
        {"A": {"ts": 50, "k": 1, "x": 0.5}, "B": {"t": 10, "k": 1, "z": "a"}, "C": {"u": 20, "k": 1, "d": True}},
        {"A": {"ts": 10, "k": 1, "x": 0.5}, "B": {"t": 60, "k": 1, "z": "a"}, "C": {"u": 20, "k": 1, "d": True}},
        {"A": {"ts": 10, "k": 1, "x": 0.5}, "B": {"t": 20, "k": 1, "z": "a"}, "C": {"u": 70, "k": 1, "d": False}},
    ]
    table = table_from_records(SPEC, "tri", combos, 0, 7)
    assert result_times(table).tolist() == [50, 60, 70]
    tiers.write({"tri": combos})
    stored = read_all(tiers.redis.client, "tri", tiers.namespace, 0, 100)
    assert [r["result_time"] for r in stored] == [50, 60, 70]
    assert all(list(r)[:3] == JOIN for r in stored)  # one object per stream, in join order
    assert [canonical(r) for r in redis_rows(tiers.redis, "tri", 55, 100)] == [canonical(c) for c in combos[1:]]
    with tiers.store() as store:
        rows, _ = store.follow("tri", from_ms=0, count=10)
        assert got(rows) == sorted(tiers.written, key=lambda w: w[1:3])
        assert all(list(r)[:3] == JOIN for r in rows)


@SETTINGS
@given(
    batches=st.lists(st.tuples(st.lists(combo, max_size=8), st.booleans()), min_size=1, max_size=6),
    span=st.tuples(st.integers(-5, 1005), st.integers(-5, 1005)).map(sorted),
    limit=st.integers(1, 7),
)
def test_one_time_query_across_the_tiers_equals_the_brute_force_filter(tiers_factory, batches, span, limit) -> None:
    tiers = tiers_factory(retain_ms=100)
    tiers.write_batches("tri", batches)
    t_from, t_to = span
    want = tiers.written_in(t_from, t_to)
    with tiers.store() as store:
        page = store.one_time("tri", t_from, t_to, [], None, MAX_LIMIT, None)
        assert got(page.rows) == want and page.next_cursor is None
        paged, cursor = [], None
        while True:
            part = store.one_time("tri", t_from, t_to, [], None, limit, cursor)
            paged += part.rows
            if part.next_cursor is None:
                break
            cursor = part.next_cursor
        assert got(paged) == want
        where = [parse_condition("C.k in 1,2", store.fields("tri")), parse_condition("B.t<=600", store.fields("tri"))]
        selected = store.one_time("tri", t_from, t_to, where, ["C.u", "result_time"], MAX_LIMIT, None).rows
        chosen = [w for w in want if orjson.loads(w[3])["C"]["k"] in (1, 2) and orjson.loads(w[3])["B"]["t"] <= 600]
        assert [(r["C"]["u"], r["result_time"]) for r in selected] == [
            (orjson.loads(w[3])["C"]["u"], w[0]) for w in chosen
        ]
