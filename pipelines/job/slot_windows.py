"""A slot's decoded windows (one `WindowJoin` per hash partition), kept between batches and valid for one state version.

The windows stay cached in the Python worker between batches; the cache is used only while its nonce equals the
stored one, so a batch replayed after a failure (state rolled back) rebuilds from the segments instead of seeing
windows that already hold the failed attempt's tuples. Another worker of the machine finds them in the shared
window files (`window_cache`). Their positions (event-time high mark, arrival counts per partition) are kept in
the slot's meta, so a rebuild, a hand-over and a push all number arrivals alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from windjoin.operators.join import WindowJoin
from windjoin.operators.mjoin import join_operator
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.slot_meta import SlotMeta
from windjoin.pipelines.job.stored_rows import preload
from windjoin.pipelines.job.window_cache import WindowFiles


@dataclass
class SlotWindows:
    """A slot's decoded windows, one join per hash partition, valid for the state version `nonce`."""

    nonce: str
    joins: dict[int, WindowJoin] = field(default_factory=dict)
    # Per partition and stream, arrivals no longer held (expired before a rebuild): a store counts only what
    # it holds, the metadata counts every arrival, so count-window expiry stays in one numbering.
    forgotten: dict[int, dict[str, int]] = field(default_factory=dict)

    def join(self, spec: JoinSpec, part: int) -> WindowJoin:
        """Partition `part`'s window, empty if it has none yet."""
        if part not in self.joins:
            self.joins[part] = join_operator(spec)
        return self.joins[part]

    def recount(self, meta: SlotMeta, part: int) -> None:
        """What `part`'s window no longer holds of the arrivals the meta counts (after a rebuild or a hand-over)."""
        stores = self.joins[part].stores
        counts = meta.counts.get(str(part), {})
        self.forgotten[part] = {s: n - stores[s].count for s, n in counts.items()}

    def rebuild(self, spec: JoinSpec, meta: SlotMeta, part: int, rows: list[pd.DataFrame]) -> None:
        """Partition `part`'s window made anew of the rows this slot still stores of it (its positions kept)."""
        join = self.joins[part] = join_operator(spec)
        for rows_s in rows:  # segment by segment, in order: the window numbers its tuples as it takes them
            preload(spec, join, rows_s)
        if str(part) in meta.max_ts:
            join.advance_event_time(meta.max_ts[str(part)])
        self.recount(meta, part)

    def note_positions(self, meta: SlotMeta, part: int) -> None:
        """Record `part`'s positions after joining: its event-time high mark and every arrival so far."""
        join, forgotten = self.joins[part], self.forgotten.get(part, {})
        if join.max_event_ts is not None:
            meta.max_ts[str(part)] = join.max_event_ts
        meta.counts[str(part)] = {s: store.count + forgotten.get(s, 0) for s, store in join.stores.items()}

    def take_positions(self, spec: JoinSpec, meta: SlotMeta, part: int, positions: list[dict[str, Any]]) -> None:
        """Merge handed-over positions into this slot's: the larger event-time high mark and arrival counts."""
        key = str(part)
        join = self.join(spec, part)
        max_ts = [p["max_ts"] for p in positions if p["max_ts"] is not None]
        if key in meta.max_ts:
            max_ts.append(meta.max_ts[key])
        counts = dict(meta.counts.get(key, {}))
        for p in positions:
            for stream, n in p["counts"].items():
                counts[stream] = max(counts.get(stream, 0), n)
        if max_ts:
            meta.max_ts[key] = max(max_ts)
            join.advance_event_time(max(max_ts))
        meta.counts[key] = counts
        self.recount(meta, part)

    def forget(self, meta: SlotMeta, part: int) -> None:
        """Drop everything of `part`: its window and positions (it left this slot whole)."""
        meta.max_ts.pop(str(part), None)
        meta.counts.pop(str(part), None)
        self.joins.pop(part, None)
        self.forgotten.pop(part, None)


# Lives in an importable module (not __main__) so Python workers keep it between batches.
_CACHE: dict[int, SlotWindows] = {}


def cached_windows(slot: int, nonce: str, files: WindowFiles) -> SlotWindows | None:
    """The slot's windows at state version `nonce` if this worker or another one of the machine kept them."""
    cached = _CACHE.get(slot)
    if cached is not None and cached.nonce == nonce:
        return cached
    shared = files.load(slot, nonce)  # left by another worker on this machine
    if isinstance(shared, SlotWindows) and shared.nonce == nonce:
        return shared
    return None


def keep_windows(slot: int, windows: SlotWindows, files: WindowFiles) -> None:
    """Keep the windows for the slot's next batch, in this worker and for the others of the machine."""
    _CACHE[slot] = windows
    files.store(slot, windows.nonce, windows)
