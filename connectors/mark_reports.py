"""The oldest and newest event time per input partition that each batch read, handed to the next batch's plan.

The batch's slots find the marks (they see the decoded rows); the driver merges them after the batch's sinks and
writes them here, under the batch's event-time `seq`, before Spark commits the batch; the source reads them when
it plans the next batch (in another process). One small JSON file per batch beside Spark's checkpoint, written
atomically; a replayed batch writes the same marks again. Only the newest `KEEP` reports are kept.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import orjson

KEEP = 16


class MarkReports:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, seq: int) -> Path:
        return self.root / f"{int(seq):012d}.json"

    def write(self, seq: int, marks: Mapping[str, tuple[int, int]]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".marks-", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(orjson.dumps({k: [int(lo), int(hi)] for k, (lo, hi) in sorted(marks.items())}))
        os.replace(tmp, self._path(seq))
        for old in sorted(self.root.glob("*.json"))[:-KEEP]:
            old.unlink(missing_ok=True)

    def read(self, seq: int) -> dict[str, tuple[int, int]] | None:
        """The (oldest, newest) event times reported under `seq`, or None when none were (yet, or lost in a crash)."""
        try:
            return {k: (int(lo), int(hi)) for k, (lo, hi) in orjson.loads(self._path(seq).read_bytes()).items()}
        except FileNotFoundError:
            return None
