"""Join tasks of the end-to-end move and spill tests: inner (equi and equi-band) and tracked (left outer, anti)."""

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
