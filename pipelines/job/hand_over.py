"""Holder changes at a slot: install what was handed over to it, hand over what leaves it, check what it gets.

Holder changes (`operators.control.job_epoch`) move *pieces*: whole partitions or mini-groups of split ones. A slot
holding some mini-groups of partition p keeps just their tuples in its one WindowJoin for p, which is exact
because keyed tasks are equi-joins on the key, so tuples of different mini-groups never pair. A mini-group's
stored rows are picked out at hand-over by recomputing their key hash from the stored key column. Positions
handed over carry p's arrival counts (count windows number arrivals per partition) and its event-time high mark.
A partition with pushed generations cannot move.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from windjoin.connectors.redis.move_store import MovedGroup, MoveStore
from windjoin.operators.control.job_epoch import ControlEpoch, Holders, pieces, unit_holders
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.segment_store import SegmentStore
from windjoin.pipelines.job.slot_meta import HeldJson, SlotMeta, group_of, held_json
from windjoin.pipelines.job.slot_windows import SlotWindows
from windjoin.pipelines.job.stored_rows import segment_schema, stored_mini_bits


class HandOver:
    """A slot's side of holder changes, through the job's move store (`connectors.redis.move_store`)."""

    def __init__(
        self, spec: JoinSpec, initial_routing: RoutingTable, move_root: str | None, segments: SegmentStore
    ) -> None:
        self.spec = spec
        self.initial_routing = initial_routing  # where each slot's units start out (the first epoch routes by it)
        self.move_root = move_root
        self.segments = segments

    def _move_store(self) -> MoveStore:
        if self.move_root is None:
            raise RuntimeError("partition moves need a move store: build JoinProcessor with move_root")
        return MoveStore(self.move_root)

    def held(self, index: int, meta: SlotMeta) -> dict[Group, Holders]:
        """The units (or pieces, after a hand-over) this slot holds state of, each with the holders it last saw."""
        if meta.held is None:  # first batch of this slot: it holds what the first epoch routes to it
            meta.held = dict(_units_at(self.initial_routing, index)[1])
        return meta.held_groups()

    def install(self, index: int, meta: SlotMeta, windows: SlotWindows, epoch: ControlEpoch) -> list[Group]:
        """Before joining: take up what was handed over of each unit of this slot that gained holders or pieces.
        The slot installs the positions of every hand-over it reads (so it judges lateness like the others);
        a unit's home slot (its first holder) also installs the tuples the leaving holders stored. A unit only
        re-cut on this slot (same pieces, same holders) needs nothing."""
        routing = epoch.routing
        mine, mine_json = _units_at(routing, index)
        if meta.held == mine_json:  # the steady case, every batch: no parsing
            return []
        held = self.held(index, meta)
        if mine == held:
            return []
        known = pieces(held, mine)  # what this slot held of its new units, with the holders it saw
        store, changed = None, []
        for unit, holders in sorted(mine.items()):
            here = {g: old for g, (old, _) in known.items() if unit.covers(g)}
            if _share(here) == _share([unit]) and all(old == holders for old in here.values()):
                continue
            store = store or self._move_store()
            handed = [m for m in store.get_all(routing.version, unit.partition) if unit.covers(m.group)]
            if _share(set(here) | {m.group for m in handed}) != _share([unit]):
                raise store.missing(routing.version, unit)
            windows.take_positions(meta, unit.partition, [m.positions for m in handed])
            if holders[0] == index:
                # every holder handing over closed its tuples at the same batch watermark (all slots take it)
                closed = [m.positions.get("watermark") for m in handed]
                closed_at = min((w for w in closed if w is not None), default=None)
                self.segments.take_rows(meta, windows, unit.partition, [m.rows for m in handed], closed_at)
            changed.append(unit)
        meta.held = dict(mine_json)
        return changed

    def hand_over(self, index: int, meta: SlotMeta, windows: SlotWindows, epoch: ControlEpoch) -> list[Group]:
        """After joining the batch: for each piece the announced routing takes from this slot, write what this
        slot stored of it (with its positions) to the move store and forget it here; as the home slot of a
        piece gaining holders, write its positions."""
        changes = epoch.changes()
        leaving = sorted(g for g, (now, nxt) in changes.items() if index in now and index not in nxt)
        telling = sorted(
            g for g, (now, nxt) in changes.items() if now[0] == index and index in nxt and set(nxt) - set(now)
        )
        store = self._move_store() if leaving or telling else None
        schema = segment_schema(self.spec)
        for piece in telling:
            store.put(
                epoch.pending.version, index, MovedGroup(piece, schema.empty_table(), meta.positions(piece.partition))
            )
        if not leaving:
            return []
        spilled = sorted({g.partition for g in leaving if meta.pushed(str(g.partition))})
        if spilled:
            raise RuntimeError(
                f"slot {index} would hand over partition(s) {spilled} with generations pushed to disk: moving "
                "pushed generations is not supported, clean the partitions up before moving them"
            )
        held = pieces(self.held(index, meta), unit_holders(epoch.pending))
        kept = {g: old for g, (old, new) in held.items() if index in new}
        rows_by_piece, rests = self.segments.cut(meta, leaving)
        for piece in leaving:
            rows = pa.concat_tables(rows_by_piece[piece]) if rows_by_piece[piece] else schema.empty_table()
            store.put(epoch.pending.version, index, MovedGroup(piece, rows, meta.positions(piece.partition)))
        still = {g.partition for g in kept}
        for part in {g.partition for g in leaving}:
            if part in still:  # some of its mini-groups stay: rebuild its window from the rows left
                self.segments.rebuild(meta, windows, part, rests)
            else:
                windows.forget(meta, part)
        meta.held = held_json(kept)
        return leaving


def check_held(spec: JoinSpec, index: int, meta: SlotMeta, live: pa.Table) -> None:
    """Refuse a batch carrying tuples of units this slot does not hold: joining them would lose pairs."""
    if meta.held is None or not live.num_rows:
        return
    parts = live.column("part").to_numpy()
    held = {int(k.partition(".")[0]) for k in meta.held}
    stray = set(np.unique(parts).tolist()) - held
    minis = [group_of(k) for k in meta.held if "." in k]
    if minis:  # tuples of a partition this slot holds only some mini-groups of: theirs?
        rows = np.flatnonzero(np.isin(parts, [g.partition for g in minis]))
        bits = stored_mini_bits(spec, live.take(pa.array(rows)))
        owned = np.zeros(len(rows), dtype=bool)
        for g in minis:
            owned |= g.contains(parts[rows], bits)
        stray |= set(parts[rows][~owned].tolist())
    if stray:
        raise RuntimeError(
            f"slot {index} got tuples of partitions {sorted(stray)} (or of their mini-groups) whose state it does "
            "not hold: the routing and the handed-over state disagree, joining them would lose pairs"
        )


@functools.lru_cache(maxsize=8)
def _units_at(routing: RoutingTable, index: int) -> tuple[dict[Group, Holders], HeldJson]:
    """The units slot `index` holds under `routing` (and their `SlotMeta.held` form), cached: listing a large
    table's units costs ~0.1 s at 65536 partitions, and every batch asks (callers do not mutate them)."""
    mine = {g: h for g, h in unit_holders(routing).items() if index in h}
    return mine, held_json(mine)


def _share(groups: Iterable[Group]) -> float:
    """The fraction of a partition's hashes the (disjoint) groups cover."""
    return sum(2.0**-g.depth for g in groups)
