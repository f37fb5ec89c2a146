"""Where a unit's handed-over window state waits between the slot giving it up and the slot taking it.

One immutable Arrow IPC file per (routing version, piece, source slot) under `root` (the job's checkpoint
folder, or an object-store URL: pyarrow's filesystems); a piece is a whole partition or a mini-group of one
(`operators.partitioning.Group`, whose key names the file: `v4/3-s0.arrow`, `v4/3.1.0-s2.arrow`). Each file
keeps its positions (event-time high mark, arrival counts) in the schema metadata. Written whole or not at all
(temp file, then rename), rewritten identically when a batch is replayed, and pruned by the driver once no
batch can need it any more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.fs as pafs

from windjoin.operators.partitioning import Group

POSITIONS = b"windjoin.positions"


@dataclass(frozen=True)
class MovedGroup:
    group: Group  # the piece handed over: a whole partition or one of its mini-groups
    rows: pa.Table  # the group's stored tuples (the state segments' columns)
    positions: dict[str, Any]  # {"max_ts": int | None, "counts": {stream: arrivals}, "watermark": int | None}


class MoveStore:
    def __init__(self, root: str) -> None:
        self.fs, self.root = pafs.FileSystem.from_uri(root) if "://" in root else (pafs.LocalFileSystem(), root)

    def put(self, version: int, source: int, group: MovedGroup) -> None:
        """Write what slot `source` hands over of `group.group` at routing version `version` (whole or not at
        all)."""
        folder = self._folder(version)
        self.fs.create_dir(folder, recursive=True)
        path = f"{folder}/{group.group.key}-s{source}.arrow"
        table = group.rows.replace_schema_metadata({POSITIONS: orjson.dumps(group.positions)})
        with self.fs.open_output_stream(path + ".tmp") as out, pa.ipc.new_stream(out, table.schema) as writer:
            writer.write_table(table)
        self.fs.move(path + ".tmp", path)

    def get_all(self, version: int, partition: int) -> list[MovedGroup]:
        """Everything handed over of `partition`'s pieces at `version`, by piece and source slot (none: nothing was
        handed over)."""
        infos = self.fs.get_file_info(pafs.FileSelector(self._folder(version), allow_not_found=True))
        pieces = sorted((piece_of(i.base_name), i.path) for i in infos if i.base_name.endswith(".arrow"))
        out = []
        for group, path in pieces:
            if group.partition != partition:
                continue
            with self.fs.open_input_stream(path) as src:
                table = pa.ipc.open_stream(src).read_all()
            out.append(
                MovedGroup(group, table.replace_schema_metadata(None), orjson.loads(table.schema.metadata[POSITIONS]))
            )
        return out

    def missing(self, version: int, group: Group) -> MissingStateError:
        """The error for a new holder of `group` that finds part of it handed over by nobody."""
        return MissingStateError(
            f"state of {group} was not (wholly) handed over at routing version {version} under "
            f"{self._folder(version)}: the move store was cleaned or is not shared by every executor"
        )

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


LEGACY_NAME = re.compile(r"p(\d+)-d(\d+)-m(\d+)")  # `p3-d1-m0`: the names of files written before Group.key


def piece_of(file_name: str) -> Group:
    """The piece a hand-over file holds, from its name (`3.1.0-s2.arrow`), or from the older `p3-d1-m0-s2.arrow`
    names, so a move in flight across an upgrade still finds its state."""
    stem = file_name.rsplit("-s", 1)[0]
    legacy = LEGACY_NAME.fullmatch(stem)
    return Group(*map(int, legacy.groups())) if legacy else Group.from_key(stem)
