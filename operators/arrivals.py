"""Building arrival chunks from records in arrival order, refusing bad records one by one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from windjoin.operators.batch import Arrivals
from windjoin.operators.schema import RecordError, StreamSchema
from windjoin.operators.spec import JoinSpec

UNKNOWN_STREAM = "unknown_stream"


class ChunkBuilder:
    """Collects checked records per stream with their arrival positions; `take` hands over a chunk."""

    def __init__(self, spec: JoinSpec) -> None:
        self.schemas = {name: StreamSchema(s) for name, s in spec.streams.items()}
        self._rows: dict[str, list[tuple[Any, ...]]] = {s: [] for s in self.schemas}
        self._order: dict[str, list[int]] = {s: [] for s in self.schemas}
        self._arrival: dict[str, list[int]] = {s: [] for s in self.schemas}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, stream: Any, record: Mapping[str, Any], arrival_ns: int) -> None:
        """Queue one record of `stream`, or raise RecordError (the chunk is unchanged)."""
        schema = self.schemas.get(stream) if isinstance(stream, str) else None
        if schema is None:
            raise RecordError(UNKNOWN_STREAM, f"stream {stream!r} is not declared (one of {list(self.schemas)})")
        row = schema.check(record)
        self._rows[stream].append(row)
        self._order[stream].append(self._size)
        self._arrival[stream].append(arrival_ns)
        self._size += 1

    def take(self) -> dict[str, Arrivals]:
        """The queued records as one chunk, and start a new one."""
        chunk = {
            stream: Arrivals(
                schema.to_columns(self._rows[stream]),
                np.array(self._order[stream], dtype=np.int64),
                np.array(self._arrival[stream], dtype=np.int64),
            )
            for stream, schema in self.schemas.items()
        }
        for stream in self.schemas:
            self._rows[stream].clear()
            self._order[stream].clear()
            self._arrival[stream].clear()
        self._size = 0
        return chunk
