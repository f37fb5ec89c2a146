"""The operators under test, fed through the shared harness (operators.testing) and returned for their counters."""

from __future__ import annotations

from windjoin.operators.join import WindowJoin
from windjoin.operators.mjoin import MJoin
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing import join_events


def run_join(spec_dict: dict, events: list[dict], chunk_size: int) -> tuple[list, list[int], WindowJoin]:
    """(task, left, right) results in emission order, input positions refused as late, and the join."""
    join = WindowJoin(parse_spec(spec_dict))
    joined = join_events(join.spec, events, chunk_size, join)
    return joined.rows(join.spec), joined.late, join


def run_mjoin(spec_dict: dict, events: list[dict], chunk_size: int, probe_order=None) -> tuple[list, list[int], MJoin]:
    """(task, tuple per joined stream...) in emission order, late input positions, and the operator."""
    join = MJoin(parse_spec(spec_dict), probe_order)
    joined = join_events(join.spec, events, chunk_size, join)
    return joined.rows(join.spec), joined.late, join
