"""Snapshot manifests on real Parquet files: consecutive ranges, atomic and idempotent commits, retention."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import orjson
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.connectors.sink_cases import SPEC
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SNAPSHOTS_DIR, Snapshot, SnapshotStore
from windjoin.operators.result_table import table_from_records

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def pair(r_ts: int, s_ts: int) -> dict:
    return {"R": {"ts": r_ts, "k": 1, "x": 0.5, "z": "r"}, "S": {"t": s_ts, "k": 1, "d": True}}


def write_batch(sink: ParquetSink, batch_id: int, times: dict[str, list[tuple[int, int]]]) -> None:
    """Commit `batch_id` for tasks a and b; `times[task]` lists each pair's (R.ts, S.t)."""
    tables = {
        task: table_from_records(SPEC, task, [pair(r, s) for r, s in times.get(task, [])], batch_id, 7)
        for task in ("a", "b")
    }
    sink.write(batch_id, tables)


def test_no_batches_no_snapshot(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    assert store.list("a") == [] and store.latest("a") is None
    assert store.commit("a", 5, "periodic", 1000) is None
    with pytest.raises(KeyError, match="no snapshot 1"):
        store.get("a", 1)


def test_only_exact_manifest_names_are_snapshots(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path)
    write_batch(sink, 0, {"a": [(1, 2)]})
    store = SnapshotStore(tmp_path)
    folder = Path(store.snapshots_dir("a"))
    folder.mkdir(parents=True)
    (folder / f"{7:012d}.json\n").write_bytes(b"{}")  # not a manifest: read as one, it fails to load
    (folder / f"{7:011d}\u0667.json").write_bytes(b"{}")
    (folder / ".tmp-ab.json\n").write_bytes(b"")
    assert store.latest("a") is None and store.list("a") == []
    assert store.commit("a", 0, "periodic", 1000) is not None
    assert [s.id for s in store.list("a")] == [1]
    assert (folder / ".tmp-ab.json\n").exists()  # a crashed commit's leftovers are named exactly


def test_consecutive_ranges_rows_and_times(tmp_path: Path) -> None:
    sink, store = ParquetSink(tmp_path), SnapshotStore(tmp_path)
    write_batch(sink, 0, {"a": [(10, 20), (30, 5)]})  # result times 20, 30
    write_batch(sink, 1, {})
    write_batch(sink, 2, {"a": [(7, 8)], "b": [(1, 2)]})  # result time 8
    first = store.commit("a", 2, "periodic", 1000)
    assert first == Snapshot("a", 1, 0, 2, 3, 8, 30, 1000, "periodic")
    assert store.commit("a", 2, "periodic", 2000) is None  # nothing new: a replay
    write_batch(sink, 3, {})
    write_batch(sink, 4, {"a": [(100, 50)]})
    write_batch(sink, 5, {"a": [(1, 1)]})
    second = store.commit("a", 4, "punctuation", 3000)  # up to batch 4 only; 5 waits for the next snapshot
    assert second == Snapshot("a", 2, 3, 4, 1, 100, 100, 3000, "punctuation")
    assert store.list("a") == [first, second] and store.latest("a") == second
    assert store.get("a", 1) == first
    assert store.batches("a", 1) == [0, 1, 2] and store.batches("a", 2) == [0, 1, 2, 3, 4]
    assert store.list("b") == []  # tasks are independent
    b_first = store.commit("b", 5, "periodic", 4000)
    assert b_first == Snapshot("b", 1, 0, 5, 1, 2, 2, 4000, "periodic")
    # A fresh store on the same folder (a restart) sees the same state and does not commit twice.
    again = SnapshotStore(tmp_path)
    assert again.list("a") == [first, second]
    assert again.commit("a", 4, "periodic", 5000) is None
    assert again.commit("a", 9, "periodic", 5000) == Snapshot("a", 3, 5, 5, 1, 1, 1, 5000, "periodic")


def test_empty_snapshot_has_no_time_range(tmp_path: Path) -> None:
    sink, store = ParquetSink(tmp_path), SnapshotStore(tmp_path)
    write_batch(sink, 3, {})
    assert store.commit("a", 3, "periodic", 1) == Snapshot("a", 1, 3, 3, 0, None, None, 1, "periodic")


def test_manifest_is_atomic_and_invisible_to_datasets(tmp_path: Path) -> None:
    sink, store = ParquetSink(tmp_path), SnapshotStore(tmp_path)
    write_batch(sink, 0, {"a": [(1, 2)]})
    folder = Path(store.snapshots_dir("a"))
    folder.mkdir(parents=True)
    leftover = folder / ".tmp-0123abcd.json"
    leftover.write_bytes(b'{"task": "a", "id": 1, "first_ba')  # a commit that crashed while writing
    assert store.list("a") == []  # a half-written manifest is never visible
    snapshot = store.commit("a", 0, "periodic", 5)
    assert snapshot is not None and snapshot.id == 1
    assert sorted(os.listdir(folder)) == ["000000000001.json"]  # leftover removed, no temporary file left
    assert orjson.loads((folder / "000000000001.json").read_bytes())["last_batch"] == 0
    # The results dataset (hive partitions) does not trip over the manifests.
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 1 and set(table.column("task").to_pylist()) == {"a"}


def test_snapshot_never_covers_an_uncommitted_batch(tmp_path: Path) -> None:
    sink, store = ParquetSink(tmp_path), SnapshotStore(tmp_path)
    write_batch(sink, 0, {"a": [(1, 2)]})
    (Path(sink.task_dir("a")) / ".batch=1.tmp-00ff").mkdir()  # a batch whose commit crashed before its rename
    snapshot = store.commit("a", 1, "periodic", 5)
    assert snapshot is not None and (snapshot.first_batch, snapshot.last_batch) == (0, 0)
    assert store.commit("a", 1, "periodic", 6) is None


def test_bad_reason_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'hourly'.*periodic"):
        SnapshotStore(tmp_path).commit("a", 0, "hourly", 1)


def test_retention_removes_whole_old_snapshots_only(tmp_path: Path) -> None:
    sink, store = ParquetSink(tmp_path), SnapshotStore(tmp_path)
    layout = [  # (batch, result times of task a), snapshot after the marked batches
        (0, [100, 150]),
        (1, []),  # snapshot 1: max 150
        (2, []),  # snapshot 2: empty
        (3, [400, 1000]),  # snapshot 3: max 1000
        (4, [200]),  # snapshot 4: max 200 (older than 3, but after it: kept, retention removes a prefix)
        (5, [1200]),  # snapshot 5: max 1200
        (6, [10]),  # not in any snapshot: never removed, however old
    ]
    for batch, times in layout:
        write_batch(sink, batch, {"a": [(t, t) for t in times]})
    for last in (1, 2, 3, 4, 5):
        assert store.commit("a", last, "periodic", last) is not None
    assert store.expire("a", 10_000) == []  # everything within retention
    # Latest max result time 1200; bound 1200 - 900 = 300: snapshots 1 (150) and 2 (empty) go, 3 stays.
    assert store.expire("a", 900) == [1, 2]
    assert [s.id for s in store.list("a")] == [3, 4, 5]
    assert sink.committed_batches("a") == [3, 4, 5, 6]
    assert store.batches("a", 5) == [3, 4, 5]
    with pytest.raises(KeyError, match="no snapshot 1 .*3\\.\\.5"):
        store.get("a", 1)
    assert store.expire("a", 1) == [3, 4]  # bound 1199: everything older than the latest snapshot's rows
    assert [s.id for s in store.list("a")] == [5] and sink.committed_batches("a") == [5, 6]
    assert store.expire("a", 1) == []  # the snapshot holding the latest result time always stays
    assert store.commit("a", 6, "periodic", 9) == Snapshot("a", 6, 6, 6, 1, 10, 10, 9, "periodic")
    assert sink.committed_batches("b") == [0, 1, 2, 3, 4, 5, 6]  # other tasks untouched


def test_retention_finishes_after_a_crash_between_manifest_and_folders(tmp_path: Path) -> None:
    sink, store = ParquetSink(tmp_path), SnapshotStore(tmp_path)
    for batch, t in enumerate([10, 20, 5000]):
        write_batch(sink, batch, {"a": [(t, t)]})
        store.commit("a", batch, "periodic", batch)
    os.unlink(store.manifest_path("a", 1))  # expire removed the manifest, then crashed
    assert store.batches("a", 3) == [1, 2]  # the orphan batch 0 is below the oldest manifest: not read
    assert store.expire("a", 10**6) == []
    assert sink.committed_batches("a") == [1, 2]
    assert not [e for e in os.listdir(sink.task_dir("a")) if e.startswith(".")]  # removed without a trace


@SETTINGS
@given(
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=4),
        min_size=1,
        max_size=12,
    ),
    cuts=st.lists(st.integers(0, 14), max_size=8),
)
def test_snapshots_partition_committed_batches(batches: list[list[tuple[int, int]]], cuts: list[int]) -> None:
    """Oracle: after commits at arbitrary (repeated, out-of-order) points, the snapshots split the batches up to
    the latest cut into consecutive ranges, each with the rows and result-time range of its batches."""
    with tempfile.TemporaryDirectory() as root:
        sink, store = ParquetSink(root), SnapshotStore(root)
        for batch, times in enumerate(batches):
            write_batch(sink, batch, {"a": times})
        expected, covered = [], -1
        for i, cut in enumerate(cuts):
            got = store.commit("a", cut, "periodic", i)
            last = min(cut, len(batches) - 1)
            if last <= covered:
                assert got is None
                continue
            result_times = [max(r, s) for b in range(covered + 1, last + 1) for r, s in batches[b]]
            expected.append(
                Snapshot(
                    "a",
                    len(expected) + 1,
                    covered + 1,
                    last,
                    len(result_times),
                    min(result_times, default=None),
                    max(result_times, default=None),
                    i,
                    "periodic",
                )
            )
            assert got == expected[-1]
            covered = last
        assert store.list("a") == expected
        assert not (Path(root) / "task=b" / SNAPSHOTS_DIR).exists()
