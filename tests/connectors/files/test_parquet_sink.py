"""Parquet result sink on real files: layout, round trip, exactly-once per batch, crash leftovers, empty batches."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.connectors.sink_cases import SPEC, large_table
from windjoin.connectors.files import parquet_sink
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.operators.result_table import (
    result_schema,
    result_times,
    table_from_records,
    table_records,
)
from windjoin.operators.sink_owner import StaleBatchError
from windjoin.operators.spec import parse_spec

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

texts = st.text(max_size=8) | st.sampled_from(['"', "\\", "\n\x00", "é😀", ""])
floats = st.floats(allow_nan=False, allow_infinity=False)
ints = st.integers(-(2**53) + 1, 2**53 - 1)
times = st.integers(0, 2**53 - 1)
pairs = st.lists(
    st.fixed_dictionaries(
        {
            "R": st.fixed_dictionaries({"ts": times, "k": ints, "x": floats, "z": texts}),
            "S": st.fixed_dictionaries({"t": times, "k": ints, "d": st.booleans()}),
        }
    ),
    max_size=20,
)


def make_table(task: str, batch_id: int, items: list[dict[str, Any]], emitted_at: int = 7) -> pa.Table:
    return table_from_records(SPEC, task, [{"task": task, **p} for p in items], batch_id, emitted_at)


def one(i: int) -> dict[str, Any]:
    return {"R": {"ts": i, "k": i, "x": i / 2, "z": f"r{i}"}, "S": {"t": i + 1, "k": i, "d": i % 2 == 0}}


def test_result_schema_follows_the_spec() -> None:
    schema = result_schema(SPEC, "b")
    assert schema.names == ["S", "R", "batch_id", "emitted_at"]
    assert schema.field("S").type == pa.struct([("t", pa.int64()), ("k", pa.int64()), ("d", pa.bool_())])
    assert schema.field("R").type == pa.struct(
        [("ts", pa.int64()), ("k", pa.int64()), ("x", pa.float64()), ("z", pa.string())]
    )
    assert schema.field("batch_id").type == schema.field("emitted_at").type == pa.int64()
    table = make_table("b", 3, [one(4), {"R": {"ts": 9, "k": 0, "x": 0.0, "z": ""}, "S": {"t": 2, "k": 0, "d": True}}])
    assert result_times(table).tolist() == [5, 9]  # the later of the two timestamps
    with pytest.raises(ValueError, match="not in the spec"):
        result_schema(SPEC, "c")
    reserved = parse_spec(
        {
            "window": {"kind": "time", "size_ms": 1},
            "streams": {"batch_id": {"fields": {}}, "S": {"fields": {}}},
            "tasks": [{"name": "a", "join": ["batch_id", "S"]}],
        }
    )
    with pytest.raises(ValueError, match="reserved"):
        result_schema(reserved, "a")


def test_layout_is_hive_partitioned_by_task_and_batch(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    assert sink.write(3, {"a": make_table("a", 3, [one(1), one(2)]), "b": make_table("b", 3, [one(5)])}) == {
        "a": 2,
        "b": 1,
    }
    assert (tmp_path / "task=a" / "batch=3" / "part-0.parquet").is_file()
    assert (tmp_path / "task=b" / "batch=3" / "part-0.parquet").is_file()
    a = ds.dataset(tmp_path / "task=a", format="parquet", partitioning="hive").to_table()
    assert a.column("batch").to_pylist() == [3, 3]
    whole = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table(columns=["task", "batch"])
    assert sorted(zip(whole.column("task").to_pylist(), whole.column("batch").to_pylist(), strict=True)) == [
        ("a", 3),
        ("a", 3),
        ("b", 3),
    ]


def test_only_exact_folder_and_file_names_count(tmp_path: Path) -> None:
    """A name with a trailing newline or other scripts' digits is no batch, piece or leftover of the sink's."""
    sink = ParquetSink(tmp_path)
    sink.write(3, {"a": make_table("a", 3, [one(1)])})
    task_dir = tmp_path / "task=a"
    for name in ("batch=4\n", "batch=\u0665", ".batch=2.pending\n"):
        (task_dir / name).mkdir()
    (task_dir / "batch=3" / "part-1.parquet\n").write_bytes(b"")
    assert sink.committed_batches("a") == [3]
    assert [piece for piece, _ in sink.batch_pieces("a", 3)] == [0]
    sink.write(5, {"a": make_table("a", 5, [one(2)])})  # clears leftovers of older batches: not these names
    assert (task_dir / ".batch=2.pending\n").is_dir()
    with pytest.raises(ValueError, match=r"task name 'a\\n' is not an identifier"):
        sink.task_dir("a\n")  # nor is a task name with one a folder of tasks


@SETTINGS
@given(batches=st.lists(pairs, min_size=1, max_size=4))
def test_rows_written_are_rows_read_back(tmp_path_factory: pytest.TempPathFactory, batches: list[list[Any]]) -> None:
    sink = ParquetSink(tmp_path_factory.mktemp("pq"))
    tables = [make_table("a", batch_id, items, emitted_at=100 + batch_id) for batch_id, items in enumerate(batches)]
    for batch_id, table in enumerate(tables):
        assert sink.write(batch_id, {"a": table}) == {"a": table.num_rows}
    back = sink.read("a")
    assert back.equals(pa.concat_tables(tables))  # values, order, schema and its metadata
    assert table_records(back) == [{"task": "a", **p} for items in batches for p in items]
    assert sink.committed_batches("a") == list(range(len(batches)))


def test_replayed_batch_writes_nothing_more(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    table = make_table("a", 4, [one(1), one(2)])
    assert sink.write(4, {"a": table}) == {"a": 2}
    before = os.stat(tmp_path / "task=a" / "batch=4" / "part-0.parquet")
    assert sink.write(4, {"a": table}) == {}
    assert ParquetSink(tmp_path).write(4, {"a": table}) == {}  # a new process sees the same
    assert sink.read("a").num_rows == 2
    after = os.stat(tmp_path / "task=a" / "batch=4" / "part-0.parquet")
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_older_batch_is_refused_not_skipped(tmp_path: Path) -> None:
    # Batch ids of one checkpoint only grow and a replay repeats the last one: an older id is another writer.
    sink = ParquetSink(tmp_path)
    assert sink.write(9, {"a": make_table("a", 9, [one(1)])}) == {"a": 1}
    with pytest.raises(StaleBatchError, match=r"batch 8 of task 'a' is below the last committed batch 9"):
        sink.write(8, {"a": make_table("a", 8, [one(2)])})
    with pytest.raises(StaleBatchError, match=rf"Parquet {tmp_path}: batch 7 .* below the last committed batch 9"):
        ParquetSink(tmp_path).write(7, {"a": make_table("a", 7, [one(3)])})
    assert sink.committed_batches("a") == [9]
    assert sink.last_committed("a") == 9
    assert table_records(sink.read("a")) == [{"task": "a", **one(1)}]


def test_crash_before_rename_leaves_nothing_visible_and_the_retry_commits(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    sink.write(0, {"a": make_table("a", 0, [one(0)])})
    # A slot died while writing its piece, before the rename: a half-written file is left in the pending folder.
    pending = tmp_path / "task=a" / ".batch=1.pending"
    pending.mkdir()
    leftover = pending / ".part-0.parquet.tmp-0123abcd"
    leftover.write_bytes(b"PAR1 half a file")
    assert sink.committed_batches("a") == [0]
    assert table_records(sink.read("a")) == [{"task": "a", **one(0)}]
    seen = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert seen.num_rows == 1 and seen.column("batch").to_pylist() == [0]
    # The replay of batch 1 commits it whole and clears the leftover.
    assert ParquetSink(tmp_path).write(1, {"a": make_table("a", 1, [one(1), one(2)])}) == {"a": 2}
    assert not leftover.exists()
    assert table_records(sink.read("a")) == [{"task": "a", **one(i)} for i in range(3)]
    assert ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table().num_rows == 3


def test_failed_rename_commits_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = ParquetSink(tmp_path)

    def crash(src: object, dst: object) -> None:
        raise OSError("disk went away")

    monkeypatch.setattr(parquet_sink.os, "rename", crash)
    with pytest.raises(OSError, match="disk went away"):
        sink.write(2, {"a": make_table("a", 2, [one(1)])})
    assert sink.committed_batches("a") == []
    # Only the hidden pending folder is left (readers skip it), without the temporary file of the failed piece.
    assert sorted(p.name for p in (tmp_path / "task=a").iterdir()) == [".batch=2.pending"]
    assert list((tmp_path / "task=a" / ".batch=2.pending").iterdir()) == []
    monkeypatch.undo()
    assert sink.write(2, {"a": make_table("a", 2, [one(1)])}) == {"a": 1}
    assert table_records(sink.read("a")) == [{"task": "a", **one(1)}]


def test_empty_batch_is_committed_as_an_empty_file(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    assert sink.write(0, {"a": make_table("a", 0, [])}) == {"a": 0}
    part = tmp_path / "task=a" / "batch=0" / "part-0.parquet"
    assert part.is_file()
    assert sink.read("a").num_rows == 0
    assert sink.read("a").schema == result_schema(SPEC, "a")
    assert sink.write(0, {"a": make_table("a", 0, [one(1)])}) == {}  # batch 0 was committed (empty)
    assert sink.write(1, {"a": make_table("a", 1, [one(1)])}) == {"a": 1}
    whole = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert whole.column("batch").to_pylist() == [1]


def test_two_tasks_are_kept_apart(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    sink.write(1, {"a": make_table("a", 1, [one(1)])})
    # b is behind: batch 1 is new for it, a replay for a
    assert sink.write(1, {"a": make_table("a", 1, [one(7)]), "b": make_table("b", 1, [one(2)])}) == {"b": 1}
    assert table_records(sink.read("a")) == [{"task": "a", **one(1)}]
    assert table_records(sink.read("b")) == [{"task": "b", **one(2)}]
    with pytest.raises(FileNotFoundError):
        sink.read("c")


def test_bad_names_and_mismatched_tables_are_refused(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    table = make_table("a", 2, [one(1)])
    for bad in ("../x", "a b", "a/b", ""):
        with pytest.raises(ValueError, match="task name"):
            sink.write(2, {bad: table})
    with pytest.raises(ValueError, match="handed over as task"):
        sink.write(2, {"b": table})
    with pytest.raises(ValueError, match="not only batch 3"):
        sink.write(3, {"a": table})
    with pytest.raises(ValueError, match="batch id"):
        sink.write(2**60, {"a": table})
    r = table.column("R").combine_chunks()
    k_with_null = pa.array([None], pa.int64())
    r_with_null = pa.StructArray.from_arrays([r.field(0), k_with_null, r.field(2), r.field(3)], fields=list(r.type))
    holed = table.set_column(0, table.schema.field("R"), r_with_null)
    with pytest.raises(ValueError, match=r"R\.k holds nulls"):
        sink.write(2, {"a": holed})
    assert list(tmp_path.iterdir()) == []


def test_a_batch_of_100k_rows_in_one_write(tmp_path: Path) -> None:
    n = 100_000
    sides, table = large_table(n)
    sink = ParquetSink(tmp_path)
    assert sink.write(0, {"a": table}) == {"a": n}
    assert sink.read("a").equals(table)
