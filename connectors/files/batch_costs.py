"""The recent batches' sizes and times, handed from the driver to the source's batch sizing (another process).

One small JSON file beside Spark's checkpoint, `{"batches": [[batch_id, records, seconds], ...]}`, the newest
`KEEP` batches, replaced atomically after each batch; a replayed batch replaces its own entry. Read by the source
when it plans a batch with a latency target (operators.batch_size); a lost file only makes the next batches take
the plain record cap until enough batches are measured again.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from windjoin.connectors.files.atomic_write import replace_whole

KEEP = 20


class BatchCosts:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _batches(self) -> list[list]:
        """The recorded [batch_id, records, seconds] entries; [] when there is no readable file."""
        try:
            return list(orjson.loads(self.path.read_bytes())["batches"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return []

    def samples(self) -> list[tuple[int, float]]:
        """(records, seconds) of the recent batches, oldest first; [] when none were recorded."""
        return [(int(rows), float(seconds)) for _, rows, seconds in self._batches()]

    def record(self, batch_id: int, records: int, seconds: float) -> None:
        batches = [b for b in self._batches() if b[0] < batch_id] + [[int(batch_id), int(records), float(seconds)]]
        replace_whole(self.path, orjson.dumps({"batches": batches[-KEEP:]}))
