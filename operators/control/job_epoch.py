"""The control epoch a batch runs under: routing table, announced next routing, shed ratio.

The controller's decisions are data (ARCHITECTURE.md): the source's driver side writes the epoch into the batch's
end offset, so a batch replayed after a crash routes and sheds exactly as the first time.

A partition's *holders* are its slot, or the k slots of its spread (SplitJoin: each tuple stored at one,
probed at all, so a pair is found once, where its earlier tuple is stored). A change of holders takes two
batches, so that handed-over state is complete before anyone needs it:
  1. *announce*: the batch still routes by the current table and carries the next one as `pending`; each slot
     losing a partition joins its tuples of this batch, then hands its stored share over (writes it to the move
     store) and forgets it; the partition's home slot, if it stays while others join, hands over its positions
     (arrival counts, event-time high mark) so every holder numbers arrivals alike (lateness follows the batch's
     watermark, the same at every slot);
  2. *effective*: the next batch routes by the new table; a new holder installs the positions, and the new home
     slot the handed-over tuples, before joining the partition's first new tuple.
Every stored tuple stays stored at exactly one slot and every tuple probes all holders, so no pair is lost or
produced twice. The source forces the effective batch even when no new record arrived.

Holders are per *unit* (`RoutingTable.groups`): a whole partition, or a mini-group of a split one (paper 000's
fine tuning). Old and new units of a partition nest (extendible hashing), so comparing two tables piece by piece
over their common refinement (the finer of each overlapping pair) says which tuples change holders; a piece is
the unit of hand-over. A split or merge that keeps every piece on its slot changes no holder and is adopted at
once. Spreads stay whole-partition: a split partition cannot be spread (refused here).

Disk pushes and clean-ups (paper 004, `pipelines.job.slot_spill`) are decided like routing: a `SpillRequest` of the
controller (a version, partitions to push, partitions to clean up) is copied into exactly one batch's epoch, the
first planned after it is recorded (`spill_version` remembers the last one taken, so it is never taken twice);
every later epoch carries no push or clean-up until a newer request. A pushed or cleaned partition must be whole
and keep its one holder in that batch (a split, spread or moving partition is refused here).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from windjoin.operators.control.memory import SpillRequest
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.spec import JoinSpec
from windjoin.operators.spec_support import refusals

Holders = tuple[int, ...]


@dataclass(frozen=True)
class ControlEpoch:
    routing: RoutingTable
    shed_ratio: float = 0.0
    pending: RoutingTable | None = None  # announced in this batch, effective in the next
    spill: tuple[int, ...] = ()  # partitions whose holder pushes their stored tuples to disk after this batch
    cleanup: tuple[int, ...] = ()  # partitions whose generations are merged (missing pairs emitted) in this batch
    spill_version: int = 0  # the last SpillRequest taken into an epoch

    def __post_init__(self) -> None:
        self._check_spill()
        for table in (self.routing, self.pending):
            both = table is not None and {g.partition for g, _ in table.split} & {p for p, _ in table.spread}
            if both:
                raise ValueError(
                    f"routing version {table.version} spreads split partition(s) {sorted(both)}: a spread stores "
                    "and probes a whole partition, merge its mini-groups first"
                )

    def _check_spill(self) -> None:
        asked = sorted(set(self.spill) | set(self.cleanup))
        if not asked:
            return
        bad = [p for p in asked if not 0 <= p < self.routing.partitions]
        if bad:
            raise ValueError(f"spill/cleanup: partition(s) {bad} out of range 0..{self.routing.partitions - 1}")
        split = {g.partition for g, _ in self.routing.split} | {p for p, _ in self.routing.spread}
        moving = {g.partition for g in self.changes()}
        refused = sorted(set(asked) & (split | moving))
        if refused:
            raise ValueError(
                f"spill/cleanup of partition(s) {refused}: only a whole partition with one holder that keeps it in "
                "this batch can be pushed or cleaned up (not a split, spread or moving one)"
            )

    def changes(self) -> dict[Group, tuple[Holders, Holders]]:
        """Pieces whose holders the announced routing changes: piece -> (holders now, holders next)."""
        return {} if self.pending is None else holder_changes(self.routing, self.pending)

    def slots(self) -> int:
        """Slots that hold a unit now or after the announced change."""
        top = 0
        for table in [self.routing] + ([self.pending] if self.pending else []):
            split = {g.partition for g, _ in table.split}  # their slot_of entries are unused
            whole = (s for p, s in enumerate(table.slot_of) if p not in split)
            top = max(top, *whole, *(s for _, s in table.split), *(s for _, ss in table.spread for s in ss))
        return 1 + top

    def to_json(self) -> dict[str, Any]:
        return {
            "routing": self.routing.to_json(),
            "shed_ratio": self.shed_ratio,
            "pending": None if self.pending is None else self.pending.to_json(),
            "spill": list(self.spill),
            "cleanup": list(self.cleanup),
            "spill_version": self.spill_version,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> ControlEpoch:
        pending = data.get("pending")
        return ControlEpoch(
            RoutingTable.from_json(data["routing"]),
            float(data["shed_ratio"]),
            None if pending is None else RoutingTable.from_json(pending),
            tuple(int(p) for p in data.get("spill", ())),
            tuple(int(p) for p in data.get("cleanup", ())),
            int(data.get("spill_version", 0)),
        )


@dataclass(frozen=True)
class ControlTarget:
    """What the controller last decided: the routing table it wants, the shed ratio, its last spill request."""

    routing: RoutingTable
    shed_ratio: float
    spill: SpillRequest | None = None


class ControlFeed(Protocol):
    def latest(self) -> ControlTarget | None: ...


def next_epoch(current: ControlEpoch, target: ControlTarget | None) -> ControlEpoch:
    """The epoch of the batch after one run under `current`, steering towards `target`: the routing step, plus
    the target's spill request if it is newer than the last one taken (else no push and no clean-up)."""
    epoch = _routing_step(replace(current, spill=(), cleanup=()), target)
    request = target.spill if target is not None else None
    if request is None or request.version <= current.spill_version:
        return replace(epoch, spill=(), cleanup=(), spill_version=current.spill_version)
    if epoch.changes():  # the request waits for the hand-over to complete (taken by a later epoch)
        return replace(epoch, spill=(), cleanup=(), spill_version=current.spill_version)
    return replace(epoch, spill=request.spill, cleanup=request.cleanup, spill_version=request.version)


def _routing_step(current: ControlEpoch, target: ControlTarget | None) -> ControlEpoch:
    if current.pending is not None:
        promoted = ControlEpoch(current.pending, spill_version=current.spill_version)
        return replace(promoted, shed_ratio=target.shed_ratio if target else current.shed_ratio)
    if target is None:
        return current
    if target.routing.version <= current.routing.version:
        return replace(current, shed_ratio=target.shed_ratio)
    if holder_changes(current.routing, target.routing):
        return ControlEpoch(
            current.routing, target.shed_ratio, pending=target.routing, spill_version=current.spill_version
        )
    # no tuple changes holders (a split or merge in place, or moves that cancel out): nothing to hand over
    return ControlEpoch(target.routing, target.shed_ratio, spill_version=current.spill_version)


def check_spillable(spec: JoinSpec) -> None:
    """Refuse disk pushes and clean-ups for what they do not support (`spec_support`, by the spec's shape: a
    tracked task's refusal is the controller's, which never asks it)."""
    why = refusals(spec, "spill").shape
    if why:
        raise ValueError("spill/cleanup: disk pushes are not supported for this spec: " + "; ".join(why))


def unit_holders(table: RoutingTable) -> dict[Group, Holders]:
    """Every unit of `table` with its holders (a spread partition's slots, else its one slot)."""
    return {g: table.holders(g.partition) if g.depth == 0 else (slot,) for g, slot in table.groups().items()}


def pieces(old: dict[Group, Holders], new: dict[Group, Holders]) -> dict[Group, tuple[Holders, Holders]]:
    """The common refinement of two unit tilings: each overlapping (old, new) pair's finer group, with its
    holders in each. Groups of partitions only one side tiles are left out."""
    by_part: dict[int, list[tuple[Group, Holders]]] = {}
    for g, h in old.items():
        by_part.setdefault(g.partition, []).append((g, h))
    out = {}
    for b, new_h in new.items():
        for a, old_h in by_part.get(b.partition, []):
            if a.covers(b) or b.covers(a):
                out[b if a.covers(b) else a] = (old_h, new_h)
    return out


def holder_changes(old: RoutingTable, new: RoutingTable) -> dict[Group, tuple[Holders, Holders]]:
    """Pieces (see `pieces`) whose holders differ between two tables: piece -> (old holders, new holders)."""
    return {g: (a, b) for g, (a, b) in pieces(unit_holders(old), unit_holders(new)).items() if a != b}
