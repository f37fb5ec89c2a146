"""Executor scaling in the join job's driver: follow a desired executor count with Spark's own API.

The decision (bounds, hysteresis) is the pure `next_target`; the Spark calls are thin (`SparkExecutors`), and
`ExecutorFollower` is a driver thread that reads the desired count (a fixed number, or the controller's latest
decision in Redis: its `slots`, one executor per active slot) and applies it. Dynamic allocation must be off:
with it on, Spark's own allocator adds and removes executors by its task backlog and fights explicit requests;
with it off, `requestTotalExecutors` sets the absolute target and `killExecutors` removes chosen executors
(lowering the target with them). On a standalone cluster the master then launches or stops executors on its
workers; on Kubernetes the driver creates or deletes executor pods.

JVM signatures (pyspark 4.3, `javap` on spark-core_2.13-4.3.0.jar, `SparkContext`):
`requestTotalExecutors(int, int, scala.collection.immutable.Map<String, Object>)`,
`killExecutors(scala.collection.immutable.Seq<String>)`, `getExecutorIds(): Seq<String>`; Python lists and dicts do
not convert to Scala collections through py4j, hence `PythonUtils.toSeq` / `PythonUtils.toScalaMap`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from windjoin.connectors.redis.client import RedisAuth, redis_client
from windjoin.connectors.redis.control_decisions import decision_key

log = logging.getLogger(__name__)

DEFAULT_REDIS_KEY = decision_key()  # the controller's latest decision (a hash)
DECISION_FIELD = "slots"  # its active slot count: one executor per slot


@dataclass(frozen=True)
class ScalingPolicy:
    """Bounds and hysteresis for the executor target.

    Growing happens at the first decision above the target; shrinking only once every decision for
    `shrink_after_s` asked for fewer (a brief lull does not give executors back). After any change, no other
    change for `cooldown_s` (new executors take ~10 s to register; their effect on load shows later still).
    """

    min_executors: int = 1
    max_executors: int = 64
    shrink_after_s: float = 30.0
    cooldown_s: float = 15.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_executors <= self.max_executors:
            raise ValueError(
                f"executor bounds: need 0 <= min <= max, got min {self.min_executors}, max {self.max_executors}"
            )
        if self.shrink_after_s < 0 or self.cooldown_s < 0:
            raise ValueError(
                f"shrink_after_s and cooldown_s must be >= 0, got {self.shrink_after_s}, {self.cooldown_s}"
            )


@dataclass(frozen=True)
class ScalingState:
    """The target in force, when it last changed, and since when decisions have asked for fewer (None: not)."""

    target: int
    changed_at: float = -math.inf
    below_since: float | None = None


def clamp(desired: int, policy: ScalingPolicy) -> int:
    return min(max(desired, policy.min_executors), policy.max_executors)


def next_target(state: ScalingState, desired: int | None, now: float, policy: ScalingPolicy) -> ScalingState:
    """The state after one decision `desired` (None: no decision available, keep everything) at time `now`."""
    if desired is None:
        return state
    want = clamp(desired, policy)
    below_since = (state.below_since if state.below_since is not None else now) if want < state.target else None
    state = replace(state, below_since=below_since)
    if want == state.target or now - state.changed_at < policy.cooldown_s:
        return state
    if want < state.target and now - below_since < policy.shrink_after_s:
        return state
    return ScalingState(target=want, changed_at=now, below_since=None)


def to_remove(executor_ids: list[str], target: int) -> list[str]:
    """Which executors to kill to come down to `target`: the newest first (highest numeric id), so the longest-lived
    executors, whose Python workers and state caches are warm, stay."""
    excess = len(executor_ids) - target
    if excess <= 0:
        return []
    ordered = sorted(executor_ids, key=lambda e: (not e.isdigit(), int(e) if e.isdigit() else 0, e))
    return ordered[-excess:]


def registered_executor_ids(jvm_sc: Any) -> list[str]:
    """Ids of the executors registered with the driver (`sc._jsc.sc()`), the driver itself not among them."""
    ids = jvm_sc.getExecutorIds()  # a Scala Seq: py4j cannot iterate it, so index it
    return [str(ids.apply(i)) for i in range(ids.size())]


def executor_count(sc: Any) -> int:
    """How many executors the driver has now (the job's metrics hook): on a cluster master the registered
    executors; a local master has no separate executors, its tasks run in the driver's one JVM: counted as 1
    (not its cores: those are task slots, shown by Spark's own metrics)."""
    if sc.master.startswith("local"):
        return 1
    return len(registered_executor_ids(sc._jsc.sc()))


class SparkExecutors:
    """The running SparkContext's executors, through the JVM SparkContext (`sc._jsc.sc()`)."""

    def __init__(self, sc: Any) -> None:
        if sc.master.startswith("local"):
            raise ValueError(f"executor scaling needs a cluster master (spark://, k8s://), got {sc.master}")
        if sc.getConf().get("spark.dynamicAllocation.enabled", "false").lower() == "true":
            raise ValueError(
                "spark.dynamicAllocation.enabled=true: Spark's allocator would fight explicit executor requests; "
                "turn it off to let windjoin set the executor count"
            )
        self._sc = sc
        self._jvm_sc = sc._jsc.sc()
        self._killed: set[str] = set()  # asked to stop, still registered

    def live(self) -> list[str]:
        """Ids of the executors registered with the driver now and not being removed by us (the driver itself is
        not among them). Removal takes seconds; counting a killed executor as live would kill again."""
        registered = registered_executor_ids(self._jvm_sc)
        self._killed &= set(registered)
        return [e for e in registered if e not in self._killed]

    def apply(self, target: int) -> list[str]:
        """Make `target` the executor total: kill the excess (newest first), then request the absolute total.
        Returns the ids killed."""
        killed = to_remove(self.live(), target)
        if killed:
            self._jvm_sc.killExecutors(self._sc._jvm.PythonUtils.toSeq(killed))
            self._killed |= set(killed)
        self._jvm_sc.requestTotalExecutors(target, 0, self._sc._jvm.PythonUtils.toScalaMap({}))
        return killed


def redis_desired(url: str, key: str = DEFAULT_REDIS_KEY, auth: RedisAuth | None = None) -> Callable[[], int | None]:
    """A reader of the desired executor count from Redis: field `slots` of a hash (the controller's latest decision,
    one executor per active slot) or a plain integer string (set by hand). None when absent or unreadable."""
    import redis

    client = redis_client(url, auth, socket_timeout=2.0)

    def read() -> int | None:
        try:
            kind = client.type(key)
            raw = (
                client.hget(key, DECISION_FIELD) if kind == b"hash" else client.get(key) if kind == b"string" else None
            )
            return None if raw is None else int(raw)
        except (redis.RedisError, ValueError) as err:
            log.warning("desired executors from %s key %s unreadable: %s", url, key, err)
            return None

    return read


class ExecutorFollower:
    """A daemon thread in the driver: every `interval_s`, read the desired count, step the policy, apply changes.

    `on_change(target, live_ids, killed_ids)` is called after each applied change (for progress lines).
    """

    def __init__(
        self,
        executors: SparkExecutors,
        desired: Callable[[], int | None],
        policy: ScalingPolicy,
        interval_s: float = 2.0,
        on_change: Callable[[int, list[str], list[str]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        between_batches: threading.Lock | None = None,
    ) -> None:
        self.executors, self.desired, self.policy = executors, desired, policy
        self.interval_s, self.on_change, self.clock = interval_s, on_change, clock
        # Held by the job while a batch runs: an executor killed mid-batch loses the batch's shuffle output, and
        # Spark then fails the batch ("a shuffle map stage with indeterminate output was failed and retried"),
        # so executors are only removed between batches.
        self.between_batches = between_batches or threading.Lock()
        self.state: ScalingState | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="windjoin-executors", daemon=True)

    def step(self) -> None:
        """One round: read the decision, step the policy, apply a changed target; and, once the target has held
        for `cooldown_s`, kill executors beyond it (the cluster may have launched more than asked before the
        first request arrived, e.g. a standalone master gives a new application every free core)."""
        desired, now = self.desired(), self.clock()
        if self.state is None:
            if desired is None:
                return
            self.state = ScalingState(target=clamp(desired, self.policy), changed_at=now)
            changed = True
        else:
            previous = self.state.target
            self.state = next_target(self.state, desired, now, self.policy)
            changed = self.state.target != previous
        live = self.executors.live()
        settled = now - self.state.changed_at >= self.policy.cooldown_s
        if changed or (settled and len(live) > self.state.target):
            with self.between_batches:
                killed = self.executors.apply(self.state.target)
            if self.on_change is not None:
                self.on_change(self.state.target, self.executors.live(), killed)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # a py4j hiccup must not end scaling for the rest of the run
                log.exception("executor scaling step failed")
            self._stop.wait(self.interval_s)

    def start(self) -> ExecutorFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)


def start_following(
    sc: Any,
    fixed: int | None,
    redis_url: str | None,
    key: str = DEFAULT_REDIS_KEY,
    hold_s: float = 30.0,
    on_change: Callable[[int, list[str], list[str]], None] | None = None,
    auth: RedisAuth | None = None,
    between_batches: threading.Lock | None = None,
) -> ExecutorFollower | None:
    """Start following a fixed executor count or a Redis key (the controller's decision); None when neither is given.

    `hold_s` is the hysteresis: fewer executors only after `hold_s` of decisions asking for fewer, and no two
    changes within min(hold_s, 15) s. `between_batches`: the lock the job holds while a batch runs
    (`join_job.BATCH_RUNNING`); changes wait for it.
    """
    if fixed is None and redis_url is None:
        return None
    desired = (lambda: fixed) if redis_url is None else redis_desired(redis_url, key, auth)
    policy = ScalingPolicy(shrink_after_s=hold_s, cooldown_s=min(hold_s, 15.0))
    follower = ExecutorFollower(
        SparkExecutors(sc), desired, policy, on_change=on_change, between_batches=between_batches
    )
    return follower.start()
