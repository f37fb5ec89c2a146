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
entry that fails `operators.control.load_entry_check` is skipped, with its id and the reason, and read past.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from windjoin.connectors.redis.client import RedisAuth, redis_client
from windjoin.operators.control.load_entries import LoadEntry
from windjoin.operators.control.load_entry_check import ReportBounds, ReportRefused, check_entry
from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE, check_namespace

UNBOUNDED = ReportBounds()  # any partition and slot number
DEFAULT_MAXLEN = 10_000  # batches kept: hours at a 1 s trigger, far more than one control epoch needs


def load_key(namespace: str = DEFAULT_NAMESPACE) -> str:
    """The stream of load reports (see the module docstring)."""
    return f"{check_namespace(namespace)}:{{control}}:load"


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
