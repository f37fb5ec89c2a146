"""`windjoin join-file` on n-way tasks: one object per stream in every line, results equal to the n-way oracle."""

from __future__ import annotations

import io
import json
import random

from tests.operators.run_mjoin import build_spec
from tests.oracle import oracle_join
from tests.oracle_mjoin import as_multiset, oracle_mjoin
from windjoin.pipelines.join_file import join_file

FIELDS = {"k": "int", "x": "int", "y": "float"}
SPEC = {
    "window": {"kind": "time", "size_ms": 40},
    "allowed_lateness_ms": 5,
    "streams": {
        "A": {"timestamp": "ts", "fields": FIELDS},
        "B": {"timestamp": "ts", "fields": FIELDS},
        "C": {"timestamp": "t", "fields": FIELDS},
    },
    "tasks": [
        {
            "name": "chain",
            "join": ["A", "B", "C"],
            "on": [
                {"op": "eq", "left": "A.k", "right": "B.k"},
                {"op": "eq", "left": "B.x", "right": "C.x"},
                {"op": "band", "left": "A.y", "right": "C.y", "width": 3},
            ],
        },
        {"name": "pair", "join": ["B", "A"], "on": [{"op": "eq", "left": "A.x", "right": "B.x"}]},
    ],
}


def _events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out, clock = [], 0
    for _ in range(n):
        clock += rng.randint(0, 2)
        stream = rng.choice("ABC")
        ts_field = "t" if stream == "C" else "ts"
        out.append(
            {
                "stream": stream,
                ts_field: max(0, clock - rng.randint(0, 8)),  # some beyond the lateness
                "k": rng.randint(0, 3),
                "x": rng.randint(0, 5),
                "y": rng.uniform(0, 10),
            }
        )
    return out


def _join(tmp_path, spec: dict, events: list[dict], chunk_size: int) -> tuple[list[dict], list[int]]:
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    out, refused = io.BytesIO(), []
    join_file(build_spec(spec), path, out, refused.append, chunk_size, show_progress=False)
    lines = [json.loads(line) for line in out.getvalue().decode().splitlines()]
    return lines, sorted(r.line - 1 for r in refused if r.reason == "late")


def test_three_way_lines_equal_the_oracle(tmp_path):
    events = _events(1200, seed=7)
    lines, late = _join(tmp_path, SPEC, events, chunk_size=53)
    expected, expected_late = oracle_mjoin(SPEC, events)
    assert late == expected_late and late
    joins = {t["name"]: t["join"] for t in SPEC["tasks"]}
    assert all(set(line) == {"task", *joins[line["task"]]} for line in lines)
    got = [(line["task"], *(line[s] for s in joins[line["task"]])) for line in lines]
    assert as_multiset(got) == as_multiset(expected)
    assert {line["task"] for line in lines} == {"chain", "pair"}
    # the 2-way task beside it gives exactly the 2-way oracle's pairs
    pairs, _ = oracle_join({**SPEC, "tasks": [SPEC["tasks"][1]]}, events)
    assert as_multiset([g for g in got if g[0] == "pair"]) == as_multiset(pairs)


def test_lines_do_not_depend_on_chunk_size(tmp_path):
    events = _events(600, seed=8)
    one_by_one, _ = _join(tmp_path, SPEC, events, chunk_size=1)
    assert one_by_one
    for chunk_size in (7, 10_000):
        assert _join(tmp_path, SPEC, events, chunk_size)[0] == one_by_one
