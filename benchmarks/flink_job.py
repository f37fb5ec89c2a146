"""The Flink side of benchmarks/flink_peer.py: Flink SQL joins over JSON Lines event files, pairs counted: interval
joins (equi, band), window joins over TUMBLE and HOP (tumble, hop) and the event-time temporal join (asof).

Runs in PyFlink's own virtualenv (.venv-flink, scripts/setup_flink.sh), not in windjoin's: it imports only
PyFlink and the standard library. One process, one JVM (the local mini-cluster starts inside PyFlink's
gateway JVM, one mini-cluster per job); the jobs of a plan run one after another, each optionally after a
warm-up job on a small file (same query) that loads classes and warms the JIT.

    .venv-flink/bin/python benchmarks/flink_job.py PLAN.json   # prints one JSON line of results

PLAN: {"jobs": [{"name", "query": "equi"|"band"|"tumble"|"hop"|"asof", "events", "warmup_events" (or null),
"window_ms", "hop_ms" (hop), "width", "parallelism", "repeats"}]}; a job repeated keeps its run of least net
runtime. Each events file holds both streams, one event a line with a "stream" field ("R" or "S"): Flink reads it as
one table (the source is scanned once and reused) and filters it into R and S.

Semantics as windjoin's spec: a pair when |R.ts - S.ts| <= window_ms (BETWEEN is inclusive at both ends) and R.k =
S.k (equi) or |R.x - S.a| <= width AND |R.y - S.b| <= width (band, written with ABS like windjoin's `band` op, so
float rounding is the same). tumble and hop: Flink's window join (window TVFs, equal window_start and window_end,
R.k = S.k), a pair once per window holding both. asof: each R row with the S row of greatest event time at or before
its own among equal keys, through a versioned view (the newest S row per key, deduplicated on event time) and `FOR
SYSTEM_TIME AS OF R.rt` (an inner temporal join: R rows without a version are not counted). Event time is
TO_TIMESTAMP_LTZ(ts, 3) with the watermark at the largest timestamp seen (events are in timestamp order: none is
late). Pairs are counted by a two-phase COUNT(*) with mini-batches (a result row per mini-batch, not per pair); the
last row is the total.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()

COLUMNS = {
    "equi": "k BIGINT",
    "tumble": "k BIGINT",
    "hop": "k BIGINT",
    "asof": "k BIGINT",
    "band": "x BIGINT, y DOUBLE, z STRING, a BIGINT, b DOUBLE, c DOUBLE, d BOOLEAN",
}
SIDES = {
    "equi": ("k", "k"),
    "tumble": ("k", "k"),
    "hop": ("k", "k"),
    "asof": ("k", "k"),
    "band": ("x, y, z", "a, b, c, d"),
}


def predicate(query: str, width: float | None) -> str:
    if query == "equi":
        return "R.k = S.k"
    return f"ABS(R.x - S.a) <= {width} AND ABS(R.y - S.b) <= {width}"


def interval(window_ms: int) -> str:
    return f"INTERVAL '{window_ms / 1000:.3f}' SECOND"


def windowed(table: str, query: str, window_ms: int, hop_ms: int | None) -> str:
    if query == "tumble":
        return f"TABLE(TUMBLE(TABLE {table}, DESCRIPTOR(rt), {interval(window_ms)}))"
    return f"TABLE(HOP(TABLE {table}, DESCRIPTOR(rt), {interval(hop_ms)}, {interval(window_ms)}))"


def count_sql(query: str, window_ms: int, width: float | None, hop_ms: int | None = None) -> str:
    if query in ("tumble", "hop"):
        left, right = windowed("R", query, window_ms, hop_ms), windowed("S", query, window_ms, hop_ms)
        return (
            f"SELECT COUNT(*) FROM (SELECT * FROM {left}) L JOIN (SELECT * FROM {right}) Q ON L.k = Q.k "
            "AND L.window_start = Q.window_start AND L.window_end = Q.window_end"
        )
    if query == "asof":
        return "SELECT COUNT(*) FROM R JOIN V FOR SYSTEM_TIME AS OF R.rt ON R.k = V.k"
    bound = interval(window_ms)
    return (
        f"SELECT COUNT(*) FROM R, S WHERE {predicate(query, width)} AND R.rt BETWEEN S.rt - {bound} AND S.rt + {bound}"
    )


def jvm_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its children (the gateway JVM), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        if pid == me or ppid == me:
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def run_count(
    events: str, query: str, window_ms: int, width: float | None, parallelism: int, hop_ms: int | None = None
) -> dict[str, object]:
    """One Flink job over `events`: the pairs it counted, wall time, net runtime, CPU seconds, SQL and plan."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", str(parallelism))
    config.set("table.exec.mini-batch.enabled", "true")
    config.set("table.exec.mini-batch.allow-latency", "1 s")
    config.set("table.exec.mini-batch.size", "100000")
    path = Path(events).resolve().as_posix()
    env.execute_sql(
        f"CREATE TABLE events (`stream` STRING, ts BIGINT, {COLUMNS[query]}, rt AS TO_TIMESTAMP_LTZ(ts, 3), "
        f"WATERMARK FOR rt AS rt) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json')"
    )
    r_cols, s_cols = SIDES[query]
    env.execute_sql(f"CREATE TEMPORARY VIEW R AS SELECT {r_cols}, rt FROM events WHERE `stream` = 'R'")
    env.execute_sql(f"CREATE TEMPORARY VIEW S AS SELECT {s_cols}, rt FROM events WHERE `stream` = 'S'")
    if query == "asof":  # a versioned view: the newest S row per key, by event time
        env.execute_sql(
            "CREATE TEMPORARY VIEW V AS SELECT k, rt FROM (SELECT k, rt, ROW_NUMBER() OVER (PARTITION BY k "
            "ORDER BY rt DESC) AS rn FROM S) WHERE rn = 1"
        )
    sql = count_sql(query, window_ms, width, hop_ms)
    explained = env.explain_sql(sql).split("== Optimized Execution Plan ==")[-1]
    plan = [line.strip() for line in explained.splitlines() if "Join" in line or "Exchange" in line]
    cpu_before = jvm_cpu_seconds()
    started = time.perf_counter()
    result = env.execute_sql(sql)
    last = None
    with result.collect() as rows:
        for row in rows:
            last = row
    wall = time.perf_counter() - started
    cpu = jvm_cpu_seconds() - cpu_before
    net_ms = result.get_job_client().get_job_execution_result().result().get_net_runtime()
    pairs = int(last[0]) if last is not None else 0
    return {"pairs": pairs, "wall_s": wall, "net_s": net_ms / 1000, "cpu_s": cpu, "sql": sql, "plan": plan}


def runs_net(runs: list[dict[str, object]]) -> str:
    return ", ".join(f"{r['net_s']:.2f} s" for r in runs)


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    out: dict[str, object] = {"jobs": []}
    from pyflink.table import EnvironmentSettings, TableEnvironment

    TableEnvironment.create(EnvironmentSettings.in_streaming_mode())  # starts the gateway JVM
    out["startup_s"] = time.perf_counter() - STARTED  # interpreter, PyFlink imports, JVM start
    for job in plan["jobs"]:
        args = (job["query"], job["window_ms"], job.get("width"), job["parallelism"], job.get("hop_ms"))
        warmup = run_count(job["warmup_events"], *args) if job.get("warmup_events") else None
        runs = [run_count(job["events"], *args) for _ in range(max(1, job.get("repeats", 1)))]
        measured = min(runs, key=lambda r: r["net_s"])
        out["jobs"].append({"name": job["name"], **measured, "net_s_all": [r["net_s"] for r in runs], "warmup": warmup})
        print(f"flink {job['name']}: {measured['pairs']} pairs, net {runs_net(runs)}", file=sys.stderr, flush=True)
    from pyflink.version import __version__

    out["flink_version"] = __version__
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
