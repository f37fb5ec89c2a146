"""A block of event lines decoded into one chunk of arrivals per stream, and the lines refused, as join-file does.

The lines are decoded at once, where they lie, when every one is plain (connectors.formats.json_columns), else line by
line with each bad line's reason, exactly as join-file's own path does (`join_file._Run.add_block`); so the
block can be decoded in any process, and a refused line carries the same reason and detail whichever decodes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from windjoin.connectors.formats.codec_errors import DecodeError
from windjoin.connectors.formats.json_columns import decode_stream_lines
from windjoin.connectors.formats.jsonl_blocks import LineBlock
from windjoin.connectors.formats.jsonl_file import CODEC, decode_line
from windjoin.operators.arrivals import ChunkBuilder
from windjoin.operators.batch import Arrivals
from windjoin.operators.schema import RecordError
from windjoin.operators.spec import JoinSpec


@dataclass(frozen=True)
class DecodedBlock:
    """Per stream the block's accepted events as arrivals (`order`: position among the block's accepted events)
    and each one's line in the block; the refused lines as (line in the block, reason, detail), in line order."""

    chunk: dict[str, Arrivals]
    lines: dict[str, np.ndarray]
    refused: list[tuple[int, str, str]]


def decode_block(spec: JoinSpec, builder: ChunkBuilder, block: LineBlock) -> DecodedBlock:
    """`block`'s events decoded and checked against `spec` (`builder`: the spec's, empty between calls)."""
    decoded = decode_stream_lines(block.data, block.starts, block.ends, builder.schemas, CODEC.max_message_bytes)
    if decoded is not None:
        arrival = time.time_ns()
        chunk, lines = {}, {}
        for stream, (positions, columns) in decoded.items():
            numpy_columns = {name: column.to_numpy(zero_copy_only=False) for name, column in columns.items()}
            chunk[stream] = Arrivals(numpy_columns, positions, np.full(len(positions), arrival, np.int64))
            lines[stream] = positions
        return DecodedBlock(chunk, lines, [])
    by_stream: dict[str, list[int]] = {s: [] for s in spec.streams}
    refused = []
    for i in range(len(block)):
        event = decode_line(block.line(i))
        try:
            if isinstance(event, DecodeError):
                raise RecordError(event.reason, event.detail)
            builder.add(event.get("stream"), event, time.time_ns())
        except RecordError as err:
            refused.append((i, err.reason, str(err)))
            continue
        by_stream[event["stream"]].append(i)
    return DecodedBlock(builder.take(), {s: np.array(rows, dtype=np.int64) for s, rows in by_stream.items()}, refused)
