"""Where a moved partition group's window state waits between its old slot and its new one.

One immutable Arrow IPC file per (routing version, partition) under `root` (the job's checkpoint folder, or an
object-store URL: pyarrow's filesystems), its positions (event-time high mark, arrival counts) in the schema
metadata. Written whole or not at all (temp file, then rename), rewritten identically when a batch is replayed,
and pruned by the driver once no batch can need it any more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.fs as pafs

POSITIONS = b"windjoin.positions"


@dataclass(frozen=True)
class MovedGroup:
    rows: pa.Table  # the group's stored tuples (the state segments' columns)
    positions: dict[str, Any]  # {"max_ts": int | None, "counts": {stream: arrivals}}


class MoveStore:
    def __init__(self, root: str) -> None:
        self.fs, self.root = pafs.FileSystem.from_uri(root) if "://" in root else (pafs.LocalFileSystem(), root)

    def put(self, version: int, partition: int, group: MovedGroup) -> None:
        folder = self._folder(version)
        self.fs.create_dir(folder, recursive=True)
        path = f"{folder}/p{partition}.arrow"
        table = group.rows.replace_schema_metadata({POSITIONS: orjson.dumps(group.positions)})
        with self.fs.open_output_stream(path + ".tmp") as out, pa.ipc.new_stream(out, table.schema) as writer:
            writer.write_table(table)
        self.fs.move(path + ".tmp", path)

    def get(self, version: int, partition: int) -> MovedGroup:
        path = f"{self._folder(version)}/p{partition}.arrow"
        try:
            with self.fs.open_input_stream(path) as src:
                table = pa.ipc.open_stream(src).read_all()
        except FileNotFoundError as exc:
            raise MissingStateError(
                f"the state of partition {partition} moved by routing version {version} is not at {path}: "
                "the move store was cleaned or is not shared by every executor"
            ) from exc
        return MovedGroup(table.replace_schema_metadata(None), orjson.loads(table.schema.metadata[POSITIONS]))

    def prune(self, below_version: int) -> None:
        """Delete the states of routing versions below `below_version` (installed in batches now committed)."""
        selector = pafs.FileSelector(self.root, allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            name = info.base_name
            versioned = info.type == pafs.FileType.Directory and name.startswith("v") and name[1:].isdigit()
            if versioned and int(name[1:]) < below_version:
                self.fs.delete_dir(info.path)

    def _folder(self, version: int) -> str:
        return f"{self.root}/v{version}"


class MissingStateError(RuntimeError):
    """A moved group's state cannot be found: joining on without it would lose pairs, so the batch fails."""
