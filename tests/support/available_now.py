"""Running a streaming reader once to the end of what its source holds (Trigger.AvailableNow), for source tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_to_end(reader: Any, sink: Callable[[Any, int], None], checkpoint: Path, timeout_s: float = 150) -> None:
    """Load `reader` (a DataStreamReader with its options), feed every batch to the foreachBatch `sink` and return
    once the query has read all that was available (its error, if any, is raised)."""
    query = (
        reader.load()
        .writeStream.foreachBatch(sink)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        assert query.awaitTermination(timeout_s), f"the AvailableNow query did not finish within {timeout_s:g} s"
    finally:
        query.stop()
