"""Redis result sink on a real Redis: pieces as bounded chunks, round trip, exactly-once per batch, retention by
time and bytes, time-span queries."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.connectors.sink_cases import large_table
from tests.support.redis_rows import redis_rows
from tests.support.result_tables import canonical, make_table, pair, result_time
from windjoin.connectors.redis import pieces as redis_pieces
from windjoin.connectors.redis.client import redis_client
from windjoin.connectors.redis.pieces import ChunkEntry, decode_chunk, encode_piece
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.result_table import result_times, row_bytes
from windjoin.operators.sink_owner import StaleBatchError

MAX_TIME = 2**53 - 1
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

small_times = st.integers(0, 1000)


def stored(sink: RedisSink, task: str) -> list[dict[str, Any]]:
    """Everything stored for a task, as plain pairs (streams only) in query order."""
    return [{"R": q["R"], "S": q["S"]} for q in redis_rows(sink, task, 0, MAX_TIME)]


@pytest.fixture
def sink_factory(redis_url: str):
    sinks = []

    def make(retain_ms: int = 10**12, max_bytes: int = 1 << 40) -> RedisSink:
        sink = RedisSink(redis_url, retain_ms, namespace=f"test_{uuid.uuid4().hex}", max_bytes=max_bytes)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        for task in ("a", "b"):
            sink.clear(task)
        sink.close()


@SETTINGS
@given(pairs=st.lists(pair(small_times, small_times), max_size=30), piece=st.integers(0, 3))
def test_a_piece_s_chunks_hold_every_value_exactly(pairs: list[dict[str, Any]], piece: int) -> None:
    table = make_table("a", 5, pairs, emitted_at=11)
    encoded = encode_piece(table, 5, piece, 11)
    assert encoded.rows == len(pairs) and len(encoded.chunks) == len(encoded.entries)
    got = []
    for data, entry in zip(encoded.chunks, encoded.entries, strict=True):
        back = decode_chunk(data, ChunkEntry.parse(entry.member()))
        assert back.column("batch_id").to_pylist() == [5] * back.num_rows
        assert back.column("emitted_at").to_pylist() == [11] * back.num_rows
        assert entry.first_row == (piece << 32) + entry.offset
        got += [
            {"R": r, "S": s} for r, s in zip(back.column("R").to_pylist(), back.column("S").to_pylist(), strict=True)
        ]
    assert [canonical(g) for g in got] == [canonical(p) for p in pairs]


def test_chunks_are_bounded_in_rows_and_bytes(monkeypatch) -> None:
    monkeypatch.setattr(redis_pieces, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(redis_pieces, "CHUNK_ROWS", 7)
    sizes = [5, 120, 3000, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 900, 5]
    pairs = [
        {"R": {"ts": i, "k": i, "x": 0.0, "z": "z" * n}, "S": {"t": 0, "k": i, "d": True}} for i, n in enumerate(sizes)
    ]
    table = make_table("a", 1, pairs)
    row_sizes = row_bytes(table)
    encoded = encode_piece(table, 1, 0, 7)
    assert [(e.offset, e.rows) for e in encoded.entries] == [(0, 3), (3, 7), (10, 7), (17, 2), (19, 1)]
    for e in encoded.entries:
        held = row_sizes[e.offset : e.offset + e.rows]
        assert e.rows <= 7 and (held[:-1].sum() < 1000)  # each chunk ends at the row that reaches the bound
        assert (e.min_time, e.max_time) == (e.offset, e.offset + e.rows - 1)


@SETTINGS
@given(pairs=st.lists(pair(small_times, small_times), max_size=40))
def test_rows_written_are_rows_read_back_in_result_time_order(sink_factory, pairs: list[dict[str, Any]]) -> None:
    sink = sink_factory()
    assert sink.write(3, {"a": make_table("a", 3, pairs)}) == {"a": len(pairs)}
    order = sorted(range(len(pairs)), key=lambda i: (result_time(pairs[i]), i))
    got = redis_rows(sink, "a", 0, MAX_TIME)
    assert [canonical({"R": q["R"], "S": q["S"]}) for q in got] == [canonical(pairs[i]) for i in order]
    assert [q["result_time"] for q in got] == [result_time(pairs[i]) for i in order]
    assert all(q["task"] == "a" and q["batch_id"] == 3 and q["emitted_at"] == 7 for q in got)
    assert sink.last_committed("a") == 3


def test_replayed_batch_writes_nothing_more(sink_factory) -> None:
    sink = sink_factory()
    pairs = [{"R": {"ts": 10, "k": 1, "x": 1.5, "z": "r"}, "S": {"t": 12, "k": 1, "d": True}}] * 3  # equal pairs
    table = make_table("a", 4, pairs)
    assert sink.write(4, {"a": table}) == {"a": 3}
    assert sink.write(4, {"a": table}) == {}
    assert len(stored(sink, "a")) == 3  # the three equal pairs stay three, and the replay added none
    assert sink.last_committed("a") == 4


def test_older_batch_is_refused_not_skipped(sink_factory) -> None:
    # Batch ids of one checkpoint only grow and a replay repeats the last one: an older id is another writer.
    sink = sink_factory()
    newer = [{"R": {"ts": 50, "k": 1, "x": 0.0, "z": ""}, "S": {"t": 40, "k": 1, "d": False}}]
    older = [{"R": {"ts": 60, "k": 2, "x": 0.0, "z": ""}, "S": {"t": 40, "k": 2, "d": False}}]
    assert sink.write(9, {"a": make_table("a", 9, newer)}) == {"a": 1}
    with pytest.raises(StaleBatchError, match=r"namespace .*: batch 8 of task 'a' is below the last committed batch 9"):
        sink.write(8, {"a": make_table("a", 8, older)})
    assert stored(sink, "a") == newer
    assert sink.last_committed("a") == 9
    assert sink.max_time("a") == 50  # the refused batch did not move the retention bound either
    assert sink.write(10, {"a": make_table("a", 10, [])}) == {"a": 0}  # the refusal left the connection usable


def test_empty_batch_commits_without_rows(sink_factory) -> None:
    sink = sink_factory()
    assert sink.last_committed("a") is None
    assert sink.write(0, {"a": make_table("a", 0, [])}) == {"a": 0}
    assert sink.last_committed("a") == 0
    assert sink.max_time("a") is None
    assert stored(sink, "a") == []
    one = [{"R": {"ts": 1, "k": 1, "x": 0.5, "z": "z"}, "S": {"t": 2, "k": 1, "d": True}}]
    assert sink.write(0, {"a": make_table("a", 0, one)}) == {}  # batch 0 was committed, empty
    assert sink.write(1, {"a": make_table("a", 1, one)}) == {"a": 1}


def test_retention_drops_the_pieces_wholly_older_than_the_bound(sink_factory) -> None:
    sink = sink_factory(retain_ms=100)

    def times(*values: int) -> list[dict[str, Any]]:
        return [{"R": {"ts": t, "k": 0, "x": 0.0, "z": ""}, "S": {"t": 0, "k": 0, "d": True}} for t in values]

    sink.write(0, {"a": make_table("a", 0, times(0, 40))})
    sink.write(1, {"a": make_table("a", 1, times(49, 99, 150))})  # bound 150 - 100 = 50: batch 0 (max 40) leaves
    assert [q["result_time"] for q in redis_rows(sink, "a", 0, MAX_TIME)] == [49, 99, 150]
    sink.write(2, {"a": make_table("a", 2, times(120, 200))})  # bound 100: batch 1 (max 150) stays whole
    assert [q["result_time"] for q in redis_rows(sink, "a", 0, MAX_TIME)] == [49, 99, 120, 150, 200]
    assert sink.write(3, {"a": make_table("a", 3, times(30, 10))}) == {"a": 2}  # added, then dropped by the bound
    assert [q["result_time"] for q in redis_rows(sink, "a", 0, MAX_TIME)] == [49, 99, 120, 150, 200]
    assert sink.max_time("a") == 200 and sink.count("a") == 5
    assert int(sink.client.hget(f"{sink.namespace}:{{a}}:meta", "dropped_upto")) == 3


def test_retention_by_bytes_drops_the_oldest_pieces_but_never_the_newest_batch(sink_factory) -> None:
    sink = sink_factory(max_bytes=1)
    for batch in range(3):
        pairs = [
            {"R": {"ts": 10 * batch + i, "k": i, "x": 0.0, "z": "q"}, "S": {"t": 0, "k": 0, "d": True}}
            for i in range(5)
        ]
        sink.write(batch, {"a": make_table("a", batch, pairs)})
        assert {q["batch_id"] for q in redis_rows(sink, "a", 0, MAX_TIME)} == {batch}  # only the newest batch stays
    sizes = [int(sink.client.hget(f"{sink.namespace}:{{a}}:piece:2:0", "bytes"))]
    assert sink.held_bytes("a") == sizes[0] and sink.count("a") == 5
    big = sink_factory(max_bytes=sizes[0] * 2 + 1)
    for batch in range(4):
        pairs = [
            {"R": {"ts": 10 * batch + i, "k": i, "x": 0.0, "z": "q"}, "S": {"t": 0, "k": 0, "d": True}}
            for i in range(5)
        ]
        big.write(batch, {"a": make_table("a", batch, pairs)})
    assert sorted({q["batch_id"] for q in redis_rows(big, "a", 0, MAX_TIME)}) == [2, 3]


@SETTINGS
@given(
    batches=st.lists(st.lists(pair(small_times, small_times), max_size=12), min_size=1, max_size=5),
    retain_ms=st.integers(1, 1200),
    span=st.tuples(st.integers(-5, 1005), st.integers(-5, 1005)),
)
def test_retention_and_query_against_an_oracle(
    sink_factory, batches: list[list[dict[str, Any]]], retain_ms: int, span: tuple[int, int]
) -> None:
    sink = sink_factory(retain_ms)
    every = []
    for batch_id, pairs in enumerate(batches):
        sink.write(batch_id, {"a": make_table("a", batch_id, pairs)})
        every += [(result_time(p), batch_id, row, p) for row, p in enumerate(pairs)]
    if every:  # a batch's piece leaves whole once every result of it is older than the bound
        bound = max(t for t, *_ in every) - retain_ms
        newest = {b: max(t for t, b2, *_ in every if b2 == b) for _, b, *_ in every}
        kept = sorted((item for item in every if newest[item[1]] >= bound), key=lambda item: item[:3])
    else:
        kept = []
    assert [canonical(p) for p in stored(sink, "a")] == [canonical(item[3]) for item in kept]
    t_from, t_to = span
    got = redis_rows(sink, "a", t_from, t_to)
    want = [item for item in kept if t_from <= item[0] <= t_to]
    assert [(q["result_time"], q["batch_id"]) for q in got] == [item[:2] for item in want]
    assert [canonical({"R": q["R"], "S": q["S"]}) for q in got] == [canonical(item[3]) for item in want]


def test_two_tasks_are_kept_apart(sink_factory) -> None:
    sink = sink_factory(retain_ms=10)
    pa_ = [{"R": {"ts": 1000, "k": 1, "x": 1.0, "z": "a"}, "S": {"t": 1000, "k": 1, "d": True}}]
    pb = [{"R": {"ts": 5, "k": 2, "x": 2.0, "z": "b"}, "S": {"t": 5, "k": 2, "d": False}}]
    assert sink.write(1, {"a": make_table("a", 1, pa_)}) == {"a": 1}
    # task b is behind: batch 1 is new for it, a replay for a; a's large result time does not expire b's results
    assert sink.write(1, {"a": make_table("a", 1, pa_), "b": make_table("b", 1, pb)}) == {"b": 1}
    assert stored(sink, "a") == pa_
    assert stored(sink, "b") == pb
    assert [q["task"] for q in redis_rows(sink, "b", 0, MAX_TIME)] == ["b"]
    assert (sink.last_committed("a"), sink.last_committed("b")) == (1, 1)


def test_namespaces_are_kept_apart(sink_factory) -> None:
    one, two = sink_factory(), sink_factory()
    pairs = [{"R": {"ts": 1, "k": 1, "x": 1.0, "z": "a"}, "S": {"t": 1, "k": 1, "d": True}}]
    one.write(0, {"a": make_table("a", 0, pairs)})
    assert two.last_committed("a") is None
    assert redis_rows(two, "a", 0, MAX_TIME) == []


def test_racing_writers_commit_a_batch_once(sink_factory, redis_url: str) -> None:
    first = sink_factory()
    others = [RedisSink(redis_url, 10**12, first.namespace) for _ in range(3)]
    sinks = [first, *others]
    pairs = [{"R": {"ts": i, "k": i, "x": 0.5, "z": "q"}, "S": {"t": i, "k": i, "d": True}} for i in range(2000)]
    table = make_table("a", 6, pairs)
    with ThreadPoolExecutor(len(sinks)) as pool:
        outcomes = list(pool.map(lambda sink: sink.write(6, {"a": table}), sinks))
    assert sorted(outcomes, key=len) == [{}, {}, {}, {"a": 2000}]
    assert first.count("a") == 2000
    for sink in others:
        sink.close()


def test_bad_names_and_mismatched_tables_are_refused(sink_factory, redis_url: str) -> None:
    sink = sink_factory()
    table = make_table("a", 2, [])
    with pytest.raises(ValueError, match="task name"):
        sink.write(2, {"a b": table})
    with pytest.raises(ValueError, match="task name"):
        redis_rows(sink, "a}:x", 0, 1)
    with pytest.raises(ValueError, match="handed over as task"):
        sink.write(2, {"b": table})
    one = [{"R": {"ts": 1, "k": 1, "x": 1.0, "z": ""}, "S": {"t": 1, "k": 1, "d": True}}]
    with pytest.raises(ValueError, match="not only batch 2"):
        sink.write(2, {"a": make_table("a", 1, one)})
    with pytest.raises(ValueError, match="batch id"):
        sink.write(-1, {"a": table})
    with pytest.raises(ValueError, match="namespace"):
        RedisSink(redis_url, 10, namespace="a b")
    with pytest.raises(ValueError, match="retain_ms"):
        RedisSink(redis_url, 0)
    assert sink.last_committed("a") is None  # nothing was written by the refused calls


def test_keys_follow_the_documented_layout(sink_factory, redis_url: str) -> None:
    sink = sink_factory()
    pairs = [{"R": {"ts": 7, "k": 1, "x": 1.0, "z": "a"}, "S": {"t": 9, "k": 1, "d": True}}]
    sink.write(5, {"a": make_table("a", 5, pairs, emitted_at=123)})
    client = redis_client(redis_url)
    prefix = f"{sink.namespace}:{{a}}:"
    [(entry, score)] = client.zrange(prefix + "index", 0, -1, withscores=True)
    assert entry.startswith(b"5:0:0:9:9:0:1:123:") and score == 9  # then the chunk's decoded bytes
    assert client.zrange(prefix + "pieces", 0, -1, withscores=True) == [(b"5:0", 9)]
    piece = client.hgetall(prefix + "piece:5:0")
    assert sorted(piece) == sorted(
        [b"c0", b"batch", b"emitted_at", b"rows", b"bytes", b"max", b"width", b"chunks", b"index"]
    )
    assert (piece[b"rows"], piece[b"chunks"], piece[b"index"], piece[b"max"]) == (b"1", b"1", entry, b"9")
    back = decode_chunk(piece[b"c0"], ChunkEntry.parse(entry))
    assert back.column("R").to_pylist() == [pairs[0]["R"]] and back.column("S").to_pylist() == [pairs[0]["S"]]
    assert client.xrange(prefix + "feed") == [(b"5-1", {b"emitted_at": b"123", b"rows": b"1", b"chunks": b"1"})]
    meta = client.hgetall(prefix + "meta")
    assert meta == {
        b"committed": b"5",
        b"since": b"5",
        b"max_time": b"9",
        b"width": b"0",
        b"bytes": piece[b"bytes"],
        b"rows": b"1",
    }
    client.close()


def test_a_batch_of_100k_rows_in_one_write(sink_factory) -> None:
    sink = sink_factory()
    n = 100_000
    sides, table = large_table(n)
    assert sink.write(0, {"a": table}) == {"a": n}
    assert sink.count("a") == n
    assert int(sink.client.hget(f"{sink.namespace}:{{a}}:piece:0:0", "chunks")) >= 2  # read across chunks
    times = np.sort(result_times(table))
    # a span of 1000 pairs drawn from every chunk (the rows are in random time order)
    t_from, t_to = int(times[1000]), int(times[1999])
    got = redis_rows(sink, "a", t_from, t_to)
    assert [q["result_time"] for q in got] == times[(times >= t_from) & (times <= t_to)].tolist()
    rows = {q["R"]["ts"]: q for q in got}
    for i in np.flatnonzero(np.isin(sides["R"]["ts"], list(rows)))[:50]:
        assert rows[int(sides["R"]["ts"][i])]["S"]["k"] == int(sides["S"]["k"][i])
