"""The benchmarks' two-stream workload: R(ts, k, x) and S(ts, k, a) keyed by k, joined on R.k = S.k (task "eq")."""

from __future__ import annotations

from typing import Any


def rs_eq_join(topics: tuple[str, str]) -> dict[str, Any]:
    """The spec's `streams` and `tasks` for R and S on these topics."""
    return {
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "key": "k", "topic": topics[0]},
            "S": {"fields": {"k": "int", "a": "int"}, "key": "k", "topic": topics[1]},
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
    }
