"""A JSON Lines file as blocks of its non-blank lines, found by numpy rather than one Python step per line.

The lines are those of `jsonl_file.read_lines` (the same numbers, the same bytes: line breaks and trailing
carriage returns dropped, blank lines skipped), so a reader of blocks refuses and reports exactly what a reader
of lines does. Python looks only at the rare lines that may be blank or end in a carriage return.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

READ_BYTES = 1 << 22
_NOT_BLANK = np.ones(256, dtype=bool)
_NOT_BLANK[list(b" \t\n\r\x0b\x0c")] = False  # what bytes.strip() strips


@dataclass(frozen=True)
class LineBlock:
    """Consecutive non-blank lines, one line break apart in `data` (none before the first or after the last):
    line i is `data[starts[i]:ends[i]]`, numbered `line_no[i]` in the file."""

    data: bytes
    starts: np.ndarray
    ends: np.ndarray
    line_no: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def line(self, i: int) -> bytes:
        return self.data[self.starts[i] : self.ends[i]]

    def binary_array(self) -> pa.BinaryArray:
        """The lines as one Arrow array (their bytes copied once, no Python object per line)."""
        values = np.delete(np.frombuffer(self.data, dtype=np.uint8), self.ends[:-1])  # the line breaks
        offsets = np.append(self.starts - np.arange(len(self)), len(values)).astype(np.int32)
        return pa.Array.from_buffers(pa.binary(), len(self), [None, pa.py_buffer(offsets), pa.py_buffer(values)])


def read_blocks(path: Path, lines: int, progress: Any = None, read_bytes: int = READ_BYTES) -> Iterator[LineBlock]:
    """Blocks of `lines` non-blank lines (the last may hold fewer); `progress` (a tqdm bar, say) is advanced by
    the bytes read."""
    pending: list[LineBlock] = []
    held = 0
    for piece in _pieces(path, progress, read_bytes):
        at = 0
        while at < len(piece):
            take = min(lines - held, len(piece) - at)
            pending.append(_slice(piece, at, at + take))
            held += take
            at += take
            if held == lines:
                yield _concat(pending)
                pending, held = [], 0
    if held:
        yield _concat(pending)


def _pieces(path: Path, progress: Any, read_bytes: int) -> Iterator[LineBlock]:
    """The file's non-blank lines, a piece of whole lines per read."""
    line_no = 1
    tail = b""
    with path.open("rb") as f:
        while True:
            chunk = f.read(read_bytes)
            if progress is not None and chunk:
                progress.update(len(chunk))
            data = tail + chunk
            if not data:
                return
            if chunk:
                cut = data.rfind(b"\n") + 1
                data, tail = data[:cut], data[cut:]
                if not data:
                    continue
            piece, line_no = _lines_of(data, line_no)
            if len(piece):
                yield piece
            if not chunk:
                return


def _lines_of(data: bytes, first_line: int) -> tuple[LineBlock, int]:
    """The non-blank lines of `data` (whole lines; the last may lack its line break), and the next line's number."""
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw == 10)
    if not data.endswith(b"\n"):
        ends = np.append(ends, len(raw))
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    ends = ends.astype(np.int64)
    numbers = np.arange(first_line, first_line + len(ends), dtype=np.int64)
    first = raw[np.minimum(starts, len(raw) - 1)]
    last = raw[np.maximum(ends - 1, 0)]
    doubtful = np.flatnonzero((ends == starts) | ~_NOT_BLANK[first] | (last == 13))
    if not len(doubtful):
        return LineBlock(data, starts, ends, numbers), first_line + len(ends)
    keep = np.ones(len(ends), dtype=bool)
    for i in doubtful.tolist():  # rare: Python's own rstrip and strip decide
        line = data[starts[i] : ends[i]].rstrip(b"\r\n")
        ends[i] = starts[i] + len(line)
        keep[i] = bool(line.strip())
    lines = [data[s:e] for s, e in zip(starts[keep].tolist(), ends[keep].tolist(), strict=True)]
    return _joined(lines, numbers[keep]), first_line + len(ends)


def _joined(lines: list[bytes], numbers: np.ndarray) -> LineBlock:
    lengths = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
    ends = np.cumsum(lengths + 1) - 1
    return LineBlock(b"\n".join(lines), ends - lengths, ends, numbers)


def _slice(block: LineBlock, lo: int, hi: int) -> LineBlock:
    return LineBlock(block.data, block.starts[lo:hi], block.ends[lo:hi], block.line_no[lo:hi])


def _concat(parts: list[LineBlock]) -> LineBlock:
    """One block of the parts' lines, its data only the bytes they span, one line break between parts."""
    datas, starts, ends, base = [], [], [], 0
    for part in parts:
        lo, hi = int(part.starts[0]), int(part.ends[-1])
        datas.append(part.data[lo:hi])
        starts.append(part.starts - lo + base)
        ends.append(part.ends - lo + base)
        base += hi - lo + 1
    numbers = np.concatenate([p.line_no for p in parts])
    return LineBlock(b"\n".join(datas), np.concatenate(starts), np.concatenate(ends), numbers)
