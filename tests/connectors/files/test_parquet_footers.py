"""A one-time query's Parquet footers are read once per version of a batch's folder, and read again when the
folder is written anew (a new job under the same batch id) or gone."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.support.result_tables import make_table
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.results.parquet_scan import Footers


def pair(ts: int) -> dict:
    return {"R": {"ts": ts, "k": 1, "x": 0.5, "z": "a"}, "S": {"t": 0, "k": 1, "d": True}}


def test_footers_are_read_once_per_folder_version(tmp_path, monkeypatch) -> None:
    sink = ParquetSink(tmp_path)
    sink.write(0, {"a": make_table("a", 0, [pair(1), pair(2)])})
    sink.write(1, {"a": make_table("a", 1, [pair(3)])})
    reads: list[str] = []
    read_metadata = sink.files.read_metadata
    monkeypatch.setattr(sink.files, "read_metadata", lambda path: reads.append(path) or read_metadata(path))
    footers = Footers(sink, max_batches=1)

    [kept] = footers.pieces("a", 0)
    assert (kept.piece, kept.metadata.num_rows, len(reads)) == (0, 2, 1)
    assert footers.pieces("a", 0) == [kept] and len(reads) == 1  # kept
    stamps = ("R.ts", "S.t")  # the result time is the later stamp: 1 and 2 here
    assert kept.groups.of(stamps) == [(2, 1, 2)] and kept.groups.of(stamps) is kept.groups.of(stamps)

    sink.clear("a")  # a new job starts the task afresh and writes batch 0 again, with other rows, a while later
    time.sleep(0.05)  # (past a tick of the kernel's file clock: see Footers)
    sink.write(0, {"a": make_table("a", 0, [pair(4), pair(5), pair(6)])})
    sink.write(1, {"a": make_table("a", 1, [pair(3)])})
    [again] = footers.pieces("a", 0)
    assert again.metadata.num_rows == 3 and len(reads) == 2 and again.groups.of(stamps)[0][0] == 3

    assert footers.pieces("a", 1)[0].metadata.num_rows == 1 and len(reads) == 3
    footers.pieces("a", 0)  # batch 1 pushed batch 0 out (one folder kept)
    assert len(reads) == 4

    shutil.rmtree(sink.batch_dir("a", 1))  # expired with its snapshot: the query reads again
    with pytest.raises(FileNotFoundError):
        footers.pieces("a", 1)
