"""windjoin's join-file kernel vs Apache Flink's joins (PyFlink, local mini-cluster) on the same files.

Five workloads over two files, each written once as one JSON Lines file of both streams in timestamp order (a
"stream" field per event), then joined by both systems in the same run:

- equi: paper 000's workload: Poisson arrivals (1,500 tuples/s per stream), join key from the b-model (bias
  0.7 over [0, 10^7]); R.k = S.k AND |R.ts - S.ts| <= 10 s.
- band: the SplitJoin workload (shared/papers/README.md): R(x int, y float, z 20-char string), S(a int,
  b float, c double, d bool), values uniform in 1..10^4; |R.x - S.a| <= 10 AND |R.y - S.b| <= 10, with a
  time window (Flink's interval join is time-based): |R.ts - S.ts| <= 4 s at 1,000 tuples/s per stream.
- tumble, hop: the equi file joined in tumbling windows of 10 s, and in hopping windows of 10 s every 5 s
  (R.k = S.k, a pair once per window holding both): windjoin's `tumbling`/`hopping` kinds against Flink SQL's
  window join over TUMBLE/HOP.
- asof: the equi file, each R tuple with the S tuple of its key valid at its time (the latest at or before it):
  windjoin's `asof` task against Flink SQL's event-time temporal join over a versioned view.

windjoin: `windjoin join-file`'s code path from this process (pipelines/cli/join_file.py) with its default
workers, every core (`--workers`, recorded as `workers`): worker processes decode blocks of 16,384 lines at once
with pyarrow's JSON reader and join hash partitions of the events, this process judges lateness, routes and
merges (results to /dev/null; a join that cannot be split, the band workload's, runs in one process); and the
WindowJoin kernel alone, pinned to one core, on the same chunks decoded beforehand. Flink: benchmarks/flink_job.py
in .venv-flink (scripts/setup_flink.sh), Flink SQL interval joins counting pairs, at parallelism 1 and 2 (all
cores).

Rates are steady input tuples/s: (N_full - N_part) / (t_full - t_part) between a prefix of the file (the first
quarter) and the whole file, so fixed per-job costs cancel (for Flink t is the job's net runtime, after a
warm-up job on a small prefix in the same JVM). JVM start and per-job costs are reported apart. Every
system's pair count must equal an exact vectorised count over the file (and each other), or the run fails.

    python -m benchmarks.flink_peer [--quick]   # about 6 minutes; --quick: a smoke run of tiny files (~15 s)

Without .venv-flink it first runs scripts/setup_flink.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from benchmarks.band_count import band_pairs
from benchmarks.machine import machine_facts
from benchmarks.params_cli import add_param_flags, params_from
from benchmarks.results_file import write_results
from windjoin.connectors.formats.jsonl_file import read_events
from windjoin.operators.arrivals import ChunkBuilder
from windjoin.operators.batch import Arrivals
from windjoin.operators.mjoin import join_operator
from windjoin.operators.spec import JoinSpec, parse_spec
from windjoin.operators.workloads.b_model import Workload, WorkloadConfig, poisson_arrivals
from windjoin.pipelines.cli.join_file import DEFAULT_CHUNK, default_workers, join_file

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results" / "flink.json"
FLINK_PYTHON = ROOT / ".venv-flink" / "bin" / "python"
FLINK_JOB = Path(__file__).parent / "flink_job.py"
WORKLOADS = ("equi", "band", "tumble", "hop", "asof")
ON_EQUI_FILE = ("tumble", "hop", "asof")  # workloads joining the equi workload's file another way


@dataclass(frozen=True)
class Params:
    equi_seconds: float = 1000.0  # event-time seconds of input
    equi_rate: float = 1500.0  # tuples/s per stream
    equi_window_ms: int = 10_000
    equi_keys: int = 10_000_001
    equi_bias: float = 0.7
    hop_ms: int = 5_000  # the hopping windows' hop (their size: equi_window_ms)
    band_seconds: float = 60.0
    band_rate: float = 1000.0
    band_window_ms: int = 4_000
    band_width: int = 10
    band_values: int = 10_000  # values uniform in 1..band_values
    ts_granularity_ms: int = 1  # timestamps rounded down to multiples of this (coarse: ties, pairs at |dts| = W)
    chunk: int = DEFAULT_CHUNK  # join-file's chunk size (lines a block; events a worker joins a step)
    workers: int = 0  # join-file's worker processes (0: its default, every core)
    part_fraction: float = 0.25  # the prefix for the steady rate; 0: rate = N / t over the whole file
    warmup_lines: int = 2000  # Flink's warm-up job reads this many lines first (0: none)
    repeats: int = 3  # windjoin runs per file, the best kept
    flink_repeats: int = 2  # Flink jobs per file (after one warm-up), the least net runtime kept
    parallelism: str = "1,2"  # Flink parallelisms
    seed: int = 0


QUICK = {
    "equi_seconds": 1.0,
    "equi_keys": 300,
    "equi_window_ms": 200,
    "hop_ms": 100,
    "band_seconds": 1.0,
    "band_window_ms": 300,
    "band_values": 200,
    "ts_granularity_ms": 50,
    "part_fraction": 0.0,
    "warmup_lines": 0,
    "repeats": 1,
    "flink_repeats": 1,
}


# ---------------------------------------------------------------------------------------------------------
# Workloads: specs and event files


def equi_spec(p: Params) -> dict[str, Any]:
    return {
        "window": {"kind": "time", "size_ms": p.equi_window_ms},
        "streams": {"R": {"fields": {"k": "int"}}, "S": {"fields": {"k": "int"}}},
        "tasks": [{"name": "equi", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
    }


def tumble_spec(p: Params) -> dict[str, Any]:
    return {**equi_spec(p), "window": {"kind": "tumbling", "size_ms": p.equi_window_ms}}


def hop_spec(p: Params) -> dict[str, Any]:
    return {**equi_spec(p), "window": {"kind": "hopping", "size_ms": p.equi_window_ms, "hop_ms": p.hop_ms}}


def asof_spec(p: Params) -> dict[str, Any]:
    spec = {**equi_spec(p), "window": {"kind": "time", "size_ms": 0}}  # an as-of task is not bounded by it
    spec["tasks"] = [{**spec["tasks"][0], "name": "asof", "type": "asof"}]
    return spec


def band_spec(p: Params) -> dict[str, Any]:
    return {
        "window": {"kind": "time", "size_ms": p.band_window_ms},
        "streams": {
            "R": {"fields": {"x": "int", "y": "float", "z": "string"}},
            "S": {"fields": {"a": "int", "b": "float", "c": "float", "d": "bool"}},
        },
        "tasks": [
            {
                "name": "band",
                "join": ["R", "S"],
                "on": [
                    {"op": "band", "left": "R.x", "right": "S.a", "width": p.band_width},
                    {"op": "band", "left": "R.y", "right": "S.b", "width": p.band_width},
                ],
            }
        ],
    }


def _coarse(ts: np.ndarray, granularity_ms: int) -> np.ndarray:
    return ts // granularity_ms * granularity_ms


def write_equi(p: Params, path: Path) -> int:
    """Paper 000's workload (b-model keys, Poisson arrivals) as JSON Lines in timestamp order; the event count."""
    spec = parse_spec(equi_spec(p))
    config = WorkloadConfig(
        rate=p.equi_rate, duration_s=p.equi_seconds, seed=p.seed, bias=p.equi_bias, n_keys=p.equi_keys
    )
    n = 0
    with path.open("wb") as out:
        for part in Workload(spec, config).slices():
            for stream, event in zip(part.streams, part.events, strict=True):
                event["ts"] = event["ts"] // p.ts_granularity_ms * p.ts_granularity_ms
                out.write(orjson.dumps({"stream": stream, **event}, option=orjson.OPT_APPEND_NEWLINE))
                n += 1
    return n


def band_stream(stream: str, p: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One stream of the SplitJoin workload with Poisson event times (ms)."""
    ts = _coarse(
        np.floor(poisson_arrivals(p.band_rate, p.band_seconds, rng) * 1000).astype(np.int64), p.ts_granularity_ms
    )
    n = ts.size
    if stream == "R":
        z = rng.integers(97, 123, size=(n, 20), dtype=np.uint8).view("S20").ravel().astype(str)
        return {"ts": ts, "x": rng.integers(1, p.band_values + 1, n), "y": rng.uniform(1, p.band_values, n), "z": z}
    return {
        "ts": ts,
        "a": rng.integers(1, p.band_values + 1, n),
        "b": rng.uniform(1, p.band_values, n),
        "c": rng.uniform(1, p.band_values, n),
        "d": rng.random(n) < 0.5,
    }


def write_band(p: Params, path: Path) -> int:
    """The SplitJoin band-join workload as JSON Lines in timestamp order; the event count."""
    rng = np.random.default_rng(p.seed)
    columns = {s: band_stream(s, p, rng) for s in "RS"}
    rows = {
        s: [dict(zip(cols, values, strict=True)) for values in zip(*(c.tolist() for c in cols.values()), strict=True)]
        for s, cols in columns.items()
    }
    streams = np.array(["R"] * len(rows["R"]) + ["S"] * len(rows["S"]))
    order = np.argsort(np.concatenate([columns["R"]["ts"], columns["S"]["ts"]]), kind="stable")
    merged = rows["R"] + rows["S"]
    with path.open("wb") as out:
        for i in order:
            out.write(orjson.dumps({"stream": str(streams[i]), **merged[i]}, option=orjson.OPT_APPEND_NEWLINE))
    return len(order)


def write_prefix(source: Path, target: Path, lines: int) -> int:
    """The first `lines` lines of `source` (a valid stream on its own: timestamps are in order)."""
    n = 0
    with source.open("rb") as src, target.open("wb") as out:
        for line in src:
            if n == lines:
                break
            out.write(line)
            n += 1
    return n


# ---------------------------------------------------------------------------------------------------------
# The exact reference count: vectorised, written apart from the operators


def _columns(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """The join columns of each stream (timestamp and the predicates' fields) read back from the file."""
    names = {"R": ("ts", "k", "x", "y"), "S": ("ts", "k", "a", "b")}
    rows: dict[str, list[tuple[Any, ...]]] = {"R": [], "S": []}
    with path.open("rb") as f:
        for line in f:
            event = orjson.loads(line)
            rows[event["stream"]].append(tuple(event.get(n) for n in names[event["stream"]]))
    return {
        s: {n: np.array([r[i] for r in rs]) for i, n in enumerate(names[s]) if rs and rs[0][i] is not None}
        for s, rs in rows.items()
    }


def reference_pairs(workload: str, spec: dict[str, Any], path: Path) -> int:
    """Pairs of R and S with |R.ts - S.ts| <= W and the workload's predicates, counted by sorting and search."""
    cols = _columns(path)
    r, s = cols["R"], cols["S"]
    if not r or not s:
        return 0
    if workload in ("tumble", "hop"):
        return windowed_pairs(r, s, spec["window"])
    if workload == "asof":
        versions = np.sort((s["k"].astype(np.int64) << 32) + s["ts"])
        at = np.searchsorted(versions, (r["k"].astype(np.int64) << 32) + r["ts"], side="right") - 1
        return int(((at >= 0) & (versions[np.maximum(at, 0)] >> 32 == r["k"])).sum())
    window = spec["window"]["size_ms"]
    if workload == "equi":
        composite = np.sort((s["k"].astype(np.int64) << 32) + s["ts"])
        base = r["k"].astype(np.int64) << 32
        lo = np.searchsorted(composite, base + np.maximum(r["ts"] - window, 0), side="left")
        hi = np.searchsorted(composite, base + r["ts"] + window, side="right")
        return int((hi - lo).sum())
    return band_pairs(r, s, spec["tasks"][0]["on"][0]["width"], window)


def windowed_pairs(r: dict[str, np.ndarray], s: dict[str, np.ndarray], window: dict[str, Any]) -> int:
    """Pairs of equal keys per window holding both: per (key, window start), R tuples times S tuples."""
    size = window["size_ms"]
    hop = window.get("hop_ms", size)

    def windows(side: dict[str, np.ndarray]) -> np.ndarray:
        last = side["ts"] // hop * hop
        starts = np.concatenate([last - j * hop for j in range(size // hop)])
        return np.unique(np.stack([np.tile(side["k"], size // hop), starts], axis=1), axis=0, return_counts=True)

    (r_keys, r_n), (s_keys, s_n) = windows(r), windows(s)
    both = {tuple(k): n for k, n in zip(s_keys.tolist(), s_n.tolist(), strict=True)}
    return int(sum(n * both.get(tuple(k), 0) for k, n in zip(r_keys.tolist(), r_n.tolist(), strict=True)))


# ---------------------------------------------------------------------------------------------------------
# windjoin


def run_join_file(spec: JoinSpec, path: Path, chunk: int, workers: int) -> dict[str, Any]:
    """`windjoin join-file` on `path` (results to /dev/null): pairs, seconds, CPU seconds (its workers' too: they
    are this process's children, reaped when it returns), the processes that joined; refusals fail."""
    refused: list[Any] = []
    notes: list[str] = []
    cpu, children, started = time.process_time(), _children_cpu_s(), time.perf_counter()
    with open(os.devnull, "wb") as sink:
        report = join_file(spec, path, sink, refused.append, chunk, False, workers, notes.append)
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu + _children_cpu_s() - children
    if refused:
        raise SystemExit(f"windjoin refused {len(refused)} events of {path} (first: {refused[0]}); expected none")
    joined_by = 1 if notes or workers == 1 else workers
    return {"pairs": report.results, "seconds": seconds, "cpu_s": cpu, "workers": joined_by, "notes": notes}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def decode_chunks(spec: JoinSpec, path: Path, chunk: int) -> list[dict[str, Arrivals]]:
    """`path`'s events decoded and checked into chunks as join-file builds them."""
    builder, chunks = ChunkBuilder(spec), []
    for _, _, event in read_events(path):
        builder.add(event["stream"], event, 0)
        if len(builder) >= chunk:
            chunks.append(builder.take())
    chunks.append(builder.take())
    return chunks


def run_kernel(spec: JoinSpec, chunks: list[dict[str, Arrivals]]) -> dict[str, float]:
    """The WindowJoin kernel alone on chunks decoded beforehand, to the end of the input."""
    join = join_operator(spec)
    pairs = 0
    cpu, started = time.process_time(), time.perf_counter()
    for c in chunks:
        result = join.process(c)
        pairs += sum(len(p) for p in result.pairs)
    pairs += sum(len(p) for p in join.finish_chunk().pairs)  # the end of the input: as-of tasks' last tuples
    return {"pairs": pairs, "seconds": time.perf_counter() - started, "cpu_s": time.process_time() - cpu}


def best_of(run: Any, repeats: int, *args: Any) -> dict[str, float]:
    return min((run(*args) for _ in range(max(1, repeats))), key=lambda r: r["seconds"])


def measure_windjoin(mode: str, spec: JoinSpec, w: dict[str, Any], p: Params) -> dict[str, Any]:
    """join-file or the kernel alone on the whole file and on the prefix (best of `repeats` each); steady rates."""

    def once(path: Path) -> dict[str, float]:
        if mode == "join_file":
            return best_of(run_join_file, p.repeats, spec, path, p.chunk, p.workers or default_workers())
        return best_of(run_kernel, p.repeats, spec, decode_chunks(spec, path, p.chunk))

    full = once(Path(w["events_file"]))
    part = once(Path(w["part_file"])) if "part_file" in w else None
    n, n_part = w["events"], w.get("part_events", 0)
    return {
        "full": full,
        "part": part,
        "tuples_per_s": steady(n, n_part, full["seconds"], part and part["seconds"]),
        "tuples_per_cpu_s": steady(n, n_part, full["cpu_s"], part and part["cpu_s"]),
    }


def windjoin_startup_s() -> float:
    """A fresh interpreter importing the join-file path: what `windjoin join-file` pays before reading."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import windjoin.pipelines.cli.join_file"], check=True)
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------------------
# Flink


def run_flink(jobs: list[dict[str, Any]], flink_python: Path, log: Path, timeout_s: float) -> dict[str, Any]:
    """benchmarks/flink_job.py on `jobs` in .venv-flink (one JVM); its JSON output, its wall time."""
    plan = log.with_suffix(".plan.json")
    plan.write_text(json.dumps({"jobs": jobs}))
    started = time.perf_counter()
    with log.open("wb") as err:
        proc = subprocess.run(
            [str(flink_python), str(FLINK_JOB), str(plan)], stdout=subprocess.PIPE, stderr=err, timeout=timeout_s
        )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise SystemExit(f"the Flink job failed (exit {proc.returncode}); end of its log {log}:\n{tail}")
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    out["process_wall_s"] = wall
    return out


# ---------------------------------------------------------------------------------------------------------
# The run


def steady(n_full: int, n_part: int, t_full: float, t_part: float | None) -> float | None:
    """Input tuples/s between the prefix and the whole file (or over the whole file without a prefix)."""
    if t_part is None:
        return n_full / t_full if t_full > 0 else None
    dt = t_full - t_part
    return (n_full - n_part) / dt if dt > 0 else None


def run(p: Params, data: Path, flink_python: Path) -> dict[str, Any]:
    parallelisms = [int(x) for x in p.parallelism.split(",") if x.strip()]
    workloads: dict[str, dict[str, Any]] = {}
    for name, make_spec, write in (("equi", equi_spec, write_equi), ("band", band_spec, write_band)):
        spec = make_spec(p)
        full = data / f"{name}.jsonl"
        started = time.perf_counter()
        n = write(p, full)
        w = {"spec": spec, "events_file": str(full), "events": n, "generate_s": time.perf_counter() - started}
        if p.part_fraction > 0:
            w["part_file"] = str(data / f"{name}-part.jsonl")
            w["part_events"] = write_prefix(full, Path(w["part_file"]), int(n * p.part_fraction))
        if p.warmup_lines > 0:
            w["warmup_file"] = str(data / f"{name}-warmup.jsonl")
            write_prefix(full, Path(w["warmup_file"]), p.warmup_lines)
        w["reference_pairs"] = reference_pairs(name, spec, full)
        workloads[name] = w
        print(f"{name}: {n:,} events, {w['reference_pairs']:,} pairs (reference count)", flush=True)
    for name, make_spec in (("tumble", tumble_spec), ("hop", hop_spec), ("asof", asof_spec)):
        spec = make_spec(p)
        w = {**{k: v for k, v in workloads["equi"].items() if k.endswith(("file", "events"))}, "spec": spec}
        w["reference_pairs"] = reference_pairs(name, spec, Path(w["events_file"]))
        workloads[name] = w
        print(f"{name}: the equi file, {w['reference_pairs']:,} pairs (reference count)", flush=True)

    # windjoin: join-file on every core (its default workers), the kernel alone on one
    startup = windjoin_startup_s()
    for name, w in workloads.items():
        spec = parse_spec(w["spec"])
        out: dict[str, Any] = {"startup_s": startup, "join_file": measure_windjoin("join_file", spec, w, p)}
        affinity = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(affinity)})
        try:
            out["kernel"] = measure_windjoin("kernel", spec, w, p)
        finally:
            os.sched_setaffinity(0, affinity)
        w["windjoin"] = out
        print(
            f"windjoin {name}: join-file {out['join_file']['tuples_per_s']:,.0f} tuples/s "
            f"({out['join_file']['full']['workers']} workers), kernel alone {out['kernel']['tuples_per_s']:,.0f}",
            flush=True,
        )

    # Flink, all cores, one JVM for every job
    jobs = []
    for name, w in workloads.items():
        spec = w["spec"]
        base = {
            "query": name,
            "window_ms": spec["window"]["size_ms"],
            "hop_ms": spec["window"].get("hop_ms"),
            "width": spec["tasks"][0]["on"][0].get("width"),
            "repeats": p.flink_repeats,
        }
        for par in parallelisms:
            warm = w.get("warmup_file")
            if "part_file" in w:
                jobs.append(
                    {
                        **base,
                        "name": f"{name}-p{par}-part",
                        "events": w["part_file"],
                        "warmup_events": warm,
                        "parallelism": par,
                    }
                )
                warm = None
            jobs.append(
                {
                    **base,
                    "name": f"{name}-p{par}",
                    "events": w["events_file"],
                    "warmup_events": warm,
                    "parallelism": par,
                }
            )
    flink = run_flink(jobs, flink_python, data / "flink.log", timeout_s=3600)
    by_name = {j["name"]: j for j in flink["jobs"]}
    for name, w in workloads.items():
        w["flink"] = {}
        for par in parallelisms:
            full, part = by_name[f"{name}-p{par}"], by_name.get(f"{name}-p{par}-part")
            rate = steady(w["events"], w.get("part_events", 0), full["net_s"], part and part["net_s"])
            w["flink"][f"p{par}"] = {
                "parallelism": par,
                "full": full,
                "part": part,
                "tuples_per_s": rate,
                "tuples_per_cpu_s": steady(w["events"], w.get("part_events", 0), full["cpu_s"], part and part["cpu_s"]),
                "job_start_stop_s": full["wall_s"] - full["net_s"],  # mini-cluster start, submission, tear-down
                "intercept_s": full["wall_s"] - w["events"] / rate if rate else None,  # all but steady work
            }
    return {
        "workloads": workloads,
        "flink_startup_s": flink["startup_s"],
        "flink_version": flink["flink_version"],
        "flink_process_wall_s": flink["process_wall_s"],
    }


def check_counts(workloads: dict[str, dict[str, Any]]) -> list[str]:
    """Every system's pairs, whole file and prefix, against the reference (whole) and each other (prefix)."""
    problems = []
    for name, w in workloads.items():
        counts = {"reference": w["reference_pairs"]}
        part_counts = {}
        for mode in ("join_file", "kernel"):
            counts[f"windjoin {mode}"] = w["windjoin"][mode]["full"]["pairs"]
            if w["windjoin"][mode]["part"]:
                part_counts[f"windjoin {mode}"] = w["windjoin"][mode]["part"]["pairs"]
        for key, f in w["flink"].items():
            counts[f"flink {key}"] = f["full"]["pairs"]
            if f["part"]:
                part_counts[f"flink {key}"] = f["part"]["pairs"]
        w["pairs"], w["part_pairs"] = counts, part_counts
        for label, c in (("whole file", counts), ("prefix", part_counts)):
            if len(set(c.values())) > 1:
                problems.append(f"{name}, {label}: pair counts differ: {c}")
    return problems


def ratios(workloads: dict[str, dict[str, Any]]) -> None:
    for w in workloads.values():
        wj = w["windjoin"]
        w["ratios"] = {}
        for key, f in w["flink"].items():
            w["ratios"][key] = {
                "join_file_over_flink_tuples_per_s": _div(wj["join_file"]["tuples_per_s"], f["tuples_per_s"]),
                "kernel_over_flink_tuples_per_s": _div(wj["kernel"]["tuples_per_s"], f["tuples_per_s"]),
                "join_file_over_flink_per_cpu_s": _div(wj["join_file"]["tuples_per_cpu_s"], f["tuples_per_cpu_s"]),
            }


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def print_table(result: dict[str, Any]) -> None:
    first = next(iter(result["workloads"].values()))
    print(
        f"\nFlink JVM start (interpreter, PyFlink, gateway JVM): {result['flink_startup_s']:.1f} s; "
        f"windjoin start (interpreter, imports): {first['windjoin']['startup_s']:.2f} s"
    )
    head = f"{'workload':<6} {'system':<24} {'tuples/s':>10} {'tuples/CPU-s':>13} {'job start s':>11} {'pairs':>10}"
    print(f"{head} {'windjoin/this':>14}")
    for name, w in result["workloads"].items():
        wj = w["windjoin"]
        rows = [
            (
                f"windjoin join-file w={wj['join_file']['full']['workers']}",
                wj["join_file"]["tuples_per_s"],
                wj["join_file"]["tuples_per_cpu_s"],
                None,
                wj["join_file"]["full"]["pairs"],
                None,
            ),
            (
                "windjoin kernel alone",
                wj["kernel"]["tuples_per_s"],
                wj["kernel"]["tuples_per_cpu_s"],
                None,
                wj["kernel"]["full"]["pairs"],
                None,
            ),
        ]
        for key, f in w["flink"].items():
            rows.append(
                (
                    f"Flink parallelism {f['parallelism']}",
                    f["tuples_per_s"],
                    f["tuples_per_cpu_s"],
                    f["job_start_stop_s"],
                    f["full"]["pairs"],
                    w["ratios"][key]["join_file_over_flink_tuples_per_s"],
                )
            )
        for label, rate, cpu_rate, fixed, pairs, ratio in rows:
            print(
                f"{name:<6} {label:<24} {_fmt(rate):>10} {_fmt(cpu_rate):>13} {_fmt(fixed, '.1f'):>11} {pairs:>10,} "
                f"{_fmt(ratio, '.1f') + ('x' if ratio else ''):>14}"
            )


def window_label(spec: dict[str, Any]) -> str:
    """How a workload's tuples pair, for the plot."""
    window = spec["window"]
    if spec["tasks"][0].get("type") == "asof":
        return "as of (latest version)"
    if window["kind"] == "time":
        return f"|Δts| ≤ {window['size_ms'] / 1000:g} s"
    hop = f" every {window['hop_ms'] / 1000:g} s" if "hop_ms" in window else ""
    return f"{window['kind']} {window['size_ms'] / 1000:g} s{hop}"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    names = list(result["workloads"])
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4.2))
    for ax, name in zip(np.atleast_1d(axes), names, strict=True):
        w = result["workloads"][name]
        labels = [f"windjoin\njoin-file w={w['windjoin']['join_file']['full']['workers']}", "windjoin\nkernel"] + [
            f"Flink\np={f['parallelism']}" for f in w["flink"].values()
        ]
        rates = [w["windjoin"]["join_file"]["tuples_per_s"], w["windjoin"]["kernel"]["tuples_per_s"]]
        rates += [f["tuples_per_s"] for f in w["flink"].values()]
        colors = ["tab:blue", "tab:cyan"] + ["tab:orange"] * len(w["flink"])
        bars = ax.bar(labels, [r or 0 for r in rates], color=colors)
        ax.set_yscale("log")
        positive = [r for r in rates if r]
        ax.set_ylim(10 ** np.floor(np.log10(min(positive))) if positive else 1, 3 * max(positive, default=10))
        for i, (bar, rate) in enumerate(zip(bars, rates, strict=True)):
            if rate:
                text = f"{rate:,.0f}"
                if i >= 2 and rates[0]:
                    text += f"\n(join-file {rates[0] / rate:.1f}×)"
                ax.annotate(text, (bar.get_x() + bar.get_width() / 2, rate), ha="center", va="bottom", fontsize=8)
        title = f"{name}: {w['events']:,} events, {window_label(w['spec'])}, {w['reference_pairs']:,} pairs"
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("steady input tuples/s (log)")
    m = result["machine"]
    fig.suptitle(
        f"windjoin vs Flink {result['flink_version']} joins, same files — {m['cores']} cores, "
        f"{m['cpu_model']}, load {result['load_before'][0]:.1f}→{result['load_after'][0]:.1f}, {m['date']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_param_flags(parser, Params())
    parser.add_argument("--quick", action="store_true", help="tiny files, no prefix or warm-up (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--flink-python", type=Path, default=FLINK_PYTHON, help="python of PyFlink's venv")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the event files here (default: a temp dir)")
    args = parser.parse_args()
    params = params_from(args, Params(), QUICK)
    if not args.flink_python.exists() and args.flink_python == FLINK_PYTHON:
        print("no .venv-flink yet: running scripts/setup_flink.sh (PyFlink from PyPI, about 30 s)", flush=True)
        subprocess.run(["bash", str(ROOT / "scripts" / "setup_flink.sh")], check=True)
    if not args.flink_python.exists():
        raise SystemExit(f"no PyFlink at {args.flink_python}: run scripts/setup_flink.sh (or pass --flink-python)")
    data = args.data_dir or Path(tempfile.mkdtemp(prefix="windjoin-flink-"))
    data.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    started = time.perf_counter()
    try:
        measured = run(params, data, args.flink_python)
    finally:
        if args.data_dir is None:
            shutil.rmtree(data, ignore_errors=True)
    result = {
        "benchmark": "flink",
        "machine": machine_facts(),
        "params": asdict(params),
        "quick": args.quick,
        **measured,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "seconds": time.perf_counter() - started,
    }
    problems = check_counts(result["workloads"])
    if problems:
        print("\n".join(["RESULT COUNTS DIFFER:", *problems]), file=sys.stderr)
        raise SystemExit(1)
    ratios(result["workloads"])
    print_table(result)
    print(f"load {result['uptime']}\n{write_results(result, args.out, plot)}")


if __name__ == "__main__":
    main()
