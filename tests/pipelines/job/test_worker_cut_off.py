"""A fault a cluster really meets: one Spark worker cut off the network mid-run while the controller scales.

Each standalone Worker runs in its own network namespace (a veth pair to a bridge in the root namespace; see
bridged_namespaces), the Master, the broker, Redis (with a password: it serves the bridge) and the driver listen
on the bridge's address. The job follows `windjoin controller`'s executor count: under a trickle the controller
releases one executor and the job goes on on the other; then the load steps up, and as soon as the job scales
back up (the driver asks for a second executor) the link of the worker holding the one running executor, with
the job's work and a batch in flight, goes down. Spark must notice the lost executor (heartbeat timeout), and
the new executor, coming up on the other worker, must take the work over (its state from the checkpoint); all
results must equal the oracle. The test prints how long the batch in flight took to commit after the cut, with
the timeouts that bound it.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipelines.job.bridged_namespaces import BridgedNamespaces, NamespacesUnavailable, bridged_namespaces
from tests.pipelines.pipeline_helpers import keyed_eq_spec, parquet_pairs, produce_events
from tests.support.executor_scaling import ExecutorWatch, joined, scaling_events, wait
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.local import processes, services
from windjoin.connectors.spark.cluster import ClusterConfig, ClusterStartError, StandaloneCluster, start_cluster
from windjoin.operators.testing.oracle import as_multiset, oracle_join

# How fast a cut-off worker is noticed: the driver drops an executor after NETWORK_TIMEOUT without a heartbeat
# (checked every TIMEOUT_INTERVAL), the master drops the worker after WORKER_TIMEOUT s (so that it launches no
# replacement executor there).
HEARTBEAT, NETWORK_TIMEOUT, TIMEOUT_INTERVAL, WORKER_TIMEOUT = "1s", "8s", "1s", "6"
BATCH_LINE = re.compile(r"^batch (\d+): ", re.MULTILINE)
# The driver's line for an applied executor target (pipelines/cli/run.py): "executors: target 2, live 1 ['1']".
TARGET_LINE = re.compile(r"^executors: target (\d+), live \d+ \[(.*)\]", re.MULTILINE)
TRICKLE, STEADY, CAPACITY = 1, 100, 40  # events per 0.5 s, and the controller's W; see the test's docstring


@pytest.fixture(scope="module")
def net() -> Iterator[BridgedNamespaces]:
    try:
        with bridged_namespaces(2) as made:
            yield made
    except NamespacesUnavailable as err:
        pytest.skip(f"no network namespaces: {err}")


@pytest.fixture(scope="module")
def bridged_services(net, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """The embedded broker and Redis on the bridge's address (the workers reach nothing else): (bootstrap, url,
    Redis's password file)."""
    state_dir = tmp_path_factory.mktemp("bridged-services")
    try:
        started = {s.service.name: s.service for s in services.up(services.ServicesConfig(state_dir, host=net.host_ip))}
    except services.ServiceStartError as err:
        services.down(state_dir)
        pytest.skip(f"the services did not start on {net.host_ip}: {err}")
    try:
        redis_service = started[services.REDIS]
        yield started[services.KAFKA].url, redis_service.url, redis_service.password_file
    finally:
        services.down(state_dir)


@pytest.fixture(scope="module")
def cluster(net, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    config = ClusterConfig(
        state_dir=tmp_path_factory.mktemp("spark-cluster-netns"),
        host=net.host_ip,
        worker_hosts=net.ips,
        worker_prefixes=tuple(net.prefix(i) for i in range(len(net.names))),
        daemon_conf={"spark.worker.timeout": WORKER_TIMEOUT},
    )
    try:
        started = start_cluster(config)
    except ClusterStartError as err:
        pytest.skip(f"the Spark standalone cluster did not start in namespaces: {err}")
    try:
        yield started
    finally:
        started.stop()


def _text(log: Path) -> str:
    return log.read_text(errors="replace").replace("\r", "\n")


def _batches(log: Path) -> list[int]:
    return [int(b) for b in BATCH_LINE.findall(_text(log))]


def _targets(log: Path) -> list[tuple[int, list[str]]]:
    """The executor targets the driver applied, in order, each with the executor ids live just after."""
    return [(int(t), re.findall(r"'([^']+)'", live)) for t, live in TARGET_LINE.findall(_text(log))]


def _shrunk(log: Path) -> int | None:
    """How many of the targets precede the shrink to one executor (None: not shrunk yet)."""
    targets = [t for t, _ in _targets(log)]
    return next((i + 1 for i, t in enumerate(targets) if t == 1), None)


def _busy_worker(cluster: StandaloneCluster) -> str | None:
    """The host of the only ALIVE worker running an executor (None unless exactly one does)."""
    busy = [w["host"] for w in cluster.status()["workers"] if w.get("state") == "ALIVE" and w.get("coresused", 0)]
    return busy[0] if len(busy) == 1 else None


@pytest.mark.slow
def test_job_recovers_when_a_worker_is_cut_off_while_scaling_up(
    net, bridged_services, cluster, unique_topic, tmp_path, record_property
):
    """Trickle until the controller has released one executor and the job committed batches on the other; then
    STEADY, and cut the busy worker when the driver applies target 2. The controller's tau (S2J's utilisation,
    W = CAPACITY) read ~0.5 for 100 events per 0.5 s on one slot at W = 100, under tau2 0.9 (no growth: a first
    run waited 90 s): at W = 40 it is ~1.25 on one slot (grow to ceil(1.25 / tau* 0.4) -> max 2) and ~0.6 on
    two (held, over tau0 0.2); the trickle, 1 event per 0.5 s, stays well under tau0 (4 read 0.13 at W = 100)."""
    bootstrap, url, password_file = bridged_services
    spec = keyed_eq_spec(unique_topic, tmp_path)
    spec.update(
        trigger_ms=500,
        max_offsets_per_trigger=300,
        sinks={
            "parquet": {"path": str(tmp_path / "parquet")},
            "redis": {"url": url, "password_file": password_file},  # the driver, controller and executors log in
        },
    )
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))
    control = tmp_path / "control.yaml"
    utilisation = {"capacity": CAPACITY, "sustain_epochs": 1, "max_workers": 2}
    control.write_text(json.dumps({"scaling": "utilisation", "utilisation": utilisation}))
    rng, events, lock = random.Random(22), [], threading.Lock()
    produce_events(bootstrap, spec, [])
    log, control_log = tmp_path / "driver.log", tmp_path / "controller.log"
    ip = net.host_ip
    argv = [
        sys.executable, "-m", "windjoin.pipelines", "run", str(spec_path), "--bootstrap", bootstrap,
        "--spark-master", cluster.master_url, "--executors-from-redis", url, "--executors-hold", "0",
        "--spark-conf", "spark.executor.memory=512m", "--spark-conf", "spark.executor.cores=1",
        "--spark-conf", f"spark.driver.host={ip}", "--spark-conf", f"spark.driver.bindAddress={ip}",
        "--spark-conf", f"spark.executor.heartbeatInterval={HEARTBEAT}",
        "--spark-conf", f"spark.network.timeout={NETWORK_TIMEOUT}",
        "--spark-conf", f"spark.network.timeoutInterval={TIMEOUT_INTERVAL}",
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": ip}
    watch = ExecutorWatch(cluster)
    driver = processes.spawn(argv, log, cwd=tmp_path, env=env)
    controller_argv = [sys.executable, "-m", "windjoin.pipelines", "controller", str(spec_path), "--config"]
    controller = processes.spawn([*controller_argv, str(control), "--epoch-s", "3"], control_log, cwd=tmp_path)
    sink = ParquetSink(tmp_path / "parquet")
    producing, load = threading.Event(), {"per_tick": TRICKLE}
    timings: dict[str, float] = {}
    at_cut: dict = {}

    def produce() -> None:
        while producing.is_set():
            with lock:
                new = scaling_events(len(events), load["per_tick"], rng)
                events.extend(new)
                produce_events(bootstrap, spec, new)
            time.sleep(0.5)

    def shrunk_and_committed() -> bool:
        """One executor left (the master and the driver agree) and 2 batches committed since the shrink."""
        shrink = _shrunk(log)
        if shrink is None or watch.now != 1:
            return False
        text = _text(log)
        after = text[text.index("executors: target 1") :]
        return len(BATCH_LINE.findall(after)) >= 2

    def scaling_up() -> bool:
        targets = _targets(log)
        return any(t == 2 for t, _ in targets[shrink_index:])

    producer = threading.Thread(target=produce, daemon=True)
    try:
        producing.set()
        producer.start()
        timings["trickle: down to 1 executor, 2 batches on it"] = wait(
            "one executor released under the trickle, 2 batches committed on the other", shrunk_and_committed, 150, log
        )
        shrink_index = _shrunk(log)
        busy = _busy_worker(cluster)
        assert busy in net.ips, f"one worker should run the remaining executor: {cluster.status()['workers']}"
        load["per_tick"] = STEADY
        stepped = time.monotonic()
        timings["step up: driver asks for 2 executors"] = wait(
            "the job scaling up to 2 executors under the steady load", scaling_up, 90, control_log, stepped
        )
        at_cut.update(
            executors_master=watch.now,
            changes=list(watch.changes),
            workers={w["host"]: w.get("coresused", 0) for w in cluster.status()["workers"]},
            live_at_target_2=next(live for t, live in _targets(log)[shrink_index:] if t == 2),
            busy=busy,
        )
        in_flight = max(_batches(log), default=-1) + 1
        net.cut(net.ips.index(busy))
        cut = time.monotonic()
        timings["recovery: batch in flight at the cut committed"] = wait(
            f"batch {in_flight} (in flight at the cut) committed", lambda: in_flight in _batches(log), 90, log, cut
        )
        wait("3 more batches after it", lambda: max(_batches(log)) >= in_flight + 3, 60, log)
        producing.clear()
        producer.join()
        timings["all joined"] = wait("all events joined", lambda: joined(sink, spec, events), 90, log, cut)
    finally:
        producing.clear()
        watch.stop()
        processes.stop(controller, grace_s=5.0)
        processes.stop(driver, grace_s=10.0)
    workers = {w["host"]: w["state"] for w in cluster.status()["workers"]}
    print(
        f"seconds: {timings}; executors seen by the master: {watch.changes}; at the cut: {at_cut}; "
        f"workers after: {workers}; timeouts: heartbeat {HEARTBEAT}, spark.network.timeout {NETWORK_TIMEOUT} "
        f"(checked every {TIMEOUT_INTERVAL}), spark.worker.timeout {WORKER_TIMEOUT} s"
    )
    print(processes.log_tail(log, 40))
    record_property("recovery_s", round(timings["recovery: batch in flight at the cut committed"], 1))

    # The cut fell in a scale-up: the job had run on one executor (the master saw it), the driver had just asked
    # for a second, and the one it had then was the only one live.
    assert 1 in at_cut["changes"], at_cut
    assert len(at_cut["live_at_target_2"]) == 1, at_cut
    # The cut cost the job the executor that held its work, on the cut worker, noticed by its missing heartbeats
    # (the driver's, or the master's for the worker: "worker lost: Not receiving heartbeat for 6 seconds"); no
    # other executor was lost (the shrink's removal, if logged at all, says the driver killed it).
    lost = re.findall(r"Lost executor (\S+) on (\S+): (.*)", _text(log))
    timed_out = [(executor, host) for executor, host, reason in lost if "heartbeat" in reason.lower()]
    assert timed_out == [(at_cut["live_at_target_2"][0], busy)], lost
    assert all("heartbeat" in reason.lower() or "killed by driver" in reason.lower() for *_, reason in lost), lost
    other = next(host for host in net.ips if host != busy)
    assert workers[busy] == "DEAD" and workers[other] == "ALIVE", workers
    assert max(_batches(log)) >= in_flight + 3  # it went on committing after the cut
    expected, late = oracle_join(spec, events)
    assert not late and len(expected) > 1000
    assert as_multiset(parquet_pairs(sink, spec)) == as_multiset(expected)
