"""Leader election for the controller through a Kubernetes Lease (coordination.k8s.io/v1).

The rules are client-go's (`k8s.io/client-go/tools/leaderelection`):

- A candidate acquires the Lease when it is absent (create), released (no holder) or expired, and renews it while
  it holds it; every write is a `replace` carrying the `resourceVersion` it read, so of two candidates racing on the
  same version the API server accepts one and answers 409 Conflict to the other (a `create` racing a `create`
  gets 409 AlreadyExists).
- Expiry is judged on the candidate's own monotonic clock, never by comparing the holder's `renewTime` with the
  local wall clock: a candidate notes when it last saw the Lease *change* (its resourceVersion) and takes it over
  only once it has seen no change for the holder's `leaseDurationSeconds`. Skewed wall clocks between nodes
  therefore do not matter; what must hold is that clock *rates* agree within the margin below.
- The leader counts itself leader only until `renew_deadline_s` after it last *sent* a renewal that succeeded;
  if it cannot renew by then it steps down. Others take over no earlier than `lease_duration_s` after they saw
  that renewal land, so `lease_duration_s - renew_deadline_s` is the safety margin against clock-rate differences
  and request latency (validated: at least `min_margin_s`, and at least 10% of the lease duration).
- `leaseTransitions` counts changes of holder; `acquireTime` is when the current holder took the Lease.
- On shutdown the leader releases the Lease (no holder, a 1 s duration), so a standby takes over at its next
  retry instead of waiting out the lease.

`LeaderElector` is the logic over an object with the three CoordinationV1Api methods it calls (read, create,
replace) and injectable clocks; `LeaderLoop` runs it on a daemon thread; `kube_lease_api` is the only part that
talks to a cluster. Why not `kubernetes.leaderelection` from the client package: it judges time by
`time.time()` (wall clock, not injectable), has no release on shutdown, and runs its callbacks on its own threads.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes.client import V1Lease, V1LeaseSpec, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

NOT_FOUND, CONFLICT = 404, 409


class LeaseApi(Protocol):
    """The subset of `kubernetes.client.CoordinationV1Api` the elector calls."""

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> V1Lease: ...

    def create_namespaced_lease(self, namespace: str, body: V1Lease, **kwargs: Any) -> V1Lease: ...

    def replace_namespaced_lease(self, name: str, namespace: str, body: V1Lease, **kwargs: Any) -> V1Lease: ...


class LeaseConfigError(ValueError):
    """Lease timings that cannot give exclusive leadership."""


@dataclass(frozen=True)
class LeaseConfig:
    """Which Lease, who we are, and the timings (seconds; client-go's defaults 15 / 10 / 2)."""

    name: str
    namespace: str
    identity: str
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    min_margin_s: float = 2.0  # lease_duration_s - renew_deadline_s must be at least this
    request_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        for key in ("name", "namespace", "identity"):
            if not getattr(self, key):
                raise LeaseConfigError(f"lease {key}: must not be empty")
        if self.lease_duration_s < 1 or self.lease_duration_s != int(self.lease_duration_s):
            raise LeaseConfigError(
                f"lease_duration_s: {self.lease_duration_s} is not accepted; a whole number of seconds >= 1 "
                "(the Lease stores leaseDurationSeconds as an integer)"
            )
        margin = self.lease_duration_s - self.renew_deadline_s
        if margin < max(self.min_margin_s, 0.1 * self.lease_duration_s):
            raise LeaseConfigError(
                f"renew_deadline_s: {self.renew_deadline_s} leaves {margin:g} s before lease_duration_s "
                f"{self.lease_duration_s:g}; need at least max(min_margin_s {self.min_margin_s:g}, 10% of the "
                "lease) for clock-rate differences and request latency"
            )
        if not 0 < self.retry_period_s < self.renew_deadline_s:
            raise LeaseConfigError(
                f"retry_period_s: {self.retry_period_s} is not accepted; 0 < retry_period_s < renew_deadline_s "
                f"({self.renew_deadline_s:g}), so a leader retries a failed renewal before it must step down"
            )


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class LeaderElector:
    """One candidate: `try_acquire_or_renew()` once per retry period; `is_leader()` before acting as leader.

    `clock` is monotonic seconds (judges expiry and the renew deadline); `wall` gives the timestamps written into
    the Lease (acquireTime, renewTime: for people and tools reading it, not for the decision).
    """

    def __init__(
        self,
        api: LeaseApi,
        config: LeaseConfig,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = _utc_now,
    ) -> None:
        self.api, self.config, self.clock, self.wall = api, config, clock, wall
        self._leader = False
        self._renewed_at = -float("inf")  # monotonic time we sent the last renewal that succeeded
        self._observed_version: str | None = None
        self._observed_at = -float("inf")  # monotonic time we first saw _observed_version
        self.holder: str | None = None  # holder as last observed (None: absent or released)
        self.transitions = 0  # leaseTransitions as last observed
        self.term = 0  # how many times we became leader: a changed term means others may have led meanwhile

    def is_leader(self) -> bool:
        """True while we hold the Lease and our last successful renewal is within the renew deadline."""
        if self._leader and self.clock() - self._renewed_at >= self.config.renew_deadline_s:
            self._step_down("renew deadline passed")
        return self._leader

    def try_acquire_or_renew(self) -> bool:
        """One attempt: create, take over or renew the Lease. Returns whether we lead afterwards.

        A failed attempt (conflict, API error) keeps a leader leading until its renew deadline passes.
        """
        cfg, sent = self.config, self.clock()
        try:
            lease = self.api.read_namespaced_lease(cfg.name, cfg.namespace, _request_timeout=cfg.request_timeout_s)
        except ApiException as err:
            if err.status != NOT_FOUND:
                return self._failed(f"read: {err.status} {err.reason}")
            return self._create(sent)
        except Exception as err:  # network errors from urllib3 and the like
            return self._failed(f"read: {err}")

        spec = lease.spec or V1LeaseSpec()
        version = lease.metadata.resource_version
        if version != self._observed_version:  # seen *after* the response came: never earlier than it changed
            self._observed_version, self._observed_at = version, self.clock()
        self.holder, self.transitions = spec.holder_identity or None, spec.lease_transitions or 0
        ours = spec.holder_identity == cfg.identity
        duration = spec.lease_duration_seconds or cfg.lease_duration_s
        if not ours and self.holder is not None and self.clock() - self._observed_at < duration:
            if self._leader:
                self._step_down(f"the lease is held by {self.holder}")
            return False
        return self._write(lease, spec, ours, sent)

    def release(self) -> bool:
        """Give the Lease up if we hold it (shutdown): no holder, 1 s duration. Returns whether it was released."""
        if not self._leader:
            return False
        cfg = self.config
        self._leader = False
        try:
            lease = self.api.read_namespaced_lease(cfg.name, cfg.namespace, _request_timeout=cfg.request_timeout_s)
            spec = lease.spec or V1LeaseSpec()
            if spec.holder_identity != cfg.identity:
                return False
            now = self.wall()
            lease.spec = V1LeaseSpec(
                holder_identity=None,
                lease_duration_seconds=1,
                acquire_time=now,
                renew_time=now,
                lease_transitions=spec.lease_transitions or 0,
            )
            self.api.replace_namespaced_lease(cfg.name, cfg.namespace, lease, _request_timeout=cfg.request_timeout_s)
        except Exception as err:
            log.warning("lease %s/%s: release failed (%s); it expires by itself", cfg.namespace, cfg.name, err)
            return False
        log.info("lease %s/%s: released by %s", cfg.namespace, cfg.name, cfg.identity)
        return True

    def _create(self, sent: float) -> bool:
        cfg, now = self.config, self.wall()
        body = V1Lease(
            metadata=V1ObjectMeta(name=cfg.name, namespace=cfg.namespace),
            spec=V1LeaseSpec(
                holder_identity=cfg.identity,
                lease_duration_seconds=int(cfg.lease_duration_s),
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            ),
        )
        try:
            created = self.api.create_namespaced_lease(cfg.namespace, body, _request_timeout=cfg.request_timeout_s)
        except ApiException as err:  # 409 AlreadyExists: another candidate created it first
            return self._failed(f"create: {err.status} {err.reason}")
        except Exception as err:
            return self._failed(f"create: {err}")
        return self._won(created, sent)

    def _write(self, lease: V1Lease, spec: V1LeaseSpec, ours: bool, sent: float) -> bool:
        cfg, now = self.config, self.wall()
        # Renewing keeps acquireTime and the transition count; taking over (from another holder, a released or
        # an expired lease, or our own record from before a restart) starts a new term.
        renewing = ours and self._leader
        lease.spec = V1LeaseSpec(
            holder_identity=cfg.identity,
            lease_duration_seconds=int(cfg.lease_duration_s),
            acquire_time=spec.acquire_time if renewing else now,
            renew_time=now,
            lease_transitions=(spec.lease_transitions or 0) + (0 if ours else 1),
        )
        try:  # lease.metadata carries the resourceVersion we read: a stale one gets 409
            written = self.api.replace_namespaced_lease(
                cfg.name, cfg.namespace, lease, _request_timeout=cfg.request_timeout_s
            )
        except ApiException as err:
            return self._failed(f"update: {err.status} {err.reason}")
        except Exception as err:
            return self._failed(f"update: {err}")
        return self._won(written, sent)

    def _won(self, lease: V1Lease, sent: float) -> bool:
        self._observed_version, self._observed_at = lease.metadata.resource_version, self.clock()
        self.holder, self.transitions = self.config.identity, lease.spec.lease_transitions or 0
        self._renewed_at = sent
        if not self._leader:
            self._leader = True
            self.term += 1
            log.info(
                "lease %s/%s: %s became leader (transitions %d)",
                self.config.namespace,
                self.config.name,
                self.config.identity,
                self.transitions,
            )
        return True

    def _failed(self, why: str) -> bool:
        log.debug("lease %s/%s: %s", self.config.namespace, self.config.name, why)
        return self.is_leader()

    def _step_down(self, why: str) -> None:
        self._leader = False
        log.warning(
            "lease %s/%s: %s stepped down: %s", self.config.namespace, self.config.name, self.config.identity, why
        )


class LeaderLoop:
    """A daemon thread calling `try_acquire_or_renew` every retry period; `on_change(leading)` on transitions.

    `stop()` ends the thread and releases the Lease if we hold it.
    """

    def __init__(self, elector: LeaderElector, on_change: Callable[[bool], None] | None = None) -> None:
        self.elector, self.on_change = elector, on_change
        self._stop = threading.Event()
        self._leading = False
        self._thread = threading.Thread(target=self._run, name="windjoin-leader-election", daemon=True)

    def is_leader(self) -> bool:
        return self.elector.is_leader()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                leading = self.elector.try_acquire_or_renew()
            except Exception:  # never let the thread die: a dead renewer would look like a live leader
                log.exception("leader election attempt failed")
                leading = self.elector.is_leader()
            if leading != self._leading:
                self._leading = leading
                if self.on_change is not None:
                    self.on_change(leading)
            self._stop.wait(self.elector.config.retry_period_s)

    def start(self) -> LeaderLoop:
        self._thread.start()
        return self

    def stop(self) -> bool:
        """Stop renewing and release the Lease; returns whether it was released."""
        self._stop.set()
        self._thread.join(timeout=self.elector.config.request_timeout_s * 3)
        released = self.elector.release()
        if self._leading and self.on_change is not None:
            self._leading = False
            self.on_change(False)
        return released


def kube_lease_api() -> Any:
    """CoordinationV1Api for this pod's service account (in cluster) or the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CoordinationV1Api()
