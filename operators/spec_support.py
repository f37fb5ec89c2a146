"""What the job may do with a spec's state, answered in one place: cut a partition's tuples over slots by key
(mini-groups), spread one (stored at one slot, probed at several), push it to disk (spill), or pool partitions
in one window. Each answer is the list of reasons it may not (empty: it may), from the window kind
(`operators.windows`) and the tasks' shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from windjoin.operators.spec import AS_OF_TYPES, JoinSpec

Cut = Literal["split", "spread", "spill"]
# The controller's switches that cut state, and the cut each makes.
CONTROLLER_CUTS: dict[str, Cut] = {"hot.spread": "spread", "fine_tuning.enabled": "split", "memory.enabled": "spill"}


@dataclass(frozen=True)
class Refusals:
    """Why a cut may not be made: by the spec's shape (its window kind, n-way tasks) or by tasks that remember
    their tuples' pairs (outer, semi, anti). Empty: it may."""

    shape: list[str]
    tracking: list[str]

    def __bool__(self) -> bool:
        return bool(self.shape or self.tracking)

    def __str__(self) -> str:
        return "; ".join(self.shape + self.tracking)


def refusals(spec: JoinSpec, cut: Cut) -> Refusals:
    """Why the job may not make `cut` on this spec's state."""
    kind = spec.window
    shape = [reason] if (reason := getattr(kind, f"{cut}s")) else []
    wide = [t.name for t in spec.tasks if len(t.join) > 2]
    if wide:
        shape.append(
            {
                "split": f"n-way task(s) {wide} run MJoin, whose state hand-over is whole-partition only",
                "spread": f"n-way task(s) {wide}: a combination's earlier tuples may be stored at different slots",
                "spill": f"n-way task(s) {wide}: the clean-up emits two-stream pairs only",
            }[cut]
        )
    remembering = [t.name for t in spec.tasks if t.tracked]
    tracking = []
    if remembering and cut != "split":
        tracking.append(f"outer, semi or anti task(s) {remembering} must see every pair of the tuples they remember")
    as_of = [t.name for t in spec.tasks if t.type in AS_OF_TYPES]
    if as_of and cut != "split":
        tracking.append(f"as-of task(s) {as_of} keep each key's versions at the slot that holds the key")
    return Refusals(shape, tracking)


def keeps_partitions_whole(spec: JoinSpec) -> bool:
    """Whether the job must refuse spreads and disk pushes (the decisions that cut a partition's tuples)."""
    return bool(refusals(spec, "spread") or refusals(spec, "spill"))


def pooled(spec: JoinSpec) -> bool:
    """Whether a slot may hold its partitions in one window per stream (pairwise tasks, a kind that allows it)."""
    return spec.window.pooled and all(len(t.join) == 2 for t in spec.tasks)
