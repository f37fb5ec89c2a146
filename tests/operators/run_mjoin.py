"""Feeding events through MJoin in chunks, collecting results in the n-way oracle's shape."""

from __future__ import annotations

from tests.operators.run import feed
from windjoin.operators.mjoin import MJoin
from windjoin.operators.spec import JoinSpec, parse_spec


def build_spec(spec: dict) -> JoinSpec:
    """The spec validated as a user's would be (n-way tasks included)."""
    return parse_spec(spec)


def run_mjoin(spec_dict: dict, events: list[dict], chunk_size: int, probe_order=None):
    """(task, tuple per joined stream...) in emission order, late input positions, and the operator."""
    join = MJoin(build_spec(spec_dict), probe_order)
    results, late = feed(join, events, chunk_size)
    return results, late, join
