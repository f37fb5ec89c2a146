"""`windjoin join-file --workers N`: the same result bytes, in the same order, and the same refusals as one worker.

The single join (workers=1, today's path) is the reference for bytes and order; the brute-force oracle
(operators/testing/oracle.py, which emits in arrival order) checks the content and order of both. The files
hold ties in event time, disorder within the lateness, late events (some late only against another partition's
events), bad lines of every kind, blank and CRLF lines, and a hot key. Two deliberately wrong merges show the
data can tell a wrong order from the right one.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from windjoin.operators.partitioning import partition_of
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import oracle_join, oracle_mjoin
from windjoin.pipelines.cli import partitioned_join_file
from windjoin.pipelines.cli.join_file import join_file
from windjoin.pipelines.cli.result_merge import JoinedLines

SPEC = {
    "window": {"kind": "time", "size_ms": 20},
    "allowed_lateness_ms": 6,
    "streams": {
        "R": {"fields": {"k": "int", "x": "int", "y": "float"}},
        "S": {"fields": {"k": "int", "a": "int", "b": "float"}},
        "T": {"timestamp": "t", "fields": {"j": "int", "c": "string"}},
        "U": {"fields": {"k": "int"}},  # joined by no task: it only moves event time on
    },
    "tasks": [
        {"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
        {
            "name": "band",
            "join": ["S", "R"],
            "on": [
                {"op": "eq", "left": "S.k", "right": "R.k"},
                {"op": "band", "left": "R.x", "right": "S.a", "width": 3},
                {"op": "ge", "left": "S.b", "right": "R.y"},
            ],
        },
        {"name": "rt", "join": ["R", "T"], "on": [{"op": "eq", "left": "T.j", "right": "R.k"}]},
    ],
}

BAD_LINES = [
    "not json {",
    "[1, 2, 3]",
    '{"stream": "Q", "ts": 5, "k": 1}',
    '{"ts": 5, "k": 1}',
    '{"stream": "R", "ts": 5, "x": 1, "y": 1.0}',
    '{"stream": "R", "ts": 5, "k": "one", "x": 1, "y": 1.0}',
    '{"stream": "S", "ts": "noon", "k": 1, "a": 1, "b": 1.0}',
    '{"stream": "S", "k": 1, "a": 1, "b": 1.0}',
    '{"stream": "T", "t": 5, "j": 1, "c": NaN}',
]


def _events(n: int, seed: int) -> list[dict]:
    """Event times on a coarse clock (ties), up to 9 behind it (some beyond the lateness), key 0 hot."""
    rng = random.Random(seed)
    out, clock = [], 0
    for _ in range(n):
        clock += rng.choice((0, 0, 1, 2))
        ts = max(0, clock - rng.choice((0, 0, 0, 2, 5, 9)))
        k = 0 if rng.random() < 0.4 else rng.randint(1, 12)
        stream = rng.choice("RRSSSTU")
        if stream == "R":
            out.append({"stream": "R", "ts": ts, "k": k, "x": rng.randint(0, 9), "y": rng.choice((0.5, 1.5, 2.5))})
        elif stream == "S":
            out.append({"stream": "S", "ts": ts, "k": k, "a": rng.randint(0, 9), "b": rng.choice((0.5, 1.5, 2.5))})
        elif stream == "T":
            out.append({"stream": "T", "t": ts, "j": k, "c": f"c{rng.randint(0, 99)}"})
        else:
            out.append({"stream": "U", "ts": ts + rng.choice((0, 0, 12)), "k": k})
    return out


def _write(path: Path, events: list[dict], seed: int) -> None:
    """The events as lines, with bad, blank and CRLF lines among them."""
    rng = random.Random(seed)
    lines = []
    for i, event in enumerate(events):
        lines.append(json.dumps(event) + ("\r" if rng.random() < 0.02 else ""))
        if rng.random() < 0.02:
            lines.append(rng.choice(BAD_LINES))
        if rng.random() < 0.01:
            lines.append(rng.choice(("", "   ")))
        if i == len(events) // 2:
            lines.append("")
    path.write_text("\n".join(lines) + "\n")


def _join(spec: dict, path: Path, workers: int, chunk: int, notes: list | None = None) -> tuple:
    out, refused = io.BytesIO(), []
    note = notes.append if notes is not None else None
    report = join_file(parse_spec(spec), path, out, refused.append, chunk, False, workers, note)
    tasks = {name: (t["tuples_in"], t["outputs"]) for name, t in report.tasks.items()}
    return (
        out.getvalue(),
        [(r.line, r.reason, r.detail, r.raw) for r in refused],
        (report.events, report.results, tasks),
    )


def _ordered(spec: dict, lines: bytes) -> list[tuple]:
    joined = {t["name"]: t["join"] for t in spec["tasks"]}
    return [(r["task"], *(r[s] for s in joined[r["task"]])) for r in map(json.loads, lines.splitlines())]


@pytest.fixture(scope="module")
def events_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("workers") / "events.jsonl"
    events = _events(3000, seed=7)
    _write(path, events, seed=8)
    return path, events


@pytest.mark.parametrize(("workers", "chunk"), [(2, 4096), (2, 37), (3, 64), (4, 13)])
def test_workers_write_the_single_joins_bytes_and_refusals(events_file, workers, chunk):
    path, events = events_file
    single = _join(SPEC, path, 1, chunk)
    assert _join(SPEC, path, workers, chunk) == single
    expected, late = oracle_join(SPEC, events)
    assert _ordered(SPEC, single[0]) == expected  # the oracle emits in arrival order, then task, then earlier
    refused = single[1]
    assert sum(r[1] == "late" for r in refused) == len(late) > 20
    assert len({r[1] for r in refused}) >= 8  # late and every kind of bad line


def test_a_wrong_merge_order_is_told_apart(events_file, monkeypatch):
    """Partitions' lines concatenated, or a later arrival's lines reordered, give other bytes than one worker."""
    path, _ = events_file
    single = _join(SPEC, path, 1, 64)[0]

    def concatenated(parts: list[JoinedLines]) -> bytes:
        return b"".join(p.data for p in parts)

    def resorted(parts: list[JoinedLines]) -> bytes:
        lines = []
        for p in parts:
            ends = np.cumsum(p.lengths)
            lines += [
                (int(at), p.data[end - n : end]) for at, n, end in zip(p.later_lines, p.lengths, ends, strict=True)
            ]
        return b"".join(line for _, line in sorted(lines))

    for wrong in (concatenated, resorted):
        monkeypatch.setattr(partitioned_join_file, "merged_lines", wrong)
        got = _join(SPEC, path, 2, 64)[0]
        assert got != single and sorted(got.splitlines()) == sorted(single.splitlines())


def test_lateness_is_judged_against_every_partitions_events(tmp_path):
    """An event is late behind a newer event of another key, which its own partition never sees."""
    keys = [k for k in range(1, 50) if partition_of(np.array([k]), 2)[0] != partition_of(np.array([1]), 2)[0]]
    other = keys[0]
    events = [
        {"stream": "R", "ts": 100, "k": 1, "x": 1, "y": 1.0},
        {"stream": "S", "ts": 200, "k": other, "a": 1, "b": 1.0},
        {"stream": "S", "ts": 150, "k": 1, "a": 1, "b": 1.0},  # late: 50 behind 200
        {"stream": "S", "ts": 196, "k": 1, "a": 1, "b": 1.0},  # on time
        {"stream": "R", "ts": 199, "k": 1, "x": 1, "y": 1.0},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    single = _join(SPEC, path, 1, 2)
    assert _join(SPEC, path, 2, 2) == single
    assert [(r[0], r[1]) for r in single[1]] == [(3, "late")]
    assert len(single[0].splitlines()) == 2  # eq and band pair (S ts 196, R ts 199)


def test_keyed_streams_and_n_way_tasks_split_too(tmp_path):
    fields = {"k": "int", "x": "int", "y": "float"}
    spec = {
        "window": {"kind": "time", "size_ms": 15},
        "allowed_lateness_ms": 4,
        "streams": {s: {"key": "k", "fields": fields} for s in "ABC"},
        "tasks": [
            {
                "name": "chain",
                "join": ["A", "B", "C"],
                "on": [
                    {"op": "eq", "left": "A.k", "right": "B.k"},
                    {"op": "eq", "left": "C.k", "right": "B.k"},
                    {"op": "band", "left": "A.y", "right": "C.y", "width": 1},
                ],
            },
            {"name": "pair", "join": ["B", "A"], "on": [{"op": "eq", "left": "A.k", "right": "B.k"}]},
        ],
    }
    rng = random.Random(3)
    events, clock = [], 0
    for _ in range(1500):
        clock += rng.choice((0, 1, 1, 2))
        k = 0 if rng.random() < 0.5 else rng.randint(1, 9)
        ts = max(0, clock - rng.choice((0, 0, 3, 7)))
        events.append({"stream": rng.choice("ABC"), "ts": ts, "k": k, "x": 0, "y": rng.choice((0.0, 1.0, 2.5))})
    path = tmp_path / "events.jsonl"
    _write(path, events, seed=4)
    single = _join(spec, path, 1, 50)
    assert _join(spec, path, 3, 50) == single
    expected, late = oracle_mjoin(spec, events)
    assert _ordered(spec, single[0]) == expected and len(expected) > 100
    assert sum(r[1] == "late" for r in single[1]) == len(late) > 0


BAND_ONLY = {"name": "b", "join": ["R", "S"], "on": [{"op": "band", "left": "R.x", "right": "S.a", "width": 1}]}
OTHER_FIELD = {"name": "x", "join": ["R", "T"], "on": [{"op": "eq", "left": "T.j", "right": "R.x"}]}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"window": {"kind": "count", "size": 5}}, "count window"),
        ({"tasks": [BAND_ONLY]}, "equated (eq) on no field"),
        ({"tasks": [*SPEC["tasks"][:2], OTHER_FIELD]}, "across the streams of every task"),
    ],
)
def test_a_join_that_does_not_split_runs_on_one_worker_and_says_why(events_file, change, reason):
    path, _ = events_file
    spec = {**SPEC, **change}
    notes: list[str] = []
    assert _join(spec, path, 2, 64, notes) == _join(spec, path, 1, 64)
    assert len(notes) == 1 and reason in notes[0]


def _descendants(pid: int) -> set[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
    found, todo = set(), [pid]
    while todo:
        pid = todo.pop()
        children = [p for p, parent in parents.items() if parent == pid]
        found.update(children)
        todo += children
    return found


def _cli(spec_path: Path, events: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "windjoin.pipelines",
        "join-file",
        str(spec_path),
        str(events),
        "-o",
        str(out),
        *extra,
    ]


def test_cli_workers_option_writes_the_same_files(events_file, tmp_path):
    path, _ = events_file
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC))
    runs = {}
    for workers in ("1", "3"):
        out, dead = tmp_path / f"out{workers}.jsonl", tmp_path / f"dead{workers}.jsonl"
        cmd = _cli(spec_path, path, out, "--workers", workers, "--dead-letter", str(dead), "--chunk-size", "100")
        proc = subprocess.run(cmd, capture_output=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        refusals = [line for line in proc.stderr.splitlines() if b"events.jsonl:" in line]
        runs[workers] = (out.read_bytes(), dead.read_bytes(), refusals)
    assert runs["1"] == runs["3"] and runs["1"][0] and runs["1"][2]


def _started(tmp_path: Path, workers: str) -> tuple[subprocess.Popen, set[int]]:
    """join-file on a file long enough to be stopped midway, once its workers run; the process and theirs."""
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC))
    path = tmp_path / "events.jsonl"
    line = json.dumps({"stream": "R", "ts": 1, "k": 1, "x": 1, "y": 1.0}) + "\n"
    path.write_text(line * 1_500_000)  # no pairs, but reading takes seconds
    proc = subprocess.Popen(_cli(spec_path, path, tmp_path / "out.jsonl", "--workers", workers), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(_descendants(proc.pid)) < int(workers) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    assert proc.poll() is None, proc.stderr.read()
    return proc, _descendants(proc.pid)


def _gone(pids: set[int], seconds: float = 10) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]


def test_ctrl_c_stops_every_worker(tmp_path):
    proc, workers = _started(tmp_path, "2")
    assert len(workers) == 2
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 1
    assert b"Aborted!" in proc.stderr.read()
    assert not _gone(workers), "workers left running"


def test_a_dead_worker_is_an_error_not_a_hang(tmp_path):
    proc, workers = _started(tmp_path, "2")
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    assert proc.wait(timeout=20) == 1
    stderr = proc.stderr.read().decode()
    assert f"(pid {victim}) was killed by signal SIGKILL" in stderr and "Traceback" not in stderr
    assert not _gone(workers - {victim})
