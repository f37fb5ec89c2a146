"""The oldest and newest event time per input partition that each batch read, handed to the next batch's plan.

The batch's slots find the marks (they see the decoded rows); the driver merges them after the batch's sinks and
writes them here, under the batch's event-time `seq`, before Spark commits the batch; the source reads them when
it plans the next batch (in another process). One small JSON file per batch beside Spark's checkpoint, written
atomically; a replayed batch writes the same marks again. Only the newest `KEEP` reports are kept. A report that
is not {input partition: [oldest, newest]} in signed 64-bit ints is skipped with a warning, as if lost: raising
would stop the query, and a restarted one would plan from the same report again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import orjson

from windjoin.connectors.files.atomic_write import replace_whole

KEEP = 16
MAX_MS = 2**63 - 1

log = logging.getLogger(__name__)


class MarkReports:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, seq: int) -> Path:
        return self.root / f"{int(seq):012d}.json"

    def write(self, seq: int, marks: Mapping[str, tuple[int, int]]) -> None:
        replace_whole(self._path(seq), orjson.dumps({k: [int(lo), int(hi)] for k, (lo, hi) in sorted(marks.items())}))
        for old in sorted(self.root.glob("*.json"))[:-KEEP]:
            old.unlink(missing_ok=True)

    def read(self, seq: int) -> dict[str, tuple[int, int]] | None:
        """The (oldest, newest) event times reported under `seq`, or None when none were (yet, or lost in a crash)."""
        path = self._path(seq)
        try:
            data = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except orjson.JSONDecodeError as err:
            log.warning("event-time marks %s skipped: not JSON (%s)", path, err)
            return None
        bad = _malformed(data)
        if bad:
            log.warning("event-time marks %s skipped: %s", path, bad)
            return None
        return {k: (lo, hi) for k, (lo, hi) in data.items()}


def _malformed(data: object) -> str | None:
    """What is wrong with a marks report, or None."""
    if not isinstance(data, dict):
        return "not a JSON object of {input partition: [oldest, newest]}"
    for key, marks in data.items():
        ok = isinstance(marks, list) and len(marks) == 2
        ok = ok and all(isinstance(m, int) and not isinstance(m, bool) and -MAX_MS - 1 <= m <= MAX_MS for m in marks)
        if not ok or marks[0] > marks[1]:
            return f"{key!r}: {str(marks)[:60]} is not [oldest, newest] event times in ms (signed 64-bit ints)"
    return None
