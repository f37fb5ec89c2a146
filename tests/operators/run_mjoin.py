"""Feeding events through MJoin in chunks, collecting results in the n-way oracle's shape."""

from __future__ import annotations

from windjoin.operators.arrivals import ChunkBuilder
from windjoin.operators.mjoin import MJoin
from windjoin.operators.results import pair_records
from windjoin.operators.spec import JoinSpec, parse_spec


def build_spec(spec: dict) -> JoinSpec:
    """The spec validated as a user's would be (n-way tasks included)."""
    return parse_spec(spec)


def run_mjoin(spec_dict: dict, events: list[dict], chunk_size: int, probe_order=None):
    """(task, tuple per joined stream...) in emission order, late input positions, and the operator."""
    spec = build_spec(spec_dict)
    join = MJoin(spec, probe_order)
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
        for combos in result.pairs:
            streams = spec.task(combos.task).join
            results.extend((rec["task"], *(rec[s] for s in streams)) for rec in pair_records(combos))

    for pos, ev in enumerate(events):
        builder.add(ev["stream"], ev, 0)
        positions[ev["stream"]].append(pos)
        if len(builder) >= chunk_size:
            flush()
    flush()
    return results, sorted(late), join
