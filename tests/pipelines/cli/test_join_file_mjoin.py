"""`windjoin join-file` on n-way tasks: one object per stream in every line, results equal to the n-way oracle."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import yaml

from windjoin.operators.spec import load_spec, parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join, oracle_mjoin
from windjoin.pipelines.cli import join_file as join_file_module
from windjoin.pipelines.cli.join_file import join_file

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
    join_file(parse_spec(spec), path, out, refused.append, chunk_size, show_progress=False)
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


def test_cli_runs_a_three_way_spec(tmp_path):
    """The real command on a YAML spec: the n-way task validates, and each line has one object per stream."""
    events = _events(400, seed=9)
    spec_path, events_path, out = tmp_path / "spec.yaml", tmp_path / "events.jsonl", tmp_path / "out.jsonl"
    spec_path.write_text(yaml.safe_dump(SPEC))
    events_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    cmd = [sys.executable, "-m", "windjoin.pipelines", "join-file", str(spec_path), str(events_path), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    expected, _ = oracle_mjoin(SPEC, events)
    joins = {t["name"]: t["join"] for t in SPEC["tasks"]}
    assert as_multiset([(r["task"], *(r[s] for s in joins[r["task"]])) for r in lines]) == as_multiset(expected)
    assert any(set(r) == {"task", "A", "B", "C"} for r in lines)


def test_three_way_example_in_the_readme(tmp_path):
    examples = Path(__file__).parents[3] / "examples"
    events = [json.loads(line) for line in (examples / "three_way_events.jsonl").read_text().splitlines()]
    spec = load_spec(examples / "three_way.yaml").model_dump(by_alias=True, exclude_none=True)
    lines, late = _join(tmp_path, spec, events, chunk_size=3)
    expected, _ = oracle_mjoin(spec, events)
    assert late == []
    assert [(r["orders"]["order"], r["shipments"]["weight"]) for r in lines] == [(1, 2.0), (2, 4.0)]
    assert as_multiset([(r["task"], r["orders"], r["payments"], r["shipments"]) for r in lines]) == as_multiset(
        expected
    )


def test_lines_decoded_at_once_join_as_lines_decoded_one_by_one(tmp_path, monkeypatch):
    """Blocks of plain lines go through pyarrow's reader (connectors.formats.json_columns), blocks with a bad line line
    by line: the results and the refusals are the same either way, and both paths are taken here."""
    events = [json.dumps(e) for e in _events(900, seed=11)]
    events[300] = events[300].replace('"k": ', '"k": 1.5, "z": ')  # a float for an int: wrong_type, line by line
    events[700] = "{not json"
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(events) + "\n")

    def run() -> tuple[bytes, list]:
        out, refused = io.BytesIO(), []
        join_file(parse_spec(SPEC), path, out, refused.append, 100, show_progress=False)
        return out.getvalue(), [(r.line, r.reason) for r in refused]

    blocks = []
    real = join_file_module.decode_stream_columns
    monkeypatch.setattr(join_file_module, "decode_stream_columns", lambda *a: blocks.append(real(*a)) or blocks[-1])
    by_blocks = run()
    monkeypatch.setattr(join_file_module, "decode_stream_columns", lambda *a: None)
    assert by_blocks == run()
    assert sum(b is None for b in blocks) == 2 and len(blocks) == 9  # the two blocks holding a bad line
    assert (301, "wrong_type") in by_blocks[1] and (701, "not_json") in by_blocks[1]
