"""Feeding events through the real operator in chunks, collecting results in the oracle's shape."""

from __future__ import annotations

from windjoin.operators.arrivals import ChunkBuilder
from windjoin.operators.join import WindowJoin
from windjoin.operators.results import pair_records
from windjoin.operators.spec import parse_spec


def run_join(spec_dict: dict, events: list[dict], chunk_size: int) -> tuple[list, list[int], WindowJoin]:
    """(task, left, right) results in emission order, input positions refused as late, and the join."""
    spec = parse_spec(spec_dict)
    join = WindowJoin(spec)
    builder = ChunkBuilder(spec)
    results: list = []
    late: list[int] = []
    positions: dict[str, list[int]] = {s: [] for s in spec.streams}

    def flush() -> None:
        result = join.process(builder.take())
        for stream, rows in result.late.items():
            late.extend(positions[stream][r] for r in rows)
        for stream in positions:
            positions[stream].clear()
        for pairs in result.pairs:
            left, right = spec.task(pairs.task).join
            results.extend((rec["task"], rec[left], rec[right]) for rec in pair_records(pairs))

    for pos, event in enumerate(events):
        builder.add(event["stream"], event, 0)
        positions[event["stream"]].append(pos)
        if len(builder) >= chunk_size:
            flush()
    flush()
    return results, sorted(late), join
