"""Query-storm benchmark: how much a storm of one-time queries through the proxy slows the Redis sink's writes.

Setup: an embedded redis-server holding 200k result members of one task (half of them on one result time, the
case that used to make one read walk everything), and `windjoin proxy` over it in its own process (a token,
limits lifted). A writer in this process commits a batch of `--batch-rows` results every `--interval-ms` with
the real RedisSink and times each write (ZADD + feed + commit mark in one transaction). Two phases of
`--seconds` each: the writer alone (baseline), then the writer while `--clients` concurrent clients in a child
process send one-time queries as fast as they are answered: limit=1 over the tied result time, a `where` that
matches nothing over the whole span, a 10000-row page over the whole span, and random 1 s spans. The ratio of the
storm's write latencies (p50, p99) to the baseline's is the figure; Redis' SLOWLOG (threshold 50 ms) is read at
the end. Run twice: unpinned (Redis, the proxy, the clients and the writer share every core, so part of the
slow-down is plain CPU contention: the proxy decoding members takes CPU from the writer), and pinned (Redis and
the writer on the first core, the proxy and the clients on the others, as when the proxy runs on its own node):
then what slows the writes is Redis' time spent on the queries' steps. A third phase, the control, takes the
same CPU the storm's proxy and clients took (busy-loop processes, measured from /proc) without touching Redis:
storm/control is the part of the slow-down that comes from the queries' use of Redis.

    python -m benchmarks.query_storm [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from benchmarks.machine import machine_facts

RESULTS = Path(__file__).parent / "results" / "query_storm.json"
TASK = "a"
TIE = 50_000
SPAN = 100_000
TOKEN = "windjoin-bench-query-storm"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLOW_US = 50_000


def spec_dict(redis_url: str) -> dict[str, Any]:
    return {
        "window": {"kind": "time", "size_ms": 1000},
        "streams": {
            "R": {"timestamp": "ts", "fields": {"k": "int", "x": "float", "z": "string"}},
            "S": {"timestamp": "t", "fields": {"k": "int", "d": "bool"}},
        },
        "tasks": [{"name": TASK, "join": ["R", "S"]}],
        "sinks": {"redis": {"url": redis_url, "retain_ms": 10**12}},
    }


def batch(spec: Any, batch_id: int, rows: int, rng: np.random.Generator, tied: bool) -> Any:
    from windjoin.operators.result_table import table_from_columns

    ts = np.full(rows, TIE) if tied else rng.integers(0, SPAN, rows)
    k = rng.integers(0, 100, rows)
    sides = {
        "R": {"ts": ts, "k": k, "x": rng.random(rows), "z": np.full(rows, "zz")},
        "S": {"t": ts - 5, "k": k, "d": np.ones(rows, dtype=bool)},
    }
    return table_from_columns(spec, TASK, sides, batch_id, int(time.time() * 1000))


def cpu_s(pid: int) -> float:
    """CPU seconds a process has used (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


BURN = (
    "import time\nwhile True:\n    t = time.perf_counter()\n"
    "    while time.perf_counter() - t < {on}: pass\n    time.sleep({off})"
)


def burn(cores: float, on_cores: list[int] | None) -> list[subprocess.Popen]:
    """Processes taking `cores` of CPU without touching Redis (each busy a share of every 10 ms)."""
    n = max(1, int(np.ceil(cores)))
    duty = min(1.0, cores / n)
    code = BURN.format(on=0.01 * duty, off=0.01 * (1 - duty))
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    if on_cores is not None:
        for proc in procs:
            os.sched_setaffinity(proc.pid, on_cores)
    return procs


def quantiles(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values) * 1000
    return {"n": len(values), "p50_ms": float(np.percentile(arr, 50)), "p99_ms": float(np.percentile(arr, 99))}


def redis_cpu_s(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def write_phase(sink: Any, spec: Any, first_batch: int, seconds: float, interval_s: float, rows: int) -> dict:
    """Commit a batch every `interval_s` for `seconds`; the write latencies, the load around the phase and the
    share of one core Redis used meanwhile."""
    rng = np.random.default_rng(first_batch)
    load_before = os.getloadavg()[0]
    cpu_before, began = redis_cpu_s(sink.client), time.monotonic()
    latencies = []
    batch_id = first_batch
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        tick = time.monotonic()
        table = batch(spec, batch_id, rows, rng, tied=False)
        started = time.perf_counter()
        sink.write(batch_id, {TASK: table})
        latencies.append(time.perf_counter() - started)
        batch_id += 1
        time.sleep(max(0.0, interval_s - (time.monotonic() - tick)))
    return {
        **quantiles(latencies),
        "batches": batch_id - first_batch,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "redis_cpu_share": (redis_cpu_s(sink.client) - cpu_before) / (time.monotonic() - began),
    }


async def storm(base: str, clients: int, seconds: float) -> dict[str, Any]:
    """Clients sending one-time queries back to back for `seconds`: answers and latency by kind."""
    kinds = {
        "limit1_ties": {"from": TIE, "to": TIE, "limit": 1},
        "where_nothing": {"from": 0, "to": SPAN, "where": "R.k=-1", "limit": 10},
        "page_10000": {"from": 0, "to": SPAN, "limit": 10_000},
        "span_1s": None,
    }
    names = list(kinds)
    latencies: dict[str, list[float]] = {name: [] for name in names}
    statuses: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    rng = np.random.default_rng(9)

    async def client(i: int, http: httpx.AsyncClient) -> None:
        n = i
        while time.monotonic() < deadline:
            name = names[n % len(names)]
            n += 1
            params = kinds[name]
            if params is None:
                start = int(rng.integers(0, SPAN - 1000))
                params = {"from": start, "to": start + 1000, "limit": 1000}
            started = time.perf_counter()
            response = await http.get(f"/v1/tasks/{TASK}/results", params=params)
            latencies[name].append(time.perf_counter() - started)
            statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1

    async with httpx.AsyncClient(base_url=base, timeout=300, headers=AUTH) as http:
        await asyncio.gather(*(client(i, http) for i in range(clients)))
    return {"statuses": statuses, "latency": {k: quantiles(v) for k, v in latencies.items() if v}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 s phases, 50k members")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--members", type=int, default=200_000)
    parser.add_argument("--batch-rows", type=int, default=2000)
    parser.add_argument("--interval-ms", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--storm-child", help=argparse.SUPPRESS)  # internal: run the storm against this base URL
    args = parser.parse_args()
    if args.storm_child:
        print(json.dumps(asyncio.run(storm(args.storm_child, args.clients, args.seconds))))
        return
    if args.quick:
        args.seconds, args.members = 5.0, 50_000
    result: dict[str, Any] = {"benchmark": "query_storm", "machine": machine_facts(), "runs": {}}
    result["params"] = {k: v for k, v in vars(args).items() if k not in ("out", "storm_child")}
    cores = sorted(os.sched_getaffinity(0))
    for pinned in (False, True) if len(cores) > 1 else (False,):
        label = "pinned" if pinned else "unpinned"
        print(f"== {label}", flush=True)
        result["runs"][label] = run(args, (cores[:1], cores[1:]) if pinned else None)
    print(f"{'run':<10}{'phase':<10}{'writes':>8}{'p50 ms':>10}{'p99 ms':>10}{'load':>12}{'redis cpu':>11}")
    for label, r in result["runs"].items():
        for phase in ("baseline", "storm", "control"):
            p = r[phase]
            load = f"{p['load_before']:.1f}-{p['load_after']:.1f}"
            cpu = f"{p['redis_cpu_share']:.0%}"
            print(f"{label:<10}{phase:<10}{p['n']:>8}{p['p50_ms']:>10.2f}{p['p99_ms']:>10.2f}{load:>12}{cpu:>11}")
        ratio = r["ratio"]
        slow = len(r["slowlog_over_50ms"])
        print(f"{label}: storm/baseline p50 x{ratio['p50']:.2f}, p99 x{ratio['p99']:.2f}; SLOWLOG over 50 ms: {slow}")
        control = r["ratio_to_control"]
        print(f"{label}: storm/control (the same CPU, no Redis) p50 x{control['p50']:.2f}, p99 x{control['p99']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {args.out}")


def run(args: argparse.Namespace, pinning: tuple[list[int], list[int]] | None) -> dict[str, Any]:
    """One baseline + storm run; `pinning`: (cores of Redis and the writer, cores of the proxy and the clients)."""
    from windjoin.connectors.local import processes, services
    from windjoin.connectors.local.processes import free_port
    from windjoin.connectors.redis.client import redis_client
    from windjoin.connectors.redis.sink import RedisSink
    from windjoin.operators.spec import parse_spec
    from windjoin.pipelines.proxy.tokens import token_hash

    workdir = Path(tempfile.mkdtemp(prefix="windjoin-bench-query-storm-"))
    state = workdir / "services"
    pid = child = None
    result: dict[str, Any] = {}
    everywhere = os.sched_getaffinity(0)
    try:
        [started] = services.up(services.ServicesConfig(state_dir=state, kafka=False))
        # clients, and the processes started, log in with the embedded Redis' password file
        os.environ["WINDJOIN_REDIS_PASSWORD_FILE"] = str(services.redis_password_file(state))
        url = started.service.url
        if pinning is not None:
            os.sched_setaffinity(started.service.pid, pinning[0])
            os.sched_setaffinity(0, pinning[0])
        spec = parse_spec(spec_dict(url))
        sink = RedisSink(url, 10**12, trim=False, feed_batches=100)
        rng = np.random.default_rng(1)
        per_batch = 10_000
        preload = args.members // per_batch
        for b in range(preload):
            sink.write(b, {TASK: batch(spec, b, per_batch, rng, tied=b < preload // 2)})
        spec_file, tokens = workdir / "spec.yaml", workdir / "tokens.yaml"
        spec_file.write_text(yaml.safe_dump(spec_dict(url)))
        tokens.write_text(yaml.safe_dump({"tokens": [{"name": "bench", "sha256": token_hash(TOKEN), "tasks": "*"}]}))
        port = free_port()
        argv = [sys.executable, "-m", "windjoin.pipelines", "proxy", str(spec_file), "--port", str(port)]
        argv += ["--tokens-file", str(tokens), "--rate-limit", "1000000", "--rate-burst", "1000000"]
        pid = processes.spawn(argv, workdir / "proxy.log")
        if pinning is not None:
            os.sched_setaffinity(pid, pinning[1])
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while not processes.port_open("127.0.0.1", port):
            if not processes.is_alive(pid) or time.monotonic() > deadline:
                raise RuntimeError(processes.log_tail(workdir / "proxy.log"))
            time.sleep(0.1)
        client = redis_client(url)
        client.config_set("slowlog-log-slower-than", SLOW_US)
        client.slowlog_reset()
        interval = args.interval_ms / 1000
        print("baseline: writes alone ...", flush=True)
        result["baseline"] = write_phase(sink, spec, preload, args.seconds, interval, args.batch_rows)
        print(json.dumps(result["baseline"]), flush=True)
        print(f"storm: writes while {args.clients} clients query ...", flush=True)
        storm_argv = [sys.executable, "-m", "benchmarks.query_storm", "--storm-child", base]
        storm_argv += ["--clients", str(args.clients), "--seconds", str(args.seconds + 1)]
        child = subprocess.Popen(storm_argv, stdout=subprocess.PIPE, text=True)
        if pinning is not None:
            os.sched_setaffinity(child.pid, pinning[1])
        time.sleep(1.0)  # the storm is on before the writes are timed
        first = preload + result["baseline"]["batches"]
        cpu_before, began = cpu_s(pid) + cpu_s(child.pid), time.monotonic()
        result["storm"] = write_phase(sink, spec, first, args.seconds, interval, args.batch_rows)
        storm_cores = (cpu_s(pid) + cpu_s(child.pid) - cpu_before) / (time.monotonic() - began)
        out, _ = child.communicate(timeout=600)
        result["queries"] = json.loads(out.strip().splitlines()[-1])
        result["storm"]["proxy_and_clients_cores"] = storm_cores
        print(f"control: writes while burners take the {storm_cores:.2f} cores the storm took ...", flush=True)
        burners = burn(storm_cores, pinning[1] if pinning is not None else None)
        try:
            first += result["storm"]["batches"]
            result["control"] = write_phase(sink, spec, first, args.seconds, interval, args.batch_rows)
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()
        slow = client.slowlog_get(128)
        result["slowlog_over_50ms"] = [
            {"us": e["duration"], "command": e["command"][:60].decode(errors="replace")} for e in slow
        ]
        result["ratio"] = {
            "p50": result["storm"]["p50_ms"] / result["baseline"]["p50_ms"],
            "p99": result["storm"]["p99_ms"] / result["baseline"]["p99_ms"],
        }
        result["ratio_to_control"] = {  # the storm against the same CPU taken without touching Redis
            "p50": result["storm"]["p50_ms"] / result["control"]["p50_ms"],
            "p99": result["storm"]["p99_ms"] / result["control"]["p99_ms"],
        }
        print(json.dumps(result["storm"]), flush=True)
        print(json.dumps(result["queries"]), flush=True)
    finally:
        os.sched_setaffinity(0, everywhere)
        if child is not None and child.poll() is None:  # the storm's clients, if a phase failed under them
            child.kill()
            child.wait()
        if pid is not None:
            processes.stop(pid)
        services.down(state)
    return result


if __name__ == "__main__":
    main()
