"""Pushed partition-group generations as immutable Arrow IPC files on local disk, one file per stream.

Layout: ROOT/p<partition>/g<generation>/<stream>.arrow. A file is written once under a temporary name and
renamed into place, so a reader never sees half a generation; it is deleted only when its partition is cleaned.
The job writes a generation as one table (`write_table`, ROOT/p<partition>/g<generation>/rows.arrow), rewritten
alike when a batch is replayed, and deletes generations one by one after their clean-up.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc


class SpillFiles:
    """Writes, reads and deletes pushed generations under one folder."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.bytes_written = 0
        self.bytes_read = 0

    def _path(self, part: int, gen: int, stream: str) -> Path:
        return self.root / f"p{part}" / f"g{gen}" / f"{stream}.arrow"

    def write(self, part: int, gen: int, stream: str, columns: Mapping[str, np.ndarray]) -> Path:
        """Store one stream's tuples of a pushed generation; refuses to overwrite (generations are immutable)."""
        path = self._path(part, gen, stream)
        if path.exists():
            raise FileExistsError(f"{path}: generation {gen} of partition {part} was already pushed")
        return self._write(path, pa.table({name: pa.array(col) for name, col in columns.items()}))

    def read(self, part: int, gen: int, stream: str) -> dict[str, np.ndarray] | None:
        """One stream's tuples of a pushed generation as numpy columns (strings as objects); None if absent."""
        path = self._path(part, gen, stream)
        if not path.exists():
            return None
        with pa.OSFile(str(path), "rb") as source:
            table = ipc.open_file(source).read_all()
        self.bytes_read += path.stat().st_size
        return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}

    def _table_path(self, part: int, gen: int) -> Path:
        return self.root / f"p{part}" / f"g{gen}" / "rows.arrow"

    def write_table(self, part: int, gen: int, table: pa.Table) -> Path:
        """Store a pushed generation as one table (the job's stored-row columns). Rewriting a generation is
        allowed and atomic: a batch replayed after a failure pushes the same rows under the same number."""
        return self._write(self._table_path(part, gen), table)

    def _write(self, path: Path, table: pa.Table) -> Path:
        """Write under a temporary name, then rename: a reader never sees a half-written generation."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(tmp, path)
        self.bytes_written += path.stat().st_size
        return path

    def read_table(self, part: int, gen: int) -> pa.Table:
        """A generation written by `write_table`; a missing one is an error (its clean-up would lose pairs)."""
        path = self._table_path(part, gen)
        if not path.exists():
            raise FileNotFoundError(f"{path}: generation {gen} of partition {part} is not on disk")
        with pa.OSFile(str(path), "rb") as source:
            table = ipc.open_file(source).read_all()
        self.bytes_read += path.stat().st_size
        return table

    def delete_generation(self, part: int, gen: int) -> None:
        """Forget one generation (idempotent)."""
        shutil.rmtree(self.root / f"p{part}" / f"g{gen}", ignore_errors=True)

    def files(self, part: int | None = None) -> list[Path]:
        base = self.root if part is None else self.root / f"p{part}"
        return sorted(base.rglob("*.arrow")) if base.exists() else []

    def delete(self, part: int) -> None:
        """Forget every pushed generation of a partition (after its clean-up)."""
        shutil.rmtree(self.root / f"p{part}", ignore_errors=True)
