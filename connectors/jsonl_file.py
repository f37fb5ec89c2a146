"""JSON Lines files: events read one per line with their line numbers, results written one per line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from windjoin.connectors.codec_errors import DecodeError
from windjoin.connectors.json_codec import JsonCodec


def read_events(path: Path, progress: Any = None) -> Iterator[tuple[int, bytes, dict[str, Any] | DecodeError]]:
    """(line number, raw line, decoded object or the DecodeError saying why not), skipping blank lines.

    `progress`, if given, is advanced by the bytes read (a tqdm bar, say).
    """
    codec = JsonCodec()
    with path.open("rb") as lines:
        for line_no, raw in enumerate(lines, start=1):
            if progress is not None:
                progress.update(len(raw))
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            try:
                yield line_no, line, codec.decode(line)
            except DecodeError as err:
                yield line_no, line, err


def write_record(out: IO[bytes], record: dict[str, Any]) -> None:
    out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
