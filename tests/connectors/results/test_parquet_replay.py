"""A continuous query resumed from Parquet reads only the row groups after its cursor's position: the ones before
it are damaged here (their pages overwritten, the footer intact) and the resume still reads the rest."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.result_tables import make_table
from windjoin.connectors.files import parquet_sink
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.results.parquet_replay import ParquetReplay
from windjoin.operators.query.errors import Damaged

ROWS = 40


def pair(ts: int) -> dict:
    return {"R": {"ts": ts, "k": ts % 3, "x": 0.5, "z": f"z{ts}"}, "S": {"t": 0, "k": 1, "d": True}}


def damage(path: Path, group: pq.RowGroupMetaData) -> None:
    """Overwrite the pages of a row group's column chunks; the footer stays, so only reading that group fails."""
    with open(path, "r+b") as file:
        for i in range(group.num_columns):
            column = group.column(i)
            start = column.dictionary_page_offset or column.data_page_offset
            file.seek(start)
            file.write(b"\xff" * column.total_compressed_size)


def test_a_resume_reads_only_the_row_groups_after_its_position(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parquet_sink, "GROUP_BYTES", 300)  # a few rows a row group
    sink = ParquetSink(tmp_path)
    sink.write(0, {"a": make_table("a", 0, [pair(i) for i in range(ROWS)])})
    [(_, path, footer, _)] = ParquetReplay(sink, SnapshotStore(tmp_path)).footers.pieces("a", 0)
    assert footer.num_row_groups >= 4, footer.num_row_groups
    sizes = [footer.row_group(g).num_rows for g in range(footer.num_row_groups)]
    before = sizes[0] + sizes[1]  # rows of the first two groups
    damage(path, footer.row_group(0))
    damage(path, footer.row_group(1))
    replay = ParquetReplay(sink, SnapshotStore(tmp_path))

    read, position = replay.rows_after("a", (0, before - 1), 0, 1000)  # after the damaged groups' last row
    rows = read.to_pylist()
    assert [row["row"] for row in rows] == list(range(before, ROWS))
    assert [row["R"]["ts"] for row in rows] == list(range(before, ROWS))
    assert position[0] == 0 and position[1] > ROWS  # the whole batch read

    with pytest.raises(Damaged):  # one row earlier needs the second group: it is read, and fails
        replay.rows_after("a", (0, before - 2), 0, 1000)
