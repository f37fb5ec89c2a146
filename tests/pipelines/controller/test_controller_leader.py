"""`windjoin controller --leader-election` on real Redis, with the Lease in the in-memory store of
tests/support/leases.py (the Kubernetes API patched in): the leader decides and releases on exit, a standby waits
out a dead holder's lease and then decides, a live holder keeps a --once standby from deciding at all."""

from __future__ import annotations

import json
import threading
import time

import pytest
from click.testing import CliRunner

from tests.support.controller_load import CONFIG, publish, spec_file
from tests.support.leases import CandidateApi, World
from windjoin.connectors.redis.control_decisions import DecisionStore
from windjoin.pipelines.cli.controller import controller
from windjoin.pipelines.controller import leader_election

LEASE = ["--lease-name", "wj-controller", "--lease-namespace", "streams"]
OTHER = leader_election.LeaseConfig("wj-controller", "streams", "controller-1", 3, 1, 0.2)
FAST = ["--lease-duration", "3", "--lease-renew-deadline", "1", "--lease-retry-period", "0.2"]


@pytest.fixture
def world(monkeypatch):
    world = World()
    monkeypatch.setattr(leader_election, "kube_lease_api", lambda: CandidateApi(world, "cli"))
    return world


def _invoke(redis_url, namespace, tmp_path, *extra: str):
    config = tmp_path / "control.yaml"
    config.write_text(json.dumps(CONFIG))
    spec = spec_file(tmp_path, redis_url)
    args = [str(spec), "--once", "--config", str(config), "--namespace", namespace, "--leader-election", *LEASE]
    return CliRunner().invoke(controller, [*args, *extra], env={"POD_NAME": "controller-0"})


def _holder(world: World) -> str | None:
    return world.store.leases["streams", "wj-controller"].spec.holder_identity


def test_leader_decides_and_releases_the_lease_on_exit(redis_url, namespace, tmp_path, world):
    publish(redis_url, namespace, range(4))
    done = _invoke(redis_url, namespace, tmp_path)
    assert done.exit_code == 0, done.output
    assert "controller-0 leads (lease streams/wj-controller)" in done.output
    assert "epoch 1: 4 batches" in done.output and "lease released" in done.output
    assert DecisionStore(redis_url, namespace).latest()["epoch"] == "1"
    spec = world.store.leases["streams", "wj-controller"].spec
    assert spec.holder_identity is None and spec.lease_transitions == 0


def test_standby_takes_over_a_dead_holders_lease_then_decides(redis_url, namespace, tmp_path, world):
    publish(redis_url, namespace, range(4))
    gone = leader_election.LeaderElector(CandidateApi(world, "gone"), OTHER)
    assert gone.try_acquire_or_renew()  # then never renews (a crashed pod)
    started = time.monotonic()
    done = _invoke(redis_url, namespace, tmp_path, *FAST)
    assert done.exit_code == 0, done.output
    assert time.monotonic() - started >= 3.0, "took over before the lease duration"
    assert "epoch 1: 4 batches" in done.output
    assert world.store.leases["streams", "wj-controller"].spec.lease_transitions == 1
    assert _holder(world) is None  # released again on exit


def test_standby_never_decides_while_the_leader_renews(redis_url, namespace, tmp_path, world):
    publish(redis_url, namespace, range(4))
    leader = leader_election.LeaderElector(CandidateApi(world, "leader"), OTHER)
    stop = threading.Event()

    def renew() -> None:
        while not stop.is_set():
            leader.try_acquire_or_renew()
            stop.wait(0.2)

    assert leader.try_acquire_or_renew()
    thread = threading.Thread(target=renew, daemon=True)
    thread.start()
    try:
        done = _invoke(redis_url, namespace, tmp_path, *FAST)
    finally:
        stop.set()
        thread.join()
    assert done.exit_code != 0
    assert "not the leader after 6 s (lease held by controller-1)" in done.output
    assert "epoch 1" not in done.output
    assert DecisionStore(redis_url, namespace).latest() is None
    assert _holder(world) == "controller-1"


def test_lease_timings_without_a_margin_are_a_usage_error(redis_url, namespace, tmp_path, world):
    done = _invoke(redis_url, namespace, tmp_path, "--lease-duration", "10", "--lease-renew-deadline", "9.5")
    assert done.exit_code == 2 and "renew_deadline_s" in done.output
