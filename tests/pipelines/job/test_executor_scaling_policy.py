"""The executor target policy (bounds, hysteresis) and the follower's rounds, in-process without Spark."""

from __future__ import annotations

import threading
import uuid

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from windjoin.connectors.redis.client import redis_client
from windjoin.connectors.redis.control_decisions import DecisionStore, decision_key
from windjoin.pipelines.cli.main import cli
from windjoin.pipelines.job.executor_scaling import (
    ExecutorFollower,
    ScalingPolicy,
    ScalingState,
    next_target,
    redis_desired,
    to_remove,
)

POLICY = ScalingPolicy(min_executors=1, max_executors=4, shrink_after_s=30.0, cooldown_s=10.0)


def run(decisions: list[tuple[float, int | None]], start: int = 1, policy: ScalingPolicy = POLICY) -> list[int]:
    state, targets = ScalingState(target=start), []
    for now, desired in decisions:
        state = next_target(state, desired, now, policy)
        targets.append(state.target)
    return targets


def test_grows_at_once_and_clamps_to_bounds():
    assert run([(0.0, 3)]) == [3]
    assert run([(0.0, 9)]) == [4]
    assert run([(0.0, 0)], start=2, policy=ScalingPolicy(1, 4, shrink_after_s=0, cooldown_s=0)) == [1]


def test_no_decision_keeps_the_target():
    assert run([(0.0, None), (100.0, None)], start=2) == [2, 2]


def test_cooldown_holds_a_second_change():
    assert run([(0.0, 2), (5.0, 3), (10.0, 3)]) == [2, 2, 3]


def test_shrinks_only_after_a_sustained_lower_demand():
    # Down from 3 at t=0..; a single high decision at t=20 restarts the clock.
    decisions = [(0.0, 1), (15.0, 1), (20.0, 3), (25.0, 1), (50.0, 1), (55.0, 1)]
    assert run(decisions, start=3) == [3, 3, 3, 3, 3, 1]


def test_bad_bounds_are_refused_with_the_values():
    with pytest.raises(ValueError, match="min 3, max 2"):
        ScalingPolicy(min_executors=3, max_executors=2)


@given(st.lists(st.tuples(st.floats(0, 5), st.one_of(st.none(), st.integers(-3, 10))), max_size=40))
def test_target_stays_in_bounds_and_changes_respect_the_cooldown(steps):
    state, now, last_change = ScalingState(target=2), 0.0, None
    for dt, desired in steps:
        now += dt
        new = next_target(state, desired, now, POLICY)
        assert POLICY.min_executors <= new.target <= POLICY.max_executors
        if new.target != state.target:
            assert last_change is None or now - last_change >= POLICY.cooldown_s
            last_change = now
        state = new


def test_to_remove_kills_the_newest_executors():
    assert to_remove(["0", "10", "2"], 1) == ["2", "10"]
    assert to_remove(["0", "1"], 2) == []
    assert to_remove(["0"], 3) == []


class FakeExecutors:
    """A cluster that starts executors as asked and removes killed ones (the observable: its live list)."""

    def __init__(self, live: list[str]) -> None:
        self.ids, self.next_id, self.requests = list(live), len(live), []

    def live(self) -> list[str]:
        return list(self.ids)

    def apply(self, target: int) -> list[str]:
        killed = to_remove(self.ids, target)
        self.ids = [e for e in self.ids if e not in killed]
        while len(self.ids) < target:
            self.ids.append(str(self.next_id))
            self.next_id += 1
        self.requests.append(target)
        return killed


def test_follower_applies_the_first_decision_then_changes_and_trims_extra_executors():
    clock = [0.0]
    desired = [None]
    cluster = FakeExecutors(["0", "1"])  # the master gave the new application both workers
    changes = []
    policy = ScalingPolicy(min_executors=1, max_executors=2, shrink_after_s=0.0, cooldown_s=5.0)
    follower = ExecutorFollower(
        cluster,
        lambda: desired[0],
        policy,
        on_change=lambda t, live, killed: changes.append((t, live, killed)),
        clock=lambda: clock[0],
    )
    follower.step()  # no decision yet: nothing happens
    assert cluster.live() == ["0", "1"] and changes == []
    desired[0] = 1
    follower.step()
    assert cluster.live() == ["0"] and changes[-1] == (1, ["0"], ["1"])
    desired[0], clock[0] = 2, 2.0
    follower.step()  # within the cooldown
    assert cluster.live() == ["0"]
    clock[0] = 6.0
    follower.step()
    assert cluster.live() == ["0", "2"]
    cluster.ids.append("3")  # an executor beyond the target appears (e.g. relaunched by the cluster)
    clock[0] = 12.0
    follower.step()
    assert cluster.live() == ["0", "2"] and changes[-1][2] == ["3"]


def test_run_refuses_executor_scaling_on_a_local_master_before_starting_spark(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("{}")
    result = CliRunner().invoke(cli, ["run", str(spec), "--bootstrap", "127.0.0.1:1", "--executors", "2"])
    assert result.exit_code == 2
    assert "need a cluster --spark-master, got local[2]" in result.output


def test_desired_count_is_read_from_the_controllers_decision_or_a_plain_key(redis_url):
    namespace = f"t{uuid.uuid4().hex[:8]}"
    read = redis_desired(redis_url, decision_key(namespace))
    assert read() is None  # no decision yet
    store = DecisionStore(redis_url, namespace)
    store.record({"epoch": 1, "slots": 3})
    assert read() == 3
    store.close()
    plain = f"{namespace}:executors"
    client = redis_client(redis_url)
    client.set(plain, "2")
    assert redis_desired(redis_url, plain)() == 2
    client.set(plain, "two")
    assert redis_desired(redis_url, plain)() is None  # unreadable: keep the current target


def test_executors_change_only_between_batches():
    running = threading.Lock()
    cluster = FakeExecutors(["0", "1"])
    policy = ScalingPolicy(min_executors=1, max_executors=2, shrink_after_s=0.0, cooldown_s=0.0)
    follower = ExecutorFollower(cluster, lambda: 1, policy, between_batches=running)
    with running:  # a batch runs: the step waits for it to end
        stepping = threading.Thread(target=follower.step)
        stepping.start()
        stepping.join(timeout=0.3)
        assert stepping.is_alive() and cluster.live() == ["0", "1"]
    stepping.join(timeout=5)
    assert not stepping.is_alive() and cluster.live() == ["0"]
