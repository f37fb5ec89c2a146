"""`windjoin join-file` end to end: real files in, results equal to the oracle, bad lines reported and skipped."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import yaml

from windjoin.operators.testing.oracle import as_multiset, oracle_join

SPEC = {
    "window": {"kind": "time", "size_ms": 30},
    "allowed_lateness_ms": 5,
    "streams": {
        "R": {"timestamp": "ts", "fields": {"k": "int", "x": "int", "y": "float"}},
        "S": {"timestamp": "ts", "fields": {"k": "int", "a": "int", "b": "float"}},
    },
    "tasks": [
        {"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
        {
            "name": "band",
            "join": ["S", "R"],
            "on": [
                {"op": "band", "left": "R.x", "right": "S.a", "width": 2},
                {"op": "ge", "left": "S.b", "right": "R.y"},
            ],
        },
    ],
}

BAD_LINES = {
    "not json {": "not_json",
    "[1, 2, 3]": "not_an_object",
    '{"stream": "Q", "ts": 5, "k": 1}': "unknown_stream",
    '{"ts": 5, "k": 1}': "unknown_stream",
    '{"stream": "R", "ts": 5, "x": 1, "y": 1.0}': "missing_field",
    '{"stream": "R", "ts": 5, "k": "one", "x": 1, "y": 1.0}': "wrong_type",
    '{"stream": "S", "ts": "noon", "k": 1, "a": 1, "b": 1.0}': "bad_timestamp",
    '{"stream": "S", "k": 1, "a": 1, "b": 1.0}': "missing_timestamp",
}


def _good_events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    events, clock = [], 0
    for _ in range(n):
        clock += rng.randint(0, 2)
        ts = max(0, clock - rng.randint(0, 4))
        if rng.random() < 0.5:
            events.append(
                {"stream": "R", "ts": ts, "k": rng.randint(0, 6), "x": rng.randint(0, 20), "y": rng.uniform(0, 10)}
            )
        else:
            events.append(
                {"stream": "S", "ts": ts, "k": rng.randint(0, 6), "a": rng.randint(0, 20), "b": rng.uniform(0, 10)}
            )
    return events


def _run(tmp_path, lines: list[str], *extra: str) -> subprocess.CompletedProcess:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, "-m", "windjoin.pipelines", "join-file", str(spec), str(events), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_results_equal_oracle_and_bad_lines_are_reported(tmp_path):
    good = _good_events(1500, seed=4)
    late = {"stream": "R", "ts": 0, "k": 1, "x": 1, "y": 1.0}  # far behind the running max: late
    lines, bad_at = [], {}
    bad = list(BAD_LINES.items())
    for i, event in enumerate(good):
        lines.append(json.dumps(event))
        if i % 150 == 75 and bad:
            text, reason = bad.pop()
            lines.append(text)
            bad_at[len(lines)] = reason
    lines.append(json.dumps(late))
    bad_at[len(lines)] = "late"
    out = tmp_path / "out.jsonl"
    dead = tmp_path / "dead.jsonl"
    proc = _run(tmp_path, lines, "-o", str(out), "--dead-letter", str(dead), "--chunk-size", "97")
    assert proc.returncode == 0, proc.stderr

    expected, expected_late = oracle_join(SPEC, good + [late])
    assert expected_late == [len(good)]
    got = [json.loads(line) for line in out.read_text().splitlines()]
    tasks = {t["name"]: t["join"] for t in SPEC["tasks"]}
    assert as_multiset([(r["task"], r[tasks[r["task"]][0]], r[tasks[r["task"]][1]]) for r in got]) == as_multiset(
        expected
    )
    for line_no, reason in bad_at.items():
        assert f"events.jsonl:{line_no}: {reason}:" in proc.stderr
    refused = [json.loads(line) for line in dead.read_text().splitlines()]
    assert {(r["line"], r["reason"]) for r in refused} == set(bad_at.items())
    assert all(r["raw"] == lines[r["line"] - 1] for r in refused)
    assert f"{len(expected)} results" in proc.stderr


def test_spec_errors_exit_nonzero_naming_the_key(tmp_path):
    SPEC_BAD = {**SPEC, "window": {"kind": "time", "size_ms": -3}}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC_BAD))
    events = tmp_path / "events.jsonl"
    events.write_text("")
    cmd = [sys.executable, "-m", "windjoin.pipelines", "join-file", str(spec), str(events)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "window.size_ms" in proc.stderr and "greater than or equal to 0" in proc.stderr


def test_offline_demo_runs_and_writes_results(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "windjoin.pipelines",
        "demo",
        "--offline",
        "--events",
        "4000",
        "--out-dir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert results and all(
        abs(r["R"]["x"] - r["S"]["a"]) <= 10 and abs(r["R"]["y"] - r["S"]["b"]) <= 10 for r in results
    )


def test_outer_semi_and_anti_tasks_over_asymmetric_bounds_equal_the_oracle(tmp_path):
    """A complete file closes every window: each tuple that never paired is written once, its other side null;
    --workers falls back to one worker for such tasks (and says so)."""
    bounds = {"kind": "time", "lower_ms": -20, "upper_ms": 5}
    on = [{"op": "eq", "left": "R.k", "right": "S.k"}]
    spec = {
        **SPEC,
        "window": bounds,
        "tasks": [
            {"name": "left", "join": ["R", "S"], "type": "left", "on": on},
            {"name": "full", "join": ["S", "R"], "type": "full", "on": on, "window": {"kind": "time", "size_ms": 3}},
            {"name": "semi", "join": ["R", "S"], "type": "semi", "on": on},
            {"name": "anti", "join": ["S", "R"], "type": "anti", "on": on},
        ],
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    good = _good_events(1200, seed=7)
    (tmp_path / "events.jsonl").write_text("\n".join(json.dumps(e) for e in good) + "\n")
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "windjoin.pipelines", "join-file", str(tmp_path / "spec.yaml")]
    cmd += [str(tmp_path / "events.jsonl"), "-o", str(out), "--chunk-size", "61", "--workers", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "joining on one worker" in proc.stderr and "unpaired rows" in proc.stderr
    expected, _ = oracle_join(spec, good)
    tasks = {t["name"]: t["join"] for t in spec["tasks"]}
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert as_multiset([(r["task"], r[tasks[r["task"]][0]], r[tasks[r["task"]][1]]) for r in got]) == as_multiset(
        expected
    )
    assert {r["task"] for r in got if None in r.values()} == {"left", "full", "semi", "anti"}
