"""The join job's per-batch load reports in Redis: written by the job's driver, read by the controller.

Layout (`ns` is the namespace, default "windjoin", as for the result keys; `{control}` is a Redis Cluster hash
tag shared by the control keys):

- `ns:{control}:load` - stream, one entry per committed batch (auto id, so its time part is the publish time),
  fields `batch_id`, `finished_at` (driver wall clock, s), `interval_s` (the batch's wall-clock span, for busy
  occupancy) and `slots`: a JSON array of slot reports `{"slot": index, "label", "rows", "joined", "dead",
  "outputs", "window_tuples", "state_bytes", "seconds", "groups": {"part": [...], "tuples_in": [...], ...}}`
  (groups as columns, see `operators.control.slot_load`; `fine` holds a histogram per partition). Capped with
  `MAXLEN ~ maxlen`.

A batch replayed after a failure is reported again; readers keep the latest report of each (batch, slot). An
entry that fails `connectors.load_entry_check` is skipped, with its id and the reason, and read past.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from windjoin.connectors.load_entry_check import ReportBounds, ReportRefused, check_entry
from windjoin.connectors.redis_client import RedisAuth, redis_client
from windjoin.connectors.redis_namespace import DEFAULT_NAMESPACE, check_namespace
from windjoin.operators.control.load import Load, SlotBatch
from windjoin.operators.partitioning import Group

UNBOUNDED = ReportBounds()  # any partition and slot number
DEFAULT_MAXLEN = 10_000  # batches kept: hours at a 1 s trigger, far more than one control epoch needs


def load_key(namespace: str = DEFAULT_NAMESPACE) -> str:
    """The stream of load reports (see the module docstring)."""
    return f"{check_namespace(namespace)}:{{control}}:load"


@dataclass(frozen=True)
class LoadEntry:
    """One batch's load report as read back from the stream."""

    entry_id: str
    batch_id: int
    finished_at: float
    interval_s: float
    slots: list[dict[str, Any]]


@dataclass(frozen=True)
class LoadRead:
    """What a read found after a cursor: the good entries, the skipped ones' (entry id, reason), and the id of
    the newest entry read, good or not (None when there was none): the cursor to read on from."""

    entries: list[LoadEntry]
    skipped: list[tuple[str, str]]
    last_id: str | None


class LoadReports:
    """Publish and read the load stream of one namespace."""

    def __init__(
        self,
        url: str,
        namespace: str = DEFAULT_NAMESPACE,
        maxlen: int = DEFAULT_MAXLEN,
        socket_timeout: float = 10.0,
        auth: RedisAuth | None = None,
    ) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen must be >= 1, got {maxlen}")
        self.key = load_key(namespace)
        self.maxlen = maxlen
        self.client = redis_client(url, auth, socket_timeout=socket_timeout)

    def close(self) -> None:
        self.client.close()

    def publish(self, batch_id: int, finished_at: float, interval_s: float, slots: Sequence[dict[str, Any]]) -> str:
        """Append one batch's slot reports; returns the entry id."""
        fields = {
            "batch_id": int(batch_id),
            "finished_at": repr(float(finished_at)),
            "interval_s": repr(float(interval_s)),
            "slots": orjson.dumps(list(slots)),
        }
        return self.client.xadd(self.key, fields, maxlen=self.maxlen, approximate=True).decode()

    def read(self, after: str = "0-0", count: int | None = None) -> list[LoadEntry]:
        """The good entries published after entry id `after` (exclusive), oldest first."""
        return self.scan(after, count).entries

    def scan(self, after: str = "0-0", count: int | None = None, bounds: ReportBounds = UNBOUNDED) -> LoadRead:
        """Entries published after entry id `after` (exclusive), oldest first, each checked within `bounds`."""
        raw = self.client.xrange(self.key, min=f"({after}" if after != "0-0" else "-", max="+", count=count)
        entries, skipped = [], []
        for entry_id, fields in raw:
            try:
                entries.append(LoadEntry(entry_id.decode(), *check_entry(fields, bounds)))
            except ReportRefused as refused:
                skipped.append((entry_id.decode(), str(refused)))
        return LoadRead(entries, skipped, raw[-1][0].decode() if raw else None)

    def last_id(self) -> str:
        """The newest entry's id ("0-0" for an empty stream): a cursor that skips everything published so far."""
        newest = self.client.xrevrange(self.key, count=1)
        return newest[0][0].decode() if newest else "0-0"


def slot_batches(entries: Iterable[LoadEntry]) -> list[SlotBatch]:
    """The controller's view of load entries: one SlotBatch per (batch, slot), the latest report winning (a
    replayed batch is reported twice), groups as whole partitions."""
    latest: dict[tuple[int, int], SlotBatch] = {}
    for entry in entries:
        for report in entry.slots:
            groups = report.get("groups") or {}
            seconds = groups.get("seconds", [])
            columns = zip(
                groups.get("part", []),
                groups.get("tuples_in", []),
                seconds,
                groups.get("state_bytes", []),
                groups.get("outputs", []),
                groups.get("cpu", seconds),  # reports from before the cpu column: wall seconds stand in
                strict=True,
            )
            batch = SlotBatch(
                entry.batch_id,
                int(report["slot"]),
                entry.interval_s,
                Load(
                    tuples_in=int(report.get("joined", 0)),
                    processing_s=float(report.get("seconds", 0.0)),
                    backlog=int(report.get("backlog", 0)),
                    state_bytes=int(report.get("state_bytes", 0)),
                    outputs=int(report.get("outputs", 0)),
                    cpu_s=float(report.get("cpu_seconds", 0.0)),
                ),
                {Group(int(p)): Load(int(n), float(s), 0, int(b), int(o), float(c)) for p, n, s, b, o, c in columns},
            )
            latest[(entry.batch_id, batch.slot)] = batch
    return [latest[k] for k in sorted(latest)]


def shed_records(entries: Iterable[LoadEntry]) -> int:
    """Records the adapter shed in these batches, over all slots and streams (a replayed batch's latest report
    counts once, as in `slot_batches`)."""
    latest: dict[tuple[int, int], int] = {}
    for entry in entries:
        for report in entry.slots:
            latest[(entry.batch_id, int(report["slot"]))] = sum(int(n) for n in (report.get("shed") or {}).values())
    return sum(latest.values())


def fine_histograms(entries: Iterable[LoadEntry]) -> dict[int, np.ndarray]:
    """Each partition's window tuples by mini bits (the reports' `fine` column), as of the latest batch that
    reported it, summed over the slots holding a share of it (its mini-groups may sit on several slots; a
    replayed batch's latest report per slot wins). Reports without the column give nothing."""
    latest: dict[tuple[int, int], dict[int, list[int]]] = {}
    for entry in entries:
        for report in entry.slots:
            groups = report.get("groups") or {}
            if "fine" in groups:
                fine = {int(p): f for p, f in zip(groups["part"], groups["fine"], strict=True)}
                latest[(entry.batch_id, int(report["slot"]))] = fine
    newest: dict[int, int] = {}
    for (batch, _), parts in latest.items():
        for p in parts:
            newest[p] = max(newest.get(p, batch), batch)
    out: dict[int, np.ndarray] = {}
    for (batch, _), parts in latest.items():
        for p, counts in parts.items():
            if newest[p] == batch:
                hist = np.asarray(counts, dtype=np.float64)
                out[p] = out[p] + hist if p in out else hist
    return out


def fine_work(entries: Iterable[LoadEntry]) -> dict[int, np.ndarray]:
    """Each partition's join work by mini bits over the entries' batches: per bin, rows in (`fine_in`) times the
    window tuples they met (`fine`), the probes' candidates as if each bin held one key, summed over batches and
    the slots holding a share (a replayed batch's latest report per slot wins). Partitions without rows in, or
    reports without the column, give nothing."""
    latest: dict[tuple[int, int], dict[int, np.ndarray]] = {}
    for entry in entries:
        for report in entry.slots:
            groups = report.get("groups") or {}
            if "fine_in" in groups:
                columns = zip(groups["part"], groups["fine"], groups["fine_in"], strict=True)
                work = {int(p): np.asarray(f, np.float64) * np.asarray(n, np.float64) for p, f, n in columns}
                latest[(entry.batch_id, int(report["slot"]))] = work
    out: dict[int, np.ndarray] = {}
    for parts in latest.values():
        for p, work in parts.items():
            out[p] = out[p] + work if p in out else work
    return {p: work for p, work in out.items() if work.sum() > 0}
