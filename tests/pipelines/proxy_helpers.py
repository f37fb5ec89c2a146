"""What the query proxy tests share: a spec with Redis and Parquet sinks, a results writer that keeps the oracle
(every result row written, in the one shape the proxy serves), and a uvicorn server on a free port in a thread."""

from __future__ import annotations

import random
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
import yaml
from fastapi.testclient import TestClient

from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.local import processes
from windjoin.connectors.local.processes import free_port
from windjoin.connectors.redis.client import redis_client
from windjoin.connectors.redis.retention import advance_snapshot
from windjoin.connectors.redis.sink import RedisSink
from windjoin.connectors.results.result_query import ResultStore
from windjoin.operators.query.cursors import CursorCodec
from windjoin.operators.result_table import table_from_records
from windjoin.operators.spec import JoinSpec, parse_spec
from windjoin.pipelines.proxy.config import Access, Limits
from windjoin.pipelines.proxy.tokens import TokenTable, token_hash

TASKS = ("a", "b")
TOKEN = "wj-test-token-all-tasks"  # may read every task
B_TOKEN = "wj-test-token-task-b"  # may read task b only
AUTH = {"Authorization": f"Bearer {TOKEN}"}
B_AUTH = {"Authorization": f"Bearer {B_TOKEN}"}
TOKENS_FILE = {
    "tokens": [
        {"name": "tester", "sha256": token_hash(TOKEN), "tasks": "*"},
        {"name": "b-reader", "sha256": token_hash(B_TOKEN), "tasks": ["b"]},
    ]
}
GENEROUS = Limits(rate=10_000, burst=10_000, streams=1000)  # tests that are not about limits never meet them


def access(limits: Limits = GENEROUS, **kw: Any) -> Access:
    """The tests' access configuration: the two tokens above, generous limits unless told otherwise."""
    return Access(TokenTable.from_data(TOKENS_FILE, TASKS), limits, **kw)


def make_spec(redis_url: str | None, parquet_path: Path | None) -> JoinSpec:
    sinks: dict[str, Any] = {}
    if redis_url is not None:
        sinks["redis"] = {"url": redis_url, "retain_ms": 1000}
    if parquet_path is not None:
        sinks["parquet"] = {"path": str(parquet_path)}
    return parse_spec(
        {
            "window": {"kind": "time", "size_ms": 1000},
            "streams": {
                "R": {"timestamp": "ts", "fields": {"k": "int", "x": "float", "z": "string"}},
                "S": {"timestamp": "t", "fields": {"k": "int", "d": "bool"}},
            },
            "tasks": [{"name": "a", "join": ["R", "S"]}, {"name": "b", "join": ["S", "R"]}],
            "sinks": sinks,
        }
    )


@dataclass
class Batch:
    batch_id: int
    tables: dict[str, Any]
    rows: dict[str, list[dict[str, Any]]]


@dataclass
class Results:
    """Writes random result batches to real sinks (Redis with its feed, Parquet) and remembers every row."""

    spec: JoinSpec
    namespace: str
    redis_url: str | None
    parquet_path: Path | None
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {t: [] for t in TASKS})
    next_batch: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    cursors: CursorCodec = field(default_factory=CursorCodec.random)  # every store's: like replicas sharing a key

    def __post_init__(self) -> None:
        self.sinks: list[Any] = []
        if self.redis_url:
            self.redis = redis_client(self.redis_url)
            self.sinks.append(RedisSink(self.redis_url, 10**12, self.namespace, trim=False, feed_batches=10_000))
        if self.parquet_path:
            self.sinks.append(ParquetSink(self.parquet_path))

    def store(self) -> ResultStore:
        return ResultStore(
            self.spec,
            self.redis_url,
            self.namespace,
            str(self.parquet_path) if self.parquet_path else None,
            cursors=self.cursors,
        )

    def store_without_parquet(self) -> ResultStore:
        return ResultStore(self.spec, self.redis_url, self.namespace, None, cursors=self.cursors)

    def pair(self, t0: int, z_size: int) -> dict[str, Any]:
        rng = self.rng
        z = rng.choice("pqr") * z_size
        r = {"ts": t0 + rng.randrange(0, 50), "k": rng.randrange(0, 5), "x": rng.random(), "z": z}
        s = {"t": t0 + rng.randrange(0, 50), "k": rng.randrange(0, 5), "d": rng.random() < 0.5}
        return {"R": r, "S": s}

    def prepare(self, n_rows: int, t0: int, z_size: int = 1, emitted_at: int | None = None) -> Batch:
        """The next batch: `n_rows` random pairs per task, result times in [t0, t0 + 50); not written yet."""
        batch_id = self.next_batch
        self.next_batch += 1
        emitted_at = emitted_at if emitted_at is not None else int(time.time() * 1000)
        batch = Batch(batch_id, {}, {})
        for task in TASKS:
            pairs = [self.pair(t0, z_size) for _ in range(n_rows)]
            first, second = ("R", "S") if task == "a" else ("S", "R")
            batch.tables[task] = table_from_records(
                self.spec, task, [{first: p[first], second: p[second]} for p in pairs], batch_id, emitted_at
            )
            batch.rows[task] = [
                {
                    first: p[first],
                    second: p[second],
                    "batch_id": batch_id,
                    "row": i,
                    "emitted_at": emitted_at,
                    "result_time": max(p["R"]["ts"], p["S"]["t"]),
                }
                for i, p in enumerate(pairs)
            ]
        return batch

    def commit(self, batch: Batch) -> None:
        """Write a prepared batch to every sink (Redis: sorted set and feed; Parquet: batch folder)."""
        for sink in self.sinks:
            sink.write(batch.batch_id, batch.tables)
        for task, rows in batch.rows.items():
            self.rows[task] += rows

    def write(self, n_rows: int, t0: int, z_size: int = 1) -> int:
        batch = self.prepare(n_rows, t0, z_size)
        self.commit(batch)
        return batch.batch_id

    def snapshot(self, task: str, cutoff_ms: int | None) -> int:
        """Commit a Parquet snapshot of everything written so far and move Redis' boundary to it (dropping rows
        older than `cutoff_ms` that the snapshot covers); returns the snapshot id."""
        snap = SnapshotStore(self.parquet_path).commit(task, self.next_batch - 1, "periodic", int(time.time() * 1000))
        assert snap is not None
        advance_snapshot(self.redis, task, self.namespace, snap.id, snap.last_batch, cutoff_ms)
        return snap.id

    def oracle(self, task: str, t_from: int, t_to: int) -> list[dict[str, Any]]:
        """One-time query answer: rows in [t_from, t_to] ordered by (result_time, batch_id, row)."""
        found = [r for r in self.rows[task] if t_from <= r["result_time"] <= t_to]
        return sorted(found, key=lambda r: (r["result_time"], r["batch_id"], r["row"]))

    def since(self, task: str, batch_id: int) -> list[dict[str, Any]]:
        """Continuous query answer: rows of batches >= batch_id in commit order."""
        return [r for r in self.rows[task] if r["batch_id"] >= batch_id]


def new_namespace() -> str:
    return f"wjtest_{uuid.uuid4().hex[:10]}"


class Server:
    """uvicorn serving `app` on a free port of 127.0.0.1 in a thread of this process; stop() ends it. With
    `tls` (certificate file, key file): over HTTPS."""

    def __init__(self, app: Any, tls: tuple[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            ssl_certfile=tls[0] if tls else None,
            ssl_keyfile=tls[1] if tls else None,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="proxy-under-test", daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


class ProxyProcess:
    """`windjoin proxy` over `spec` in its own process on a free port (the tests' tokens file, or none with
    `auth=False`; `args`: more options), for what a thread of the test process cannot show: its memory, its
    answers under load, its HTTP server's settings."""

    def __init__(self, spec: JoinSpec, folder: Path, args: Sequence[str] = (), auth: bool = True) -> None:
        spec_file, tokens = folder / "proxy-spec.yaml", folder / "proxy-tokens.yaml"
        spec_file.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
        tokens.write_text(yaml.safe_dump(TOKENS_FILE))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "proxy.log"
        self.argv = [sys.executable, "-m", "windjoin.pipelines", "proxy", str(spec_file), "--port", str(self.port)]
        self.argv += ["--tokens-file", str(tokens)] if auth else ["--insecure-no-auth"]
        self.argv += args
        self.pid = 0

    def __enter__(self) -> ProxyProcess:
        self.pid = processes.spawn(self.argv, self.log)
        deadline = time.monotonic() + 60
        while not processes.port_open("127.0.0.1", self.port):
            if not processes.is_alive(self.pid) or time.monotonic() > deadline:
                processes.stop(self.pid)
                raise RuntimeError(f"the proxy did not start: {processes.log_tail(self.log)}")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        processes.stop(self.pid)

    def status(self, field: str) -> int:
        """A /proc/PID/status size in bytes (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no {field} in /proc/{self.pid}/status")

    def reset_peak(self) -> None:
        """VmHWM := VmRSS, so the next VmHWM is the peak from now."""
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")


def fetch_all(client: TestClient, task: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every page of a one-time query, following next_cursor."""
    rows: list[dict[str, Any]] = []
    params = dict(params)
    for _ in range(10_000):
        response = client.get(f"/v1/tasks/{task}/results", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["rows"]) <= params.get("limit", 1000)
        rows += page["rows"]
        if page["next_cursor"] is None:
            return rows
        params["cursor"] = page["next_cursor"]
    raise AssertionError("paging did not end")
