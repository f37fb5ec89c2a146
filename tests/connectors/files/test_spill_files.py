"""Pushed generations on disk: columns come back as written (every field type), files are never overwritten."""

from __future__ import annotations

import numpy as np
import pytest

from windjoin.connectors.files.spill_files import SpillFiles


def test_round_trip_refuse_overwrite_and_delete(tmp_path):
    files = SpillFiles(tmp_path)
    columns = {
        "ts": np.array([3, 1, 2], dtype=np.int64),
        "v": np.array([0.5, -0.0, 2.0]),
        "s": np.array(["", "é", "abc"], dtype=object),
        "b": np.array([True, False, True]),
    }
    files.write(4, 0, "R", columns)
    files.write(4, 1, "R", {n: c[:1] for n, c in columns.items()})
    back = files.read(4, 0, "R")
    assert set(back) == set(columns)
    for name, col in columns.items():
        assert back[name].dtype == col.dtype and back[name].tolist() == col.tolist()
    assert files.read(4, 0, "S") is None
    with pytest.raises(FileExistsError, match="generation 0 of partition 4"):
        files.write(4, 0, "R", columns)
    assert [p.relative_to(tmp_path).as_posix() for p in files.files()] == ["p4/g0/R.arrow", "p4/g1/R.arrow"]
    assert not list(tmp_path.rglob("*.tmp"))
    files.delete(4)
    assert files.files() == [] and files.read(4, 1, "R") is None


def test_a_generation_table_is_rewritten_alike_on_replay_and_deleted_alone(tmp_path):
    import pyarrow as pa

    files = SpillFiles(tmp_path)
    table = pa.table({"part": pa.array([3, 3], pa.int32()), "stream": ["R", "S"], "ts": pa.array([5, 6], pa.int64())})
    files.write_table(3, 0, table)
    files.write_table(3, 0, table)  # a replayed batch pushes the same rows under the same number
    files.write_table(3, 1, table.slice(1))
    assert files.read_table(3, 0).equals(table) and files.read_table(3, 1).num_rows == 1
    files.delete_generation(3, 0)
    files.delete_generation(3, 0)  # idempotent: a replayed batch deletes again
    assert [p.parent.name for p in files.files(3)] == ["g1"]
    with pytest.raises(FileNotFoundError, match="generation 0 of partition 3"):
        files.read_table(3, 0)
