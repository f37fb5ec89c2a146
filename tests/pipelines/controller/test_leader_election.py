"""Leader election over a Lease: candidates run in-process against an in-memory Lease store that behaves like the
API server where it matters (404 on a missing Lease, 409 AlreadyExists on a second create, 409 Conflict on a
replace carrying a stale resourceVersion), under a simulated true time with per-candidate monotonic clocks (rate
skew) and wall clocks (offset skew). One test runs against a real cluster and is skipped without one."""

from __future__ import annotations

import datetime as dt
import os
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.leases import CandidateApi, World
from windjoin.pipelines.controller.leader_election import LeaderElector, LeaderLoop, LeaseConfig, LeaseConfigError

NS, NAME = "streams", "wj-controller"
EPOCH = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)


def candidate(world: World, who: str, rate: float = 1.0, skew_s: float = 0.0, **timings):
    """A candidate whose monotonic clock runs at `rate` (from an arbitrary origin) and whose wall clock is off by
    `skew_s`."""
    timings = {"lease_duration_s": 10, "renew_deadline_s": 7, "retry_period_s": 1, **timings}
    config = LeaseConfig(NAME, NS, who, **timings)
    origin = 1000.0 * (sum(map(ord, who)) % 7)
    elector = LeaderElector(
        CandidateApi(world, who),
        config,
        clock=lambda: origin + rate * world.t,
        wall=lambda: EPOCH + dt.timedelta(seconds=world.t + skew_s),
    )
    return elector


def lease(world: World):
    return world.store.leases[NS, NAME]


def leaders(*electors: LeaderElector) -> list[str]:
    return [e.config.identity for e in electors if e.is_leader()]


def test_first_candidate_creates_the_lease_and_leads_the_second_follows():
    world = World()
    a, b = candidate(world, "a"), candidate(world, "b")
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    spec = lease(world).spec
    assert spec.holder_identity == "a" and spec.lease_transitions == 0 and spec.lease_duration_seconds == 10
    assert spec.acquire_time == spec.renew_time == EPOCH
    assert leaders(a, b) == ["a"] and b.holder == "a"


def test_two_candidates_racing_to_create_one_wins_the_other_gets_already_exists():
    world = World()
    a = candidate(world, "a")
    b = candidate(world, "b")
    world.after_read["a"] = [b.try_acquire_or_renew]  # b creates between a's 404 and a's create
    assert not a.try_acquire_or_renew()
    assert leaders(a, b) == ["b"] and lease(world).spec.holder_identity == "b"
    assert world.store.writes == 1


def test_two_candidates_racing_to_take_over_an_expired_lease_one_wins_by_resource_version():
    world = World()
    old, a, b = candidate(world, "old"), candidate(world, "a"), candidate(world, "b")
    assert old.try_acquire_or_renew()
    for c in (a, b):
        assert not c.try_acquire_or_renew()  # both see old's lease, version 1
    world.advance(10.5)  # old stopped renewing: expired for both
    results = {}
    world.after_read["a"] = [lambda: results.setdefault("b", b.try_acquire_or_renew())]  # b writes inside a's window
    results["a"] = a.try_acquire_or_renew()  # a's replace carries the version b has just replaced: 409
    assert results == {"a": False, "b": True}
    assert lease(world).spec.holder_identity == "b" and lease(world).spec.lease_transitions == 1
    assert leaders(a, b) == ["b"]  # old's own deadline (7 s) passed too
    assert not old.is_leader()


def test_leader_renews_before_the_lease_runs_out_and_keeps_it_for_long():
    world = World()
    a, b = candidate(world, "a"), candidate(world, "b")
    a.try_acquire_or_renew()
    acquired = lease(world).spec.acquire_time
    for _ in range(100):  # 100 s, ten lease durations
        world.advance(1.0)
        assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
        assert leaders(a, b) == ["a"]
    spec = lease(world).spec
    assert spec.acquire_time == acquired and spec.renew_time == EPOCH + dt.timedelta(seconds=100)
    assert spec.lease_transitions == 0


def test_expired_lease_is_taken_over_only_after_a_full_lease_duration_without_change():
    world = World()
    a, b = candidate(world, "a"), candidate(world, "b")
    a.try_acquire_or_renew()
    world.advance(3.0)
    a.try_acquire_or_renew()  # last renewal at t=3
    assert not b.try_acquire_or_renew()  # b sees version 2 at t=3
    world.advance(9.9)  # a is gone (no release)
    assert not b.try_acquire_or_renew(), "taken over before a lease duration passed since the last change"
    world.advance(0.2)
    assert b.try_acquire_or_renew()
    spec = lease(world).spec
    assert spec.holder_identity == "b" and spec.lease_transitions == 1
    assert (spec.acquire_time - EPOCH).total_seconds() == pytest.approx(13.1)
    assert leaders(a, b) == ["b"]


def test_leader_that_cannot_renew_steps_down_before_anyone_can_take_over():
    world = World()
    a, b = candidate(world, "a"), candidate(world, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    a.api.down = True  # a is cut off from the API server
    steps_down_at = takes_over_at = None
    for tick in range(1, 200):
        world.advance(0.1)
        a.try_acquire_or_renew()
        if b.try_acquire_or_renew() and takes_over_at is None:
            takes_over_at = tick / 10
        if not a.is_leader() and steps_down_at is None:
            steps_down_at = tick / 10
        assert len(leaders(a, b)) <= 1
    # a steps down 7 s (renew deadline) after its last renewal; b takes over 10 s (lease) after it saw it
    assert steps_down_at == pytest.approx(7.0, abs=0.11) and takes_over_at == pytest.approx(10.0, abs=0.11)
    a.api.down = False
    world.advance(1.0)
    assert not a.try_acquire_or_renew() and a.holder == "b"  # back online: follows the new leader


def test_term_counts_each_time_a_candidate_becomes_leader():
    world = World()
    a, b = candidate(world, "a"), candidate(world, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    for _ in range(5):
        world.advance(1.0)
        a.try_acquire_or_renew()
    assert a.term == 1 and b.term == 0  # renewals are one term
    a.release()
    b.try_acquire_or_renew()
    b.release()
    assert a.try_acquire_or_renew() and a.term == 2 and b.term == 1


def test_graceful_release_lets_a_standby_take_over_at_once():
    world = World()
    a, b = candidate(world, "a"), candidate(world, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    world.advance(1.0)
    assert a.release() and not a.is_leader()
    spec = lease(world).spec
    assert spec.holder_identity is None and spec.lease_duration_seconds == 1 and spec.lease_transitions == 0
    world.advance(0.1)  # long before a's lease would have expired
    assert b.try_acquire_or_renew()
    assert lease(world).spec.holder_identity == "b" and lease(world).spec.lease_transitions == 1
    assert not a.release(), "a follower has nothing to release"


def test_release_does_not_clear_a_lease_someone_else_holds():
    world = World()
    a, b = candidate(world, "a"), candidate(world, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    a.api.down = True
    world.advance(20.0)
    assert b.try_acquire_or_renew()
    a.api.down = False
    a._leader = True  # a paused process that still believes it leads (its deadline check has not run yet)
    assert not a.release()
    assert lease(world).spec.holder_identity == "b"


def test_skewed_wall_clocks_do_not_decide_expiry():
    world = World()
    ahead = candidate(world, "ahead", skew_s=3600.0)  # wall clock an hour fast
    behind = candidate(world, "behind", skew_s=-3600.0)
    assert behind.try_acquire_or_renew()  # writes renewTime an hour in the past, as seen by `ahead`
    for _ in range(30):
        world.advance(1.0)
        assert behind.try_acquire_or_renew() and not ahead.try_acquire_or_renew()
    world.advance(9.5)  # behind stops; ahead takes over on its own clock, not by renewTime
    assert not ahead.try_acquire_or_renew()
    world.advance(1.0)
    assert ahead.try_acquire_or_renew()
    assert (lease(world).spec.renew_time - EPOCH).total_seconds() == pytest.approx(40.5 + 3600)


def test_clock_rate_skew_within_the_margin_keeps_leadership_exclusive():
    world = World()
    slow, fast = candidate(world, "slow", rate=0.95), candidate(world, "fast", rate=1.05)
    assert slow.try_acquire_or_renew()
    fast.try_acquire_or_renew()
    slow.api.down = True
    for _ in range(400):
        world.advance(0.05)
        slow.try_acquire_or_renew()
        fast.try_acquire_or_renew()
        assert len(leaders(slow, fast)) <= 1
    assert leaders(slow, fast) == ["fast"]


@pytest.mark.parametrize(
    ("timings", "key"),
    [
        ({"lease_duration_s": 10, "renew_deadline_s": 9.5}, "renew_deadline_s"),
        ({"lease_duration_s": 15, "renew_deadline_s": 10, "retry_period_s": 10}, "retry_period_s"),
        ({"lease_duration_s": 12.5}, "lease_duration_s"),
    ],
)
def test_timings_without_a_safety_margin_are_refused_naming_the_key(timings, key):
    with pytest.raises(LeaseConfigError, match=key):
        LeaseConfig(NAME, NS, "a", **timings)
    with pytest.raises(LeaseConfigError, match="identity"):
        LeaseConfig(NAME, NS, "")


STEP = st.tuples(st.just("step"), st.integers(0, 2), st.one_of(st.none(), st.integers(0, 2)))
ACTIONS = st.one_of(
    STEP,
    STEP,  # steps twice as likely as the rest
    st.tuples(st.just("advance"), st.sampled_from([0.05, 0.5, 1.0, 2.0, 3.5, 6.0, 7.0, 10.0, 11.0])),
    st.tuples(st.just("down"), st.integers(0, 2)),
    st.tuples(st.just("up"), st.integers(0, 2)),
    st.tuples(st.just("release"), st.integers(0, 2)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    actions=st.lists(ACTIONS, min_size=10, max_size=80), rates=st.lists(st.floats(0.95, 1.05), min_size=3, max_size=3)
)
def test_random_schedules_never_have_two_leaders_and_elect_one_when_calm(actions, rates):
    world = World()
    cs = [candidate(world, f"c{i}", rate=r, skew_s=(i - 1) * 600.0) for i, r in enumerate(rates)]
    for action in actions:
        kind, *args = action
        if kind == "step":
            who, racer = args
            if racer is not None and racer != who:  # racer's whole attempt lands inside who's read-write window
                world.after_read[cs[who].config.identity] = [cs[racer].try_acquire_or_renew]
            cs[who].try_acquire_or_renew()
            world.after_read.clear()
        elif kind == "advance":
            world.advance(args[0])
        elif kind in ("down", "up"):
            cs[args[0]].api.down = kind == "down"
        else:
            cs[args[0]].release()
        assert len(leaders(*cs)) <= 1, (action, leaders(*cs))
    for c in cs:
        c.api.down = False
    for _ in range(300):  # 30 s of everyone retrying every 0.1 s: exactly one leader in the end
        world.advance(0.1)
        for c in cs:
            c.try_acquire_or_renew()
        assert len(leaders(*cs)) <= 1
    assert len(leaders(*cs)) == 1
    assert lease(world).spec.holder_identity == leaders(*cs)[0]


def test_loop_reports_transitions_and_releases_on_stop():
    world = World()
    a = candidate(world, "a", retry_period_s=0.01, lease_duration_s=3, renew_deadline_s=2, min_margin_s=0.5)
    seen = []
    loop = LeaderLoop(a, on_change=seen.append).start()
    try:
        for _ in range(500):
            if seen:
                break
            time.sleep(0.01)
        assert seen == [True] and loop.is_leader()
    finally:
        released = loop.stop()
    assert released and seen == [True, False]
    assert lease(world).spec.holder_identity is None


def _cluster_api():
    """CoordinationV1Api of a reachable cluster, or None (with the reason)."""
    try:
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        api = client.CoordinationV1Api()
        api.list_namespaced_lease(os.environ.get("WINDJOIN_TEST_NAMESPACE", "default"), limit=1, _request_timeout=5)
        return api, ""
    except Exception as err:  # no kubeconfig, no server, no permission
        return None, f"no reachable Kubernetes cluster ({type(err).__name__}: {str(err)[:120]})"


def test_two_candidates_on_a_real_cluster():
    api, reason = _cluster_api()
    if api is None:
        pytest.skip(reason)
    ns, name = os.environ.get("WINDJOIN_TEST_NAMESPACE", "default"), f"windjoin-test-{uuid.uuid4().hex[:8]}"
    timings = {"lease_duration_s": 15, "renew_deadline_s": 10, "retry_period_s": 2}
    a = LeaderElector(api, LeaseConfig(name, ns, "a", **timings))
    b = LeaderElector(api, LeaseConfig(name, ns, "b", **timings))
    try:
        assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
        assert a.try_acquire_or_renew()  # renew against the real resourceVersion
        assert a.release()
        assert b.try_acquire_or_renew()
        real = api.read_namespaced_lease(name, ns)
        assert real.spec.holder_identity == "b" and real.spec.lease_transitions == 1
    finally:
        api.delete_namespaced_lease(name, ns)
