"""A snapshot manifest read strictly: whoever can write the Parquet folder can write a manifest, so one may be
truncated, of the wrong types or of absurd ranges.

A manifest that is not JSON, misses a field, holds text or a float for a number, a range outside 0..2^63-1 or
backwards, a time range half given or backwards, an unknown reason, or another task's or id's name is refused as
`DamagedManifest`: a query's `Damaged` (the proxy's 500 with a detail naming the task and the snapshot id, never a
path or a traceback). Before, a truncated one was a bare 500 and `last_batch: 2e8` a TypeError.
"""

from __future__ import annotations

from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from windjoin.operators.query.cursors import MAX_TIME
from windjoin.operators.query.errors import Damaged

REASONS = ("periodic", "punctuation", "recovery")  # recovery: Redis lost its boundary marker
MAX_MANIFEST_BYTES = 64 << 10  # a manifest is a few hundred bytes; a bigger file is not read whole
MAX_NUMBER = 2**63 - 1  # batch ids, rows and clocks are signed 64-bit numbers everywhere else
Whole = Annotated[int, Field(ge=0, le=MAX_NUMBER)]
Time = Annotated[int, Field(ge=-MAX_TIME, le=MAX_TIME)]


class DamagedManifest(Damaged):
    """A snapshot manifest that cannot be read as one; the message names the task, the id and the first problem."""


class _Manifest(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    task: str
    id: Annotated[int, Field(ge=1)]
    first_batch: Whole
    last_batch: Whole
    rows: Whole
    min_time: Time | None
    max_time: Time | None
    committed_at_ms: Whole
    reason: Literal[REASONS]

    @model_validator(mode="after")
    def _ranges(self) -> _Manifest:
        if self.first_batch > self.last_batch:
            raise ValueError(f"first_batch {self.first_batch} is after last_batch {self.last_batch}")
        if (self.min_time is None) != (self.max_time is None):
            raise ValueError("min_time and max_time: give both or neither")
        if self.min_time is not None and self.max_time is not None and self.min_time > self.max_time:
            raise ValueError(f"min_time {self.min_time} is after max_time {self.max_time}")
        return self


def read_manifest(data: bytes, task: str, snapshot_id: int) -> dict[str, object]:
    """The fields of the manifest `data` of `task`'s snapshot `snapshot_id`, checked; DamagedManifest otherwise."""
    where = f"task {task!r}: snapshot manifest {snapshot_id}"
    if len(data) > MAX_MANIFEST_BYTES:
        raise DamagedManifest(f"{where} is damaged: over {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = _Manifest.model_validate(orjson.loads(data))
    except orjson.JSONDecodeError:
        raise DamagedManifest(f"{where} is damaged: not JSON (truncated?)") from None
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        key = ".".join(str(p) for p in first["loc"]) or "manifest"
        raise DamagedManifest(f"{where} is damaged: {key}: {first['msg'].removeprefix('Value error, ')}") from None
    if manifest.task != task or manifest.id != snapshot_id:
        raise DamagedManifest(f"{where} is damaged: it names task {manifest.task[:100]!r}, id {manifest.id}")
    return manifest.model_dump()
