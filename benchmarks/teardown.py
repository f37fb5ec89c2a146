"""The end of a benchmark run: stop what it started, whatever happened, so the next run starts clean."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def tear_down(spark: Any, state_dir: Path, scratch: Path | None) -> None:
    """Stop every streaming query and the session, the embedded services, and remove `scratch` (if any)."""
    from windjoin.connectors import services

    if spark is not None:
        for query in spark.streams.active:
            query.stop()
        spark.stop()
    services.down(state_dir)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
