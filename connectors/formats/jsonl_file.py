"""JSON Lines files: events read one per line with their line numbers, results written one per line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from windjoin.connectors.formats.codec_errors import DecodeError
from windjoin.connectors.formats.json_codec import JsonCodec

CODEC = JsonCodec()  # one event per line; decoding keeps no state


def read_lines(path: Path, progress: Any = None) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its line break) of every line that is not blank.

    `progress`, if given, is advanced by the bytes read (a tqdm bar, say).
    """
    with path.open("rb") as lines:
        for line_no, raw in enumerate(lines, start=1):
            if progress is not None:
                progress.update(len(raw))
            line = raw.rstrip(b"\r\n")
            if line.strip():
                yield line_no, line


def decode_line(line: bytes) -> dict[str, Any] | DecodeError:
    """The line's object, or the DecodeError saying why it is not one."""
    try:
        return CODEC.decode(line)
    except DecodeError as err:
        return err


def read_events(path: Path, progress: Any = None) -> Iterator[tuple[int, bytes, dict[str, Any] | DecodeError]]:
    """(line number, raw line, decoded object or the DecodeError saying why not), skipping blank lines."""
    for line_no, line in read_lines(path, progress):
        yield line_no, line, decode_line(line)


def write_record(out: IO[bytes], record: dict[str, Any]) -> None:
    out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
