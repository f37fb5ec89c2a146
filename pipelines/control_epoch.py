"""The control epoch a batch runs under: routing table, announced next routing, shed ratio.

The controller's decisions are data (ARCHITECTURE.md): the source's driver side writes the epoch into the batch's
end offset, so a batch replayed after a crash routes and sheds exactly as the first time.

A routing change takes two batches, so that a moved group's state is complete before anyone needs it:
  1. *announce*: the batch still routes by the current table and carries the next one as `pending`; each slot
     losing a group joins the group's tuples of this batch, then hands its window state over (writes it to the
     move store) and forgets it;
  2. *effective*: the next batch routes by the new table; a slot receiving a group installs the handed-over
     state before joining the group's first new tuple.
Each group is joined at exactly one slot in every batch and its state is never in two places, so no pair is
lost or produced twice. The source forces the effective batch even when no new record arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from windjoin.operators.partitioning import Group, RoutingTable


@dataclass(frozen=True)
class ControlEpoch:
    routing: RoutingTable
    shed_ratio: float = 0.0
    pending: RoutingTable | None = None  # announced in this batch, effective in the next

    def moves(self) -> dict[Group, tuple[int, int]]:
        """Groups the announced routing moves: group -> (source slot, target slot)."""
        return {} if self.pending is None else self.pending.moves_from(self.routing)

    def slots(self) -> int:
        """Slots that hold a group now or after the announced change."""
        tables = [self.routing] + ([self.pending] if self.pending else [])
        return 1 + max(s for table in tables for s in table.groups().values())

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
    if target.routing.version > current.routing.version and target.routing.moves_from(current.routing):
        return ControlEpoch(current.routing, target.shed_ratio, pending=target.routing)
    return replace(current, shed_ratio=target.shed_ratio)


def _table_json(table: RoutingTable) -> dict[str, Any]:
    if table.split:
        raise ValueError("the Spark job moves whole partitions only: mini-group routing is not supported there")
    return {"version": table.version, "slot_of": list(table.slot_of)}


def _table(data: dict[str, Any]) -> RoutingTable:
    return RoutingTable(int(data["version"]), tuple(int(s) for s in data["slot_of"]))
