"""A toy sink kind for the tests: JSON lines files under a folder, registered as `sinks.toy_jsonl` by this module
alone (the room a new sink needs: its config model, its class, one `register_sink` call).

Slots stage from executor processes, so the toy keeps its pieces in files, not in memory: a piece is one file
renamed into place; the commit concatenates a batch's pieces into its batch file and then records the batch id.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.sinks import register_sink

KIND = "toy_jsonl"


class ToySinkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str


class ToySink:
    """One folder per task: staged pieces `<batch>.<piece>.staged`, committed batches `<batch>.jsonl`, and
    `committed` holding the last committed batch id."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = f"toy {self.path}"

    def stage(self, batch_id: int, piece: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        staged = {}
        for task, table in tables.items():
            folder = self.path / task
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{batch_id}.{piece}.tmp"
            tmp.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in table.to_pylist()))
            tmp.rename(folder / f"{batch_id}.{piece}.staged")
            staged[task] = table.num_rows
        return staged

    def commit(
        self,
        batch_id: int,
        pieces: Mapping[str, Collection[int]],
        *,
        schemas: Mapping[str, pa.Schema],
        batch_max: Mapping[str, int],
    ) -> list[str]:
        committed = []
        for task, slots in pieces.items():
            folder = self.path / task
            folder.mkdir(parents=True, exist_ok=True)
            last = self.last_committed(task)
            if last is not None and batch_id <= last:
                if batch_id < last:
                    raise RuntimeError(f"{self.name}: batch {batch_id} is below the committed {last}")
                continue  # a replay
            staged = [folder / f"{batch_id}.{p}.staged" for p in sorted(slots)]
            (folder / f"{batch_id}.jsonl").write_bytes(b"".join(p.read_bytes() for p in staged))
            (folder / "committed").write_text(str(batch_id))
            for p in staged:
                p.unlink()
            committed.append(task)
        return committed

    def last_committed(self, task: str) -> int | None:
        marker = self.path / task / "committed"
        return int(marker.read_text()) if marker.exists() else None

    def rows(self, task: str) -> list[dict[str, Any]]:
        """Every committed row of `task`."""
        return [orjson.loads(line) for f in sorted((self.path / task).glob("*.jsonl")) for line in f.open("rb")]


def toy_sink(config: ToySinkSpec, spec: JoinSpec) -> ToySink:
    return ToySink(config.path)


register_sink(KIND, ToySinkSpec, toy_sink)
