"""Both sinks in two phases on real files and a real Redis: slots stage pieces, the driver commits the batch;
nothing is visible before the commit, replays stage and commit nothing twice, crash leftovers are completed or
cleared, and a batch's rows read the same, by the same (batch, row) positions, from Parquet and from Redis."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tests.connectors.sink_cases import SPEC
from tests.support.redis_rows import redis_rows
from windjoin.connectors.files import parquet_sink
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.redis import pieces as redis_pieces
from windjoin.connectors.redis.feed import feed_coverage, read_feed
from windjoin.connectors.redis.keys import piece_key
from windjoin.connectors.redis.sink import RedisSink
from windjoin.connectors.results.parquet_replay import ParquetReplay
from windjoin.connectors.results.redis_tier import read_all
from windjoin.operators.query.cursors import FEED_END
from windjoin.operators.result_table import result_schema, result_times, table_from_records, table_records

SCHEMAS = {"a": result_schema(SPEC, "a")}


def one(i: int) -> dict[str, Any]:
    return {"task": "a", "R": {"ts": i, "k": i, "x": i / 2, "z": f"r{i}"}, "S": {"t": i + 1, "k": i, "d": True}}


def piece(batch: int, ids: list[int], emitted_at: int = 7) -> pa.Table:
    return table_from_records(SPEC, "a", [one(i) for i in ids], batch, emitted_at)


@pytest.fixture
def redis_sink(redis_url: str):
    sink = RedisSink(redis_url, 10**12, namespace=f"staged_{uuid.uuid4().hex}", trim=False)
    yield sink
    sink.clear("a")
    sink.close()


def commit(sink: Any, batch: int, pieces: dict[int, pa.Table]) -> list[str]:
    """The driver's close of a batch whose slots staged `pieces` (slot -> table)."""
    slots = sorted(s for s, t in pieces.items() if t.num_rows)
    top = [int(result_times(t).max()) for t in pieces.values() if t.num_rows]
    return sink.commit(batch, {"a": slots}, schemas=SCHEMAS, batch_max={"a": max(top)} if top else {})


def test_parquet_pieces_are_invisible_until_the_commit_then_read_in_piece_order(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    pieces = {0: piece(3, [1, 2]), 1: piece(3, [10, 11, 12])}
    assert sink.stage(3, 1, {"a": pieces[1]}) == {"a": 3}  # slots finish in any order
    assert sink.stage(3, 0, {"a": pieces[0]}) == {"a": 2}
    assert sink.committed_batches("a") == []
    assert ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table().num_rows == 0
    assert commit(sink, 3, pieces) == ["a"]
    assert [Path(f).name for f in sink.batch_files("a", 3)] == ["part-0.parquet", "part-1.parquet"]
    assert [r["R"]["ts"] for r in table_records(sink.read("a"))] == [1, 2, 10, 11, 12]
    # A replay after the commit: the slots stage nothing, the driver skips the batch.
    assert sink.stage(3, 0, {"a": piece(3, [1, 2], emitted_at=99)}) == {}
    assert commit(sink, 3, pieces) == []
    assert sink.read("a").column("emitted_at").to_pylist() == [7] * 5


def test_parquet_replay_after_a_crash_during_staging_completes_the_batch(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    sink.write(0, {"a": piece(0, [0])})
    sink.stage(1, 0, {"a": piece(1, [1, 2])})  # the first attempt: slot 0 staged, then the job died
    (Path(sink.pending_dir("a", 1)) / ".part-1.parquet.tmp-0a1b").write_bytes(b"PAR1 half")  # slot 1 mid-write
    stale = Path(sink.pending_dir("a", 0))  # a pending folder of a batch committed before: garbage
    stale.mkdir()
    # The replay (a new process): slot 0's piece is kept as staged (the replay repeats it exactly), slot 1 stages.
    again = ParquetSink(tmp_path)
    assert again.stage(1, 0, {"a": piece(1, [1, 2], emitted_at=99)}) == {}
    assert again.stage(1, 1, {"a": piece(1, [3])}) == {"a": 1}
    assert commit(again, 1, {0: piece(1, [1, 2]), 1: piece(1, [3])}) == ["a"]
    assert [r["R"]["ts"] for r in table_records(again.read("a"))] == [0, 1, 2, 3]
    assert again.read("a").column("emitted_at").to_pylist() == [7, 7, 7, 7]
    assert sorted(p.name for p in Path(sink.task_dir("a")).iterdir()) == ["batch=0", "batch=1"]


def test_parquet_commit_refuses_a_missing_piece_and_drops_unreported_ones(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    sink.stage(0, 2, {"a": piece(0, [5])})  # staged by an attempt whose slot 2 reported results
    with pytest.raises(RuntimeError, match=r"batch 0 cannot be committed, staged pieces missing: \['part-0.parquet'\]"):
        commit(sink, 0, {0: piece(0, [1])})
    assert sink.committed_batches("a") == []
    sink.stage(0, 0, {"a": piece(0, [1])})
    assert commit(sink, 0, {0: piece(0, [1])}) == ["a"]  # slot 2 reported nothing this time: its file goes
    assert [Path(f).name for f in sink.batch_files("a", 0)] == ["part-0.parquet"]
    # A batch without results is committed as one empty file.
    assert commit(sink, 1, {}) == ["a"]
    assert [(Path(f).name, len(table_records(sink.read("a")))) for f in sink.batch_files("a", 1)] == [
        ("part-0.parquet", 1)
    ]


def test_redis_pieces_are_invisible_until_the_commit(redis_sink: RedisSink) -> None:
    pieces = {0: piece(4, [1, 2]), 1: piece(4, [10, 11, 12])}
    assert redis_sink.stage(4, 1, {"a": pieces[1]}) == {"a": 3}
    assert redis_sink.stage(4, 0, {"a": pieces[0]}) == {"a": 2}
    staged = [piece_key("a", 4, p, redis_sink.namespace) for p in (0, 1)]
    assert redis_sink.client.exists(*staged) == 2  # staged pieces are stored, but no reader returns them
    assert redis_sink.count("a") == 0 and redis_rows(redis_sink, "a", 0, 10**6) == []
    assert read_all(redis_sink.client, "a", redis_sink.namespace, 0, 10**6) == []
    assert read_feed(redis_sink.client, "a", redis_sink.namespace, None, 100, None).to_pylist() == []
    assert commit(redis_sink, 4, pieces) == ["a"]
    rows = redis_rows(redis_sink, "a", 0, 10**6)
    assert [r["R"]["ts"] for r in rows] == [1, 2, 10, 11, 12]
    span = read_all(redis_sink.client, "a", redis_sink.namespace, 0, 10**6)
    assert [(r["batch_id"], r["row"]) for r in span] == [(4, 0), (4, 1), (4, 2**32), (4, 2**32 + 1), (4, 2**32 + 2)]
    entries = redis_sink.client.xrange(f"{redis_sink.namespace}:{{a}}:feed")
    assert [e[0] for e in entries] == [b"4-1", b"4-2"]
    assert redis_sink.count("a") == 5 and redis_sink.client.exists(*staged) == 2  # committed in place


def test_redis_replays_stage_and_commit_nothing_twice(redis_sink: RedisSink) -> None:
    redis_sink.write(0, {"a": piece(0, [0])})
    first = {0: piece(1, [1, 2]), 1: piece(1, [3])}
    assert redis_sink.stage(1, 0, {"a": first[0]}) == {"a": 2}  # the first attempt died after slot 0 staged
    # The replay stamps another emission time: slot 0 is skipped (its piece is kept as staged), slot 1 stages.
    assert redis_sink.stage(1, 0, {"a": piece(1, [1, 2], emitted_at=99)}) == {}
    assert redis_sink.stage(1, 1, {"a": first[1]}) == {"a": 1}
    assert commit(redis_sink, 1, first) == ["a"]
    assert redis_sink.count("a") == 4
    # A replay of the committed batch: nothing staged, nothing committed, the feed unchanged.
    assert redis_sink.stage(1, 1, {"a": piece(1, [3], emitted_at=99)}) == {}
    assert commit(redis_sink, 1, first) == []
    assert redis_sink.count("a") == 4
    assert {r["emitted_at"] for r in redis_rows(redis_sink, "a", 0, 10**6)} == {7}
    assert len(redis_sink.client.xrange(f"{redis_sink.namespace}:{{a}}:feed")) == 3


def test_redis_commit_refuses_a_missing_piece_while_the_commit_record_survived(redis_sink: RedisSink) -> None:
    redis_sink.stage(0, 0, {"a": piece(0, [1])})
    assert commit(redis_sink, 0, {0: piece(0, [1])}) == ["a"]
    redis_sink.stage(1, 0, {"a": piece(1, [2])})
    with pytest.raises(
        RuntimeError, match=r"batch 1 cannot be committed, staged piece missing: .*:piece:1:1.*noeviction"
    ):
        commit(redis_sink, 1, {0: piece(1, [2]), 1: piece(1, [3])})
    assert redis_sink.last_committed("a") == 0
    assert commit(redis_sink, 1, {0: piece(1, [2])}) == ["a"]
    assert redis_sink.last_committed("a") == 1


def test_a_redis_lost_between_stage_and_commit_holds_whole_batches_from_the_next_on(
    redis_sink: RedisSink, caplog: pytest.LogCaptureFixture
) -> None:
    redis_sink.stage(0, 0, {"a": piece(0, [1])})
    assert commit(redis_sink, 0, {0: piece(0, [1])}) == ["a"]
    redis_sink.stage(1, 0, {"a": piece(1, [2])})
    redis_sink.clear("a")  # as a FLUSHALL would: the commit record and piece 0 are gone
    redis_sink.stage(1, 1, {"a": piece(1, [3])})  # a slot that staged after the loss
    with caplog.at_level("WARNING"):
        assert commit(redis_sink, 1, {0: piece(1, [2]), 1: piece(1, [3])}) == ["a"]
    assert "lost batch 1's staged results" in caplog.text and "from 2 on" in caplog.text
    # nothing of batch 1 is left: no staged piece, no result, no commit record
    assert redis_sink.count("a") == 0 and not redis_sink.client.exists(piece_key("a", 1, 1, redis_sink.namespace))
    assert redis_sink.last_committed("a") is None
    redis_sink.stage(2, 0, {"a": piece(2, [4])})
    assert commit(redis_sink, 2, {0: piece(2, [4])}) == ["a"]
    coverage = feed_coverage(redis_sink.client, "a", redis_sink.namespace)
    assert (coverage.committed, coverage.serves_from) == (2, 2)
    assert [r["batch_id"] for r in redis_rows(redis_sink, "a", 0, 10**6)] == [2]


def test_a_pickled_redis_sink_stages_with_its_own_client(redis_sink: RedisSink) -> None:
    copy = pickle.loads(pickle.dumps(redis_sink))  # as the join's slots receive it
    assert copy.client is not redis_sink.client and copy.namespace == redis_sink.namespace
    assert copy.stage(0, 1, {"a": piece(0, [1])}) == {"a": 1}
    assert commit(redis_sink, 0, {1: piece(0, [1])}) == ["a"]
    rows = read_all(redis_sink.client, "a", redis_sink.namespace, 0, 10**6)
    assert [r["row"] for r in rows] == [2**32]


def test_feed_and_parquet_replay_agree_on_positions_across_pieces(
    tmp_path: Path, redis_sink: RedisSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_pieces, "CHUNK_ROWS", 2)  # pieces of several chunks, files of several row groups
    monkeypatch.setattr(parquet_sink, "GROUP_BYTES", 100)  # a row here is 50 bytes of values: 2 rows a group
    parquet = ParquetSink(tmp_path)
    batches = {0: {0: piece(0, [1, 2, 3]), 2: piece(0, [4, 5])}, 1: {1: piece(1, [6])}, 2: {}}
    for batch, pieces in batches.items():
        for sink in (parquet, redis_sink):
            for slot, table in pieces.items():
                sink.stage(batch, slot, {"a": table})
            commit(sink, batch, pieces)
    replay = ParquetReplay(parquet, SnapshotStore(tmp_path))

    assert pq.read_metadata(parquet.batch_files("a", 0)[0]).num_row_groups == 2

    def walk(read: Any, count: int, max_bytes: int | None = None) -> list[tuple[int, int]]:
        seen, cursor = [], None
        while rows := read(cursor, count, max_bytes):
            assert max_bytes is None or len(rows) <= max(1, max_bytes // 50)  # bounded in bytes too
            seen += [(r["batch_id"], r["row"]) for r in rows]
            cursor = seen[-1]
        return seen

    def from_feed(cursor: Any, count: int, max_bytes: int | None = None) -> list[dict]:
        return read_feed(redis_sink.client, "a", redis_sink.namespace, cursor, count, None, max_bytes).to_pylist()

    def from_parquet(cursor: Any, count: int, max_bytes: int | None = None) -> list[dict]:
        rows, _ = replay.rows_after("a", cursor or (0, -1), 2, count, max_bytes)
        return rows.to_pylist()

    expected = [(0, 0), (0, 1), (0, 2), (0, 2 << 32), (0, (2 << 32) + 1), (1, 1 << 32)]
    for count in (1, 2, 4, 100):
        assert walk(from_feed, count) == expected
        assert walk(from_parquet, count) == expected
    for max_bytes in (1, 120, 175):  # below one row (the first always comes), 2 rows, 3 rows
        assert walk(from_feed, 100, max_bytes) == expected
        assert walk(from_parquet, 100, max_bytes) == expected
    assert [r["row"] for r in from_feed((0, 1), 2)] == [2, 2 << 32]
    assert [r["row"] for r in from_parquet((0, 1), 2)] == [2, 2 << 32]
    assert [r["batch_id"] for r in from_feed((0, FEED_END), 5)] == [1]
    assert [r["batch_id"] for r in from_parquet((0, FEED_END), 5)] == [1]
