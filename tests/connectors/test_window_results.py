"""Results of a tumbling or hopping window task (top-level window_start and window_end) through the sinks and
the query core, on real Redis and real Parquet files: both tiers return them in every row, `where` selects by
them, projections keep them, and the feed carries them."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.connectors.tiers import TiersLayout
from windjoin.connectors.results.result_query import MAX_LIMIT
from windjoin.operators.query.conditions import parse_condition
from windjoin.operators.result_table import check_result_table, table_from_records, table_records
from windjoin.operators.spec import parse_spec

SPEC = parse_spec(
    {
        "window": {"kind": "hopping", "size_ms": 100, "hop_ms": 50},
        "streams": {
            "R": {"timestamp": "ts", "fields": {"k": "int", "x": "string"}},
            "S": {"timestamp": "t", "fields": {"k": "int"}},
        },
        "tasks": [
            {"name": "hj", "join": ["R", "S"], "type": "left", "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}
        ],
    }
)
times = st.integers(0, 1000)
r_tuple = st.fixed_dictionaries({"ts": times, "k": st.integers(0, 3), "x": st.sampled_from(["", "a"])})
s_tuple = st.fixed_dictionaries({"t": times, "k": st.integers(0, 3)})


@st.composite
def windowed_row(draw):
    row = {"R": draw(r_tuple), "S": draw(st.one_of(st.none(), s_tuple))}
    start = draw(st.integers(-100, 1000)) // 50 * 50
    return {**row, "window_start": start, "window_end": start + 100}


def result_time(r: dict[str, Any]) -> int:
    return max(r[s][ts] for s, ts in (("R", "ts"), ("S", "t")) if r[s] is not None)


def canonical(r: dict[str, Any]) -> bytes:
    keys = ("R", "S", "window_start", "window_end")
    return orjson.dumps({k: r[k] for k in keys}, option=orjson.OPT_SORT_KEYS)


def record(task: str, batch: int, number: int, r: dict[str, Any], emitted_at: int) -> tuple[int, int, int, bytes]:
    return (result_time(r), batch, number, canonical(r))


def table(task: str, batch: int, rows: list[dict[str, Any]], emitted_at: int) -> pa.Table:
    out = table_from_records(SPEC, task, rows, batch, emitted_at)
    check_result_table(out, batch, task)
    return out


@pytest.fixture
def tiers_layout() -> TiersLayout:
    return TiersLayout(SPEC, ("hj",), table, record)


def got(rows: list[dict[str, Any]]) -> list[tuple[int, int, int, bytes]]:
    return [(r["result_time"], r["batch_id"], r["row"], canonical(r)) for r in rows]


def test_a_result_table_has_the_window_columns_after_the_streams():
    rows = [{"R": {"ts": 5, "k": 1, "x": "a"}, "S": None, "window_start": 0, "window_end": 100}]
    out = table("hj", 0, rows, 7)
    assert out.column_names == ["R", "S", "window_start", "window_end", "batch_id", "emitted_at"]
    assert table_records(out) == [{"task": "hj", **rows[0]}]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.tuples(st.lists(windowed_row(), max_size=8), st.booleans()), min_size=1, max_size=4),
    start=st.integers(-100, 1000).map(lambda s: s // 50 * 50),
)
def test_window_columns_across_the_tiers_equal_the_brute_force_filter(tiers_factory, batches, start) -> None:
    tiers = tiers_factory(retain_ms=100)
    tiers.write_batches("hj", batches)
    want = tiers.written_in(-1000, 2000)
    with tiers.store() as store:
        assert got(store.one_time("hj", -1000, 2000, [], None, MAX_LIMIT, None).rows) == want
        fields = store.fields("hj")
        assert fields["window_start"] == fields["window_end"] == "int"
        where = [parse_condition(f"window_start={start}", fields)]
        rows = store.one_time("hj", -1000, 2000, where, None, MAX_LIMIT, None).rows
        assert got(rows) == [w for w in want if orjson.loads(w[3])["window_start"] == start]
        projected = store.one_time("hj", -1000, 2000, [], ["window_end", "R.k"], MAX_LIMIT, None).rows
        assert projected == [
            {"window_end": orjson.loads(w[3])["window_end"], "R": {"k": orjson.loads(w[3])["R"]["k"]}} for w in want
        ]
        if any(snapshot for _, snapshot in batches):
            return  # the feed gave up batches to Parquet
        followed, _ = store.follow("hj", from_ms=0, count=1000, where=where)
        assert got(followed) == sorted(
            (w for w in tiers.written if orjson.loads(w[3])["window_start"] == start), key=lambda w: w[1:3]
        )
