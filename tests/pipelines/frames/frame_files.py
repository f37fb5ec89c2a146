"""Events as a user's own file-source streams for `join_stream`: one folder of JSON-lines files per stream, read
one file a batch, and the file sink's output read back as rows."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

SPARK_TYPES = {"int": "bigint", "float": "double", "string": "string", "bool": "boolean"}


def write_stream_files(root: Path, spec: dict, events: list[dict], files: int) -> None:
    """Each stream's events into `root/<stream>/<i>.json`, file i of every stream covering the same i-th slice of
    `events` (so one file a batch keeps the streams abreast, and the batches in the events' order)."""
    for name in spec["streams"]:
        (root / name).mkdir(parents=True, exist_ok=True)
    for i in range(files):
        chunk = events[i * len(events) // files : (i + 1) * len(events) // files]
        append_stream_file(root, spec, chunk, f"{i:04d}")


def append_stream_file(root: Path, spec: dict, events: list[dict], name: str) -> None:
    """The events of each stream as its next file: the file source reads files in order of their modification
    times (to the millisecond, so files written in one millisecond would come in any order), set 1 s apart."""
    for stream in spec["streams"]:
        lines = [json.dumps({k: v for k, v in e.items() if k != "stream"}) for e in events if e["stream"] == stream]
        part = root / stream / f".{name}.json.tmp"
        part.write_text("".join(line + "\n" for line in lines))
        newest = max((f.stat().st_mtime for f in (root / stream).glob("*.json")), default=time.time())
        os.utime(part, (newest + 1, newest + 1))
        part.rename(root / stream / f"{name}.json")  # the file source lists whole files only


def stream_ddl(spec: dict, stream: str) -> str:
    s = spec["streams"][stream]
    columns = [f"{s.get('timestamp', 'ts')} bigint", *(f"{f} {SPARK_TYPES[t]}" for f, t in s["fields"].items())]
    return ", ".join(columns)


def file_inputs(spark: Any, spec: dict, root: Path) -> dict[str, Any]:
    """A streaming DataFrame per stream, one file a batch."""
    return {
        name: spark.readStream.schema(stream_ddl(spec, name)).option("maxFilesPerTrigger", 1).json(str(root / name))
        for name in spec["streams"]
    }


def output_rows(spark: Any, path: Path) -> list[dict]:
    """What Spark's file sink committed at `path` (its log decides), as plain dicts."""
    return [r.asDict(recursive=True) for r in spark.read.parquet(str(path)).collect()]
