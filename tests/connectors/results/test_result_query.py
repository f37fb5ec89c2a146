"""Query core on real Redis and real Parquet files: one-time queries across the tier boundary against a brute-force
filter of every pair written, paging, selection and projection, continuous queries from the feed, bad queries."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.connectors.sink_cases import SPEC
from tests.connectors.tiers import TiersLayout
from tests.support.result_pages import all_pages, expected, got, record
from tests.support.result_tables import canonical, make_table
from windjoin.connectors.results.result_query import MAX_LIMIT, ResultStore
from windjoin.operators.query.conditions import Condition, parse_condition
from windjoin.operators.query.errors import BadQuery, Gone, NotFound, QueryError

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FIELDS = {
    "R.ts": "int",
    "R.k": "int",
    "R.x": "float",
    "R.z": "string",
    "S.t": "int",
    "S.k": "int",
    "S.d": "bool",
    "result_time": "int",
    "batch_id": "int",
    "emitted_at": "int",
}
times = st.integers(0, 1000)
small_pair = st.fixed_dictionaries(
    {
        "R": st.fixed_dictionaries(
            {"ts": times, "k": st.integers(0, 5), "x": st.sampled_from([0.5, -1.0, 2.25]), "z": st.sampled_from("abc")}
        ),
        "S": st.fixed_dictionaries({"t": times, "k": st.integers(0, 5), "d": st.booleans()}),
    }
)


@pytest.fixture
def tiers_layout() -> TiersLayout:
    return TiersLayout(SPEC, ("a", "b"), make_table, record)


def _token(parts: list[Any]) -> str:
    import base64

    import orjson

    return base64.urlsafe_b64encode(orjson.dumps(parts)).rstrip(b"=").decode()


@SETTINGS
@given(
    batches=st.lists(
        st.tuples(st.lists(small_pair, max_size=8), st.sampled_from(["none", "snapshot", "snapshot-no-advance"])),
        min_size=1,
        max_size=8,
    ),
    span=st.tuples(st.integers(-5, 1005), st.integers(-5, 1005)).map(sorted),
    limit=st.integers(1, 7),
)
def test_one_time_query_across_the_boundary_equals_the_brute_force_filter(tiers_factory, batches, span, limit) -> None:
    tiers = tiers_factory(retain_ms=100)
    for pairs, action in batches:
        tiers.write({"a": pairs})
        if action != "none":
            tiers.snapshot(advance=action == "snapshot")
    t_from, t_to = span
    want = expected(tiers, "a", t_from, t_to)
    with tiers.store() as store:
        page = store.one_time("a", t_from, t_to, [], None, MAX_LIMIT, None)
        assert got(page.rows) == want
        assert page.next_cursor is None
        assert all(r["emitted_at"] == 7 for r in page.rows)
        assert all(list(r) == ["R", "S", "batch_id", "row", "emitted_at", "result_time"] for r in page.rows)
        assert got(all_pages(store, "a", t_from, t_to, limit)) == want  # every row once, in order
    # Redis really gave rows up to Parquet (the boundary is crossed), unless no snapshot was advanced
    with tiers.store(parquet=False) as redis_only:
        in_redis = got(redis_only.one_time("a", -5, 1005, [], None, MAX_LIMIT, None).rows)
    assert set(in_redis) <= set(expected(tiers, "a", -5, 1005))


def test_the_boundary_is_crossed(tiers_factory) -> None:
    tiers = tiers_factory(retain_ms=100)
    tiers.write(
        {"a": [{"R": {"ts": t, "k": 1, "x": 0.5, "z": "a"}, "S": {"t": 0, "k": 1, "d": True}} for t in (0, 50)]}
    )
    tiers.write({"a": [{"R": {"ts": t, "k": 2, "x": 0.5, "z": "b"}, "S": {"t": 0, "k": 2, "d": True}} for t in (300,)]})
    tiers.snapshot()  # max_time 300, cutoff 200: rows at 0 and 50 leave Redis
    tiers.write(
        {"a": [{"R": {"ts": t, "k": 3, "x": 0.5, "z": "c"}, "S": {"t": 0, "k": 3, "d": True}} for t in (10, 400)]}
    )
    assert tiers.redis.count("a") == 3
    with tiers.store() as store:
        page = store.one_time("a", 0, 1000, [], None, 100, None)
        assert page.snapshot_id == 1
        assert [(r["result_time"], r["batch_id"]) for r in page.rows] == [(0, 0), (10, 2), (50, 0), (300, 1), (400, 2)]
        assert got(page.rows) == expected(tiers, "a", 0, 1000)
    with tiers.store(redis=False) as parquet_only:
        page = parquet_only.one_time("a", 0, 1000, [], None, 100, None)
        assert [(r["result_time"], r["batch_id"]) for r in page.rows] == [(0, 0), (50, 0), (300, 1)]
        assert page.snapshot_id == 1
    with tiers.store(parquet=False) as redis_only:
        assert [r["result_time"] for r in redis_only.one_time("a", 0, 1000, [], None, 100, None).rows] == [10, 300, 400]


def test_paging_stays_exact_while_snapshots_move_rows(tiers_factory) -> None:
    tiers = tiers_factory(retain_ms=1)
    for b in range(6):
        tiers.write(
            {
                "a": [
                    {"R": {"ts": 10 * b + i, "k": i, "x": 1.0, "z": "q"}, "S": {"t": 0, "k": 0, "d": False}}
                    for i in range(5)
                ]
            }
        )
    want = expected(tiers, "a", 0, 10**6)
    rows: list[dict[str, Any]] = []
    with tiers.store() as store:
        cursor = None
        while True:
            page = store.one_time("a", 0, 10**6, [], None, 4, cursor)
            rows += page.rows
            tiers.snapshot()  # between pages, Redis hands more rows over to Parquet
            tiers.write({"a": []})
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    assert got(rows) == want
    assert tiers.redis.count("a") < 30


@SETTINGS
@given(
    batches=st.lists(st.lists(small_pair, max_size=8), min_size=1, max_size=5),
    conditions=st.lists(
        st.sampled_from(
            [
                "R.k=2",
                "R.k != 3",
                "S.k in 1,2,3",
                "R.z=a",
                'R.z in "a","c"',
                "R.x>=0.5",
                "R.x<0",
                "S.d=true",
                "result_time<=500",
                "result_time>100",
                "batch_id>=1",
                "S.t<600",
                "emitted_at=7",
            ]
        ),
        max_size=3,
    ),
    projection=st.none() | st.lists(st.sampled_from(list(FIELDS)), min_size=1, max_size=4),
)
def test_selection_and_projection(tiers_factory, batches, conditions, projection) -> None:
    tiers = tiers_factory(retain_ms=50)
    for i, pairs in enumerate(batches):
        tiers.write({"a": pairs})
        if i % 2:
            tiers.snapshot()
    where = [parse_condition(text, FIELDS) for text in conditions]

    def keep(rt: int, batch: int, p: dict[str, Any]) -> bool:
        values = {f"R.{k}": v for k, v in p["R"].items()} | {f"S.{k}": v for k, v in p["S"].items()}
        values |= {"result_time": rt, "batch_id": batch, "emitted_at": 7}
        ops = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b}
        ops |= {"<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
        ops["in"] = lambda a, b: a in b
        return all(ops[c.op](values[c.field], c.value) for c in where)

    chosen = sorted((w for w in tiers.written if keep(w[0], w[1], w[4])), key=lambda w: w[:3])
    with tiers.store() as store:
        rows = all_pages(store, "a", 0, 1000, 3, where=where, fields=projection)
    assert len(rows) == len(chosen)
    for row, (rt, batch, r, _, p, _) in zip(rows, chosen, strict=True):
        full = {**p, "batch_id": batch, "row": r, "emitted_at": 7, "result_time": rt}
        if projection is None:
            assert canonical(row) == canonical(full)
        else:
            expected: dict[str, Any] = {}
            for name in projection:
                stream, dot, field = name.partition(".")
                if dot:
                    expected.setdefault(stream, {})[field] = p[stream][field]
                else:
                    expected[name] = full[name]
            assert canonical(row) == canonical(expected)


def test_parse_condition() -> None:
    assert parse_condition("R.k=5", FIELDS) == Condition("R.k", "=", 5)
    assert parse_condition(" R.k >= -5 ", FIELDS) == Condition("R.k", ">=", -5)
    assert parse_condition("R.z!=abc", FIELDS) == Condition("R.z", "!=", "abc")
    assert parse_condition('R.z="a b, \\"c\\""', FIELDS) == Condition("R.z", "=", 'a b, "c"')
    assert parse_condition("R.z=", FIELDS) == Condition("R.z", "=", "")
    assert parse_condition("R.k in 1,2, 3", FIELDS) == Condition("R.k", "in", [1, 2, 3])
    assert parse_condition('R.z in "a,b",c', FIELDS) == Condition("R.z", "in", ["a,b", "c"])
    assert parse_condition("R.x<2", FIELDS) == Condition("R.x", "<", 2.0)
    assert parse_condition("S.d=false", FIELDS) == Condition("S.d", "=", False)
    assert parse_condition("result_time<=10", FIELDS) == Condition("result_time", "<=", 10)
    assert parse_condition("R.z=in", FIELDS) == Condition("R.z", "=", "in")
    for bad, words in [
        ("R.q=1", "unknown field 'R.q'"),
        ("X=1", "unknown field 'X'"),
        ("R.k=abc", "type int"),
        ("R.k=1.5", "type int"),
        ("R.k=99999999999999999999", "type int"),
        ("R.x=nan", "type float"),
        ("S.d=yes", "type bool"),
        ("R.k ~ 1", "not a condition"),
        ("R.k", "not a condition"),
        ("", "not a condition"),
        ("R.k in ", "values"),
        ('R.k="1"', "type int"),
        ("R.ts}:x=1", "not a condition"),
        ("R.k=1" + "1" * 5000, "characters"),
        # `in` lists are parsed strictly: a malformed one is refused, never read as a shorter list
        ('R.k in 1,"abc', "malformed list"),
        ("R.k in 1,", "malformed list"),
        ("R.k in 1,,2", "malformed list"),
        ("R.k in ,1", "malformed list"),
        ('R.z in "a"b,c', "malformed list"),
        ('R.z in "a" "b"', "malformed list"),
        ("R.k=5\n1", "type int"),
        # float() reads these too: digits with underscores, other scripts' digits, an exponent past a double
        ("R.x=1_0", "type float"),
        ("R.x=0.2_5", r"no '_'"),
        ("R.x=\u0661", "type float"),
        ("R.x=1e999", "type float"),
        ("R.x in 1.5,2_0", "type float"),
    ]:
        with pytest.raises(BadQuery, match=words):
            parse_condition(bad, FIELDS)


def test_a_namespace_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(ValueError, match="namespace 'wj\\\\n' is not accepted"):
        ResultStore(SPEC, None, "wj\n", "/nonexistent")


def test_fields_and_tasks(tiers_factory) -> None:
    tiers = tiers_factory()
    with tiers.store() as store:
        assert store.tasks() == ["a", "b"]
        assert store.fields("a") == FIELDS
        assert list(store.fields("b"))[:3] == ["S.t", "S.k", "S.d"]
        assert store.ready() == {"redis": True, "parquet": True}
        assert store.snapshots("a") == []
        tiers.write({"a": [], "b": []})
        tiers.snapshot()
        assert [s.id for s in store.snapshots("a")] == [1]


def test_bad_queries_are_refused_before_any_io(tiers_factory) -> None:
    tiers = tiers_factory()
    tiers.write({"a": [{"R": {"ts": 1, "k": 1, "x": 1.0, "z": "a"}, "S": {"t": 1, "k": 1, "d": True}}] * 3})
    with tiers.store() as store:
        good = store.one_time("a", 0, 10, [], None, 1, None)
        assert good.next_cursor is not None
        follow_cursor = store.follow("a")[1]
        cases: list[tuple[Any, type[QueryError], str]] = [
            (lambda: store.one_time("nope", 0, 1), NotFound, "unknown task 'nope'"),
            (lambda: store.one_time("a}:x", 0, 1), NotFound, "unknown task"),
            (lambda: store.one_time("a", 5, 1), BadQuery, "from"),
            (lambda: store.one_time("a", "0", 1), BadQuery, "from"),
            (lambda: store.one_time("a", 0, 2**60), BadQuery, "to"),
            (lambda: store.one_time("a", True, 1), BadQuery, "from"),
            (lambda: store.one_time("a", 0, 1, limit=0), BadQuery, "limit"),
            (lambda: store.one_time("a", 0, 1, limit=MAX_LIMIT + 1), BadQuery, "limit"),
            (lambda: store.one_time("a", 0, 1, fields=["R.nope"]), BadQuery, "fields: unknown field"),
            (lambda: store.one_time("a", 0, 1, fields=[]), BadQuery, "fields"),
            (lambda: store.one_time("a", 0, 1, fields="R.k"), BadQuery, "fields"),
            (lambda: store.one_time("a", 0, 1, where=[Condition("R.k", "like", 1)]), BadQuery, "operator"),
            (lambda: store.one_time("a", 0, 1, where=[Condition("R.k", "=", "x")]), BadQuery, "type int"),
            (lambda: store.one_time("a", 0, 1, where=[Condition("R.zz", "=", 1)]), BadQuery, "unknown field"),
            (lambda: store.one_time("a", 0, 1, where=[Condition("R.k", "in", [])]), BadQuery, "in"),
            (lambda: store.one_time("a", 0, 1, cursor="garbage!"), BadQuery, "cursor"),
            (lambda: store.one_time("a", 0, 1, cursor="e30"), BadQuery, "cursor"),
            (lambda: store.one_time("b", 0, 10, cursor=good.next_cursor), BadQuery, "cursor"),
            (lambda: store.one_time("a", 0, 10, cursor=follow_cursor), BadQuery, "cursor"),
            (lambda: store.follow("a", after=good.next_cursor), BadQuery, "cursor"),
            (lambda: store.follow("a", after=_token(["f", "a", 2**62, 0])), BadQuery, "cursor"),
            (lambda: store.follow("a", after=_token(["f", "a", 1, "0"])), BadQuery, "cursor"),
            (lambda: store.one_time("a", 0, 1, cursor=_token(["t", "a", 0, -1, 0])), BadQuery, "cursor"),
            (lambda: store.one_time("a", 0, 1, cursor=_token(["t", "a", 0, 0, 1.5])), BadQuery, "cursor"),
            (lambda: store.follow("nope"), NotFound, "unknown task"),
            (lambda: store.follow("a", count=0), BadQuery, "count"),
            (lambda: store.follow("a", block_ms=-1), BadQuery, "block_ms"),
            (lambda: store.follow("a", from_ms="x"), BadQuery, "from"),
        ]
        for call, kind, words in cases:
            with pytest.raises(QueryError, match=words) as err:
                call()
            assert isinstance(err.value, kind), words
    with tiers.store(redis=False) as parquet_only, pytest.raises(NotFound, match="Redis tier"):
        parquet_only.follow("a")


def test_follow_from_now_after_cursor_and_from_time(tiers_factory) -> None:
    tiers = tiers_factory()

    def batch(base: int, n: int, emitted_at: int) -> int:
        pairs = [
            {"R": {"ts": base + i, "k": i % 3, "x": 0.5, "z": "f"}, "S": {"t": 0, "k": 0, "d": True}} for i in range(n)
        ]
        return tiers.write({"a": pairs}, emitted_at=emitted_at)

    batch(0, 3, 1000)
    with tiers.store() as store:
        rows, now = store.follow("a")  # from now: nothing yet
        assert rows == []
        batch(100, 4, 2000)
        tiers.write({"a": []})  # an empty batch: no feed entry
        batch(200, 2, 3000)
        seen = []
        cursor = now
        while True:
            rows, cursor = store.follow("a", after=cursor, count=3)
            if not rows:
                break
            seen += [(r["batch_id"], r["row"]) for r in rows]
        assert seen == [(1, 0), (1, 1), (1, 2), (1, 3), (3, 0), (3, 1)]
        # a reconnect with any cursor handed out resumes exactly after it
        rows, _ = store.follow("a", after=now, count=100, where=[parse_condition("R.k=0", FIELDS)], fields=["R.ts"])
        assert rows == [{"R": {"ts": 100}}, {"R": {"ts": 103}}, {"R": {"ts": 200}}]
        rows, _ = store.follow("a", from_ms=1500, count=100)
        assert [(r["batch_id"], r["emitted_at"]) for r in rows] == [(1, 2000)] * 4 + [(3, 3000)] * 2
        rows, _ = store.follow("a", from_ms=0, count=100)
        assert len(rows) == 9
        rows, last = store.follow("a", from_ms=10**9, count=100)
        assert rows == []
        batch(300, 1, 4000)
        rows, _ = store.follow("a", after=last, count=100, block_ms=100)
        assert [r["R"]["ts"] for r in rows] == [300]
        # a selection that matches nothing still moves the cursor on
        rows, moved = store.follow("a", after=last, count=100, where=[parse_condition("R.k=2", FIELDS)])
        assert rows == []
        assert store.follow("a", after=moved, count=100) == ([], moved)


def test_follow_cursor_older_than_the_feed_is_gone(redis_url: str, tiers_factory) -> None:
    """A cursor older than the trimmed feed: 410; with Parquet the 410 carries a cursor that reads the trimmed
    batches from Parquet and then the feed, every row once; without Parquet, the client is told to re-query."""
    tiers = tiers_factory()
    tiers.redis.feed_batches = 1
    pairs = [{"R": {"ts": 1, "k": 1, "x": 1.0, "z": "a"}, "S": {"t": 1, "k": 1, "d": True}}]
    with tiers.store() as store, tiers.store(parquet=False) as redis_only:
        _, start = store.follow("a")
        for _ in range(250):
            tiers.write({"a": pairs}, emitted_at=5)
        for kw in ({"after": start}, {"from_ms": 0}):
            with pytest.raises(Gone, match="one-time query") as err:
                redis_only.follow("a", **kw)
            assert err.value.cursor is None
            with pytest.raises(Gone, match="from Parquet") as err:
                store.follow("a", **kw)
            assert err.value.cursor is not None
            seen, cursor = [], err.value.cursor
            while True:
                rows, cursor = store.follow("a", after=cursor, count=7)
                if not rows:
                    break
                seen += [(r["batch_id"], r["row"]) for r in rows]
            assert seen == [(b, 0) for b in range(250)]
        rows, _ = store.follow("a", from_ms=6, count=10)
        assert rows == []


def test_a_snapshot_moving_between_redis_reads_of_one_page(tiers_factory, monkeypatch) -> None:
    """A selective query reads Redis' index in several capped steps for one page; when the boundary moves in
    between, the page is read again at the new snapshot, still exact."""
    import windjoin.connectors.redis.pieces as pieces
    import windjoin.connectors.results.redis_tier as tier

    monkeypatch.setattr(pieces, "CHUNK_ROWS", 3)  # 3 chunks a batch
    monkeypatch.setattr(tier, "SPAN_STEP", 2)
    tiers = tiers_factory(retain_ms=10**6)  # Redis keeps every row: only the boundary moves
    for b in range(4):
        tiers.write(
            {
                "a": [
                    {"R": {"ts": 10 * b + i, "k": i, "x": 1.0, "z": "m"}, "S": {"t": 0, "k": 0, "d": True}}
                    for i in range(9)
                ]
            }
        )
        if b == 1:
            tiers.snapshot()  # snapshot 1: batches 0 and 1
    steps = []
    real = tier.RedisSpan._step

    def scan_step(span: Any) -> Any:
        steps.append(span._resume)  # the entry it resumes after (None: a scan's first step)
        step = real(span)
        if len(steps) == 1:  # after the first step: snapshot 2 takes all four batches
            tiers.snapshot()
        return step

    monkeypatch.setattr(tier.RedisSpan, "_step", scan_step)
    where = [parse_condition("R.k=8", FIELDS)]
    with tiers.store() as store:
        page = store.one_time("a", 0, 1000, where, None, 4, None)
    assert [(r["result_time"], r["batch_id"]) for r in page.rows] == [(8, 0), (18, 1), (28, 2), (38, 3)]
    assert page.snapshot_id == 2
    assert steps[:2] != [None, None] and steps.count(None) >= 2  # a second step saw the move; the scan restarted
