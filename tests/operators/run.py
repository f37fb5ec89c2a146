"""Feeding events through the real operator in chunks, collecting results in the oracle's shape."""

from __future__ import annotations

from windjoin.operators.arrivals import ChunkBuilder
from windjoin.operators.join import WindowJoin
from windjoin.operators.results import pair_records
from windjoin.operators.spec import parse_spec


def run_join(spec_dict: dict, events: list[dict], chunk_size: int) -> tuple[list, list[int], WindowJoin]:
    """(task, left, right) results in emission order, input positions refused as late, and the join."""
    join = WindowJoin(parse_spec(spec_dict))
    results, late = feed(join, events, chunk_size)
    return results, late, join


def feed(join: WindowJoin, events: list[dict], chunk_size: int) -> tuple[list[tuple], list[int]]:
    """Events through `join` in chunks of `chunk_size`: (task, tuple per joined stream...) in emission order, and
    the input positions refused as late."""
    spec = join.spec
    builder = ChunkBuilder(spec)
    results: list[tuple] = []
    late: list[int] = []
    positions: dict[str, list[int]] = {s: [] for s in spec.streams}

    def flush() -> None:
        result = join.process(builder.take())
        for stream, rows in result.late.items():
            late.extend(positions[stream][r] for r in rows)
        for stream in positions:
            positions[stream].clear()
        for found in result.pairs:
            streams = spec.task(found.task).join
            results.extend((rec["task"], *(rec[s] for s in streams)) for rec in pair_records(found))

    for pos, event in enumerate(events):
        builder.add(event["stream"], event, 0)
        positions[event["stream"]].append(pos)
        if len(builder) >= chunk_size:
            flush()
    flush()
    return results, sorted(late)
