"""The join job's view of the controller: its latest recorded decision, checked, as a control target.

A decision that fails `decision_check` is refused with a log line and counted by reason; the job keeps steering
by the last good one. The source's driver side runs in a Python worker of its own, so the counts reach the job's
metrics through a small JSON file beside the checkpoint (`RefusalCounts`), read when /metrics is scraped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from windjoin.connectors.files.atomic_write import replace_whole
from windjoin.connectors.redis.client import RedisAuth
from windjoin.connectors.redis.control_decisions import DecisionStore
from windjoin.operators.control.decision_check import Accepted, DecisionRefused, check_decision
from windjoin.operators.control.job_epoch import ControlTarget
from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE

log = logging.getLogger(__name__)

# Spark source options carrying where the credentials are (never the password itself).
AUTH_OPTIONS = {
    "username": "windjoin.control.redis.username",
    "password_file": "windjoin.control.redis.password_file",
    "password_env": "windjoin.control.redis.password_env",
    "ca_file": "windjoin.control.redis.ca_file",
}
REFUSALS_OPTION = "windjoin.control.refusals"  # the RefusalCounts file


def auth_options(auth: RedisAuth | None) -> dict[str, str]:
    return {} if auth is None else {o: getattr(auth, k) for k, o in AUTH_OPTIONS.items() if getattr(auth, k)}


def auth_from_options(options: Mapping[str, str]) -> RedisAuth:
    """The credentials the options name, else the environment's (as every other client of the job)."""
    return RedisAuth(**{k: options.get(o) or None for k, o in AUTH_OPTIONS.items()}).or_env()


def refusals_path(spec: Any) -> str:
    """Where a job counts the decisions it refused: beside Spark's checkpoint, like the batches' marks."""
    return str(Path(spec.checkpoint).resolve() / "control-refusals.json")


class RefusalCounts:
    """Decisions refused so far, by reason, in a JSON file written atomically (the source writes, metrics read)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read(self) -> dict[str, int]:
        try:
            return {str(k): int(v) for k, v in orjson.loads(self.path.read_bytes()).items()}
        except (FileNotFoundError, orjson.JSONDecodeError, AttributeError, ValueError):
            return {}

    def add(self, reason: str) -> None:
        counts = self.read()
        counts[reason] = counts.get(reason, 0) + 1
        replace_whole(self.path, orjson.dumps(counts))


class DecisionFeed:
    """Reads the latest decision of a namespace from Redis (one small HGETALL per planned batch) and hands out
    the last one that passed `check_decision` for this job's `partitions` and `slots`.

    A decision is checked once, not every planned batch (the check walks every mini-group): the same fields
    refused before stay refused (the accepted versions only grow), and the same fields accepted before give the
    same target while nothing raised the accepted versions since."""

    def __init__(
        self,
        url: str,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        partitions: int,
        slots: int,
        auth: RedisAuth | None = None,
        refusals: RefusalCounts | None = None,
        exact_pairs_only: bool = False,
    ) -> None:
        self.store = DecisionStore(url, namespace, socket_timeout=2.0, auth=auth)
        self.exact_pairs_only = exact_pairs_only  # outer, semi or anti tasks: no spreads, no spill
        self.partitions, self.slots, self.refusals = partitions, slots, refusals
        self.good: ControlTarget | None = None
        self.accepted = Accepted()
        self._refused: dict[str, str] | None = None  # the last refused decision (each is counted once)
        self._checked: tuple[dict[str, str], Accepted] | None = None  # the good one's fields, the versions after

    def at_least(self, routing_version: int, spill_version: int) -> None:
        """No decision below these versions (those the job runs under) is accepted from now on."""
        a = self.accepted
        self.accepted = Accepted(a.epoch, max(a.routing_version, routing_version), max(a.spill_version, spill_version))

    def latest(self) -> ControlTarget | None:
        fields = self.store.latest()
        if fields is None or fields == self._refused or self._checked == (fields, self.accepted):
            return self.good
        try:
            target, accepted = check_decision(
                fields, self.partitions, self.slots, self.accepted, exact_pairs_only=self.exact_pairs_only
            )
        except DecisionRefused as refused:
            self._refused = fields
            log.warning(
                "control decision (epoch %r) refused, %s; keeping the last good one", fields.get("epoch"), refused
            )
            if self.refusals is not None:
                self.refusals.add(refused.reason)
            return self.good
        self.good, self.accepted, self._checked = target, accepted, (fields, accepted)
        return target
