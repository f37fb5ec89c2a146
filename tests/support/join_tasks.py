"""Join tasks of the end-to-end tests: inner (equi and equi-band) and tracked (left outer, anti) for the move and
spill tests; windowed (tumbling, hopping) and as-of tasks for the window kinds' tests."""

from __future__ import annotations

TASKS = [
    {"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
    {
        "name": "eq_band",
        "join": ["S", "R"],
        "on": [{"op": "eq", "left": "S.k", "right": "R.k"}, {"op": "band", "left": "S.a", "right": "R.x", "width": 5}],
    },
]
TRACKED = [
    {"name": "left", "join": ["R", "S"], "type": "left", "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
    {
        "name": "anti",
        "join": ["S", "R"],
        "type": "anti",
        "on": [{"op": "eq", "left": "S.k", "right": "R.k"}, {"op": "band", "left": "S.a", "right": "R.x", "width": 5}],
    },
]

EQ = [{"op": "eq", "left": "R.k", "right": "S.k"}]


def windowed_tasks(prefix: str) -> list[dict]:
    band = [*EQ, {"op": "band", "left": "R.x", "right": "S.a", "width": 10}]
    return [
        {"name": f"{prefix}in", "join": ["R", "S"], "on": band},
        {"name": f"{prefix}full", "join": ["R", "S"], "type": "full", "on": EQ},
        {"name": f"{prefix}anti", "join": ["S", "R"], "type": "anti", "on": EQ},
    ]


def asof_tasks(prefix: str) -> list[dict]:
    return [
        {"name": f"{prefix}asof", "join": ["R", "S"], "type": "asof", "on": EQ},
        {"name": f"{prefix}asof_left", "join": ["S", "R"], "type": "asof_left", "on": EQ, "max_age_ms": 30},
    ]
