"""A local Spark standalone cluster on loopback: one Master and N Workers started from pyspark's `bin/spark-class`.

The pip package of pyspark has no `sbin/` start scripts, so each daemon is started directly
(`spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`) in its own process group, with its log
and PID under a state dir; readiness is the master's JSON endpoint (`http://HOST:WEBUI/json/`) listing every worker
ALIVE. Used to prove executor scaling on a real cluster (executors really start and stop) without Docker.
A Worker may be started under a command prefix and on its own address (e.g. `ip netns exec NS` in a network
namespace), so that a test can cut one worker's network as a cluster really loses a machine.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from windjoin.connectors.local import processes

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class ClusterStartError(RuntimeError):
    """The cluster did not come up; the message names the daemon and its log's last lines."""


@dataclass(frozen=True)
class ClusterConfig:
    """What to start: `workers` Workers of `worker_cores` cores and `worker_memory` each, on `host`."""

    state_dir: Path
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    host: str = "127.0.0.1"
    ready_timeout_s: float = 90.0
    daemon_memory: str = "256m"  # heap of the Master and Worker JVMs themselves (SPARK_DAEMON_MEMORY)
    # Per worker i (when given): the address it binds and advertises (else `host`), and a command prefix it runs
    # under, e.g. ("ip", "netns", "exec", "ns0"); its executors inherit both.
    worker_hosts: tuple[str, ...] = ()
    worker_prefixes: tuple[tuple[str, ...], ...] = ()
    # Spark settings of the Master and Worker daemons (SPARK_DAEMON_JAVA_OPTS), e.g. spark.worker.timeout: how
    # many seconds without a heartbeat before the master drops a worker (default 60).
    daemon_conf: Mapping[str, str] = field(default_factory=dict)

    def worker_host(self, i: int) -> str:
        return self.worker_hosts[i] if i < len(self.worker_hosts) else self.host

    def worker_prefix(self, i: int) -> tuple[str, ...]:
        return self.worker_prefixes[i] if i < len(self.worker_prefixes) else ()


@dataclass
class StandaloneCluster:
    """A started cluster: the master URL for `SparkSession.builder.master(...)`, its JSON UI, and daemon PIDs."""

    config: ClusterConfig
    master_url: str
    webui_url: str
    pids: dict[str, int] = field(default_factory=dict)  # daemon name ("master", "worker-0", ...) -> PID

    def status(self, timeout_s: float = 2.0) -> dict:
        """The master's JSON status: workers (state, cores, coresused, memoryused), active apps."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=timeout_s) as response:
            return json.loads(response.read())

    def executors_running(self) -> int:
        """Executors the master sees running on its ALIVE workers, counted as cores in use (1 core per executor
        when executors take one core, as on this cluster's 1-core workers)."""
        return sum(w.get("coresused", 0) for w in self.status()["workers"] if w.get("state") == "ALIVE")

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the workers, then the master, by the PIDs this object started."""
        for name in sorted(self.pids, key=lambda n: n == "master"):
            processes.stop(self.pids[name], grace_s=grace_s)
        self.pids.clear()


def spark_home() -> Path:
    """The pyspark package folder, which holds `bin/spark-class` and `jars/` (SPARK_HOME for the daemons)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java_available() -> bool:
    return bool(os.environ.get("JAVA_HOME")) or shutil.which("java") is not None


def _env(config: ClusterConfig, host: str) -> dict[str, str]:
    env = dict(os.environ)
    if config.daemon_conf:
        env["SPARK_DAEMON_JAVA_OPTS"] = " ".join(f"-D{k}={v}" for k, v in config.daemon_conf.items())
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=host,
        SPARK_DAEMON_MEMORY=config.daemon_memory,
        PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def _alive_workers(webui_url: str) -> int:
    try:
        with urllib.request.urlopen(f"{webui_url}/json/", timeout=2.0) as response:
            status = json.loads(response.read())
    except (OSError, ValueError):
        return -1  # master not answering yet
    return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")


def start_cluster(config: ClusterConfig) -> StandaloneCluster:
    """Start a Master and `config.workers` Workers on free loopback ports; wait until all workers are ALIVE.

    On failure every started daemon is stopped again and ClusterStartError names the one that failed.
    """
    if not java_available():
        raise ClusterStartError("no Java: set JAVA_HOME or put `java` on PATH (Spark needs Java 17+)")
    state_dir = Path(config.state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    spark_class = str(spark_home() / "bin" / "spark-class")
    env = _env(config, config.host)
    port, webui = processes.free_port(config.host), processes.free_port(config.host)
    cluster = StandaloneCluster(config, f"spark://{config.host}:{port}", f"http://{config.host}:{webui}")
    logs = {"master": state_dir / "master.log"}
    try:
        master_argv = [spark_class, MASTER_CLASS, "--host", config.host, "--port", str(port), "--webui-port"]
        cluster.pids["master"] = processes.spawn([*master_argv, str(webui)], logs["master"], cwd=state_dir, env=env)
        for i in range(config.workers):
            name = f"worker-{i}"
            work_dir = state_dir / name
            work_dir.mkdir(exist_ok=True)
            logs[name] = state_dir / f"{name}.log"
            host = config.worker_host(i)
            argv = [
                *config.worker_prefix(i),
                spark_class,
                WORKER_CLASS,
                "--host",
                host,
                "--port",  # free here; a worker in its own network namespace has all its ports free
                str(processes.free_port(config.host)),
                "--webui-port",
                str(processes.free_port(config.host)),
                "--cores",
                str(config.worker_cores),
                "--memory",
                config.worker_memory,
                "--work-dir",
                str(work_dir),
                cluster.master_url,
            ]
            worker_env = _env(config, host)
            cluster.pids[name] = processes.spawn(argv, logs[name], cwd=work_dir, env=worker_env)
        (state_dir / "cluster.json").write_text(
            json.dumps({"master_url": cluster.master_url, "webui_url": cluster.webui_url, "pids": cluster.pids})
        )
        deadline = time.monotonic() + config.ready_timeout_s
        while _alive_workers(cluster.webui_url) < config.workers:
            dead = [n for n, pid in cluster.pids.items() if not processes.is_alive(pid)]
            if dead or time.monotonic() > deadline:
                name = dead[0] if dead else "master"
                why = "exited" if dead else f"did not see {config.workers} ALIVE workers in {config.ready_timeout_s}s"
                raise ClusterStartError(f"spark {name} {why}; log {logs[name]}:\n{processes.log_tail(logs[name])}")
            time.sleep(0.5)
    except BaseException:
        cluster.stop(grace_s=5.0)
        raise
    return cluster
