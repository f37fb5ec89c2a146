"""The control epoch a batch runs under: routing table, announced next routing, shed ratio.

The controller's decisions are data (ARCHITECTURE.md): the source's driver side writes the epoch into the batch's
end offset, so a batch replayed after a crash routes and sheds exactly as the first time.

A partition's *holders* are its slot, or the k slots of its spread (SplitJoin: each tuple stored at one,
probed at all, so a pair is found once, where its earlier tuple is stored). A change of holders takes two
batches, so that handed-over state is complete before anyone needs it:
  1. *announce*: the batch still routes by the current table and carries the next one as `pending`; each slot
     losing a partition joins its tuples of this batch, then hands its stored share over (writes it to the move
     store) and forgets it; the partition's home slot, if it stays while others join, hands over its positions
     (event-time high mark) so every holder judges lateness alike;
  2. *effective*: the next batch routes by the new table; a new holder installs the positions, and the new home
     slot the handed-over tuples, before joining the partition's first new tuple.
Every stored tuple stays stored at exactly one slot and every tuple probes all holders, so no pair is lost or
produced twice. The source forces the effective batch even when no new record arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from windjoin.operators.partitioning import RoutingTable


@dataclass(frozen=True)
class ControlEpoch:
    routing: RoutingTable
    shed_ratio: float = 0.0
    pending: RoutingTable | None = None  # announced in this batch, effective in the next

    def changes(self) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
        """Partitions whose holders the announced routing changes: partition -> (holders now, holders next)."""
        return {} if self.pending is None else holder_changes(self.routing, self.pending)

    def slots(self) -> int:
        """Slots that hold a partition now or after the announced change."""
        tables = [self.routing] + ([self.pending] if self.pending else [])
        return 1 + max(s for table in tables for p in range(table.partitions) for s in table.holders(p))

    def to_json(self) -> dict[str, Any]:
        return {
            "routing": _table_json(self.routing),
            "shed_ratio": self.shed_ratio,
            "pending": None if self.pending is None else _table_json(self.pending),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> ControlEpoch:
        pending = data.get("pending")
        return ControlEpoch(
            _table(data["routing"]), float(data["shed_ratio"]), None if pending is None else _table(pending)
        )


@dataclass(frozen=True)
class ControlTarget:
    """What the controller last decided: the routing table it wants and the shed ratio."""

    routing: RoutingTable
    shed_ratio: float


class ControlFeed(Protocol):
    def latest(self) -> ControlTarget | None: ...


def next_epoch(current: ControlEpoch, target: ControlTarget | None) -> ControlEpoch:
    """The epoch of the batch after one run under `current`, steering towards `target`."""
    if current.pending is not None:
        promoted = ControlEpoch(current.pending)
        return replace(promoted, shed_ratio=target.shed_ratio if target else current.shed_ratio)
    if target is None:
        return current
    if target.routing.version > current.routing.version and holder_changes(current.routing, target.routing):
        return ControlEpoch(current.routing, target.shed_ratio, pending=target.routing)
    return replace(current, shed_ratio=target.shed_ratio)


def holder_changes(old: RoutingTable, new: RoutingTable) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    return {p: (old.holders(p), new.holders(p)) for p in range(new.partitions) if old.holders(p) != new.holders(p)}


def _table_json(table: RoutingTable) -> dict[str, Any]:
    if table.split:
        raise ValueError("the Spark job moves whole partitions only: mini-group routing is not supported there")
    return {
        "version": table.version,
        "slot_of": list(table.slot_of),
        "spread": [[p, list(slots)] for p, slots in table.spread],
    }


def _table(data: dict[str, Any]) -> RoutingTable:
    spread = tuple((int(p), tuple(int(s) for s in slots)) for p, slots in data.get("spread", []))
    return RoutingTable(int(data["version"]), tuple(int(s) for s in data["slot_of"]), (), spread)
