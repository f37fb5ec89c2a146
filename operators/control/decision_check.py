"""The join job's check of a recorded controller decision before it steers anything.

Whatever a decision hash holds (a bug, a mix-up of namespaces, a writer that should not be there) must not make
the job shed every record, route to slots that do not exist or roll routing back. A decision is decoded here,
beside its store (`connectors.redis.control_decisions`), strictly: it is refused, with a reason, when:
- `schema`: a field is missing or not of its type (ints, JSON of the routing table and the spill request), or a
  version is outside 0..MAX_VERSION (executors and offsets carry it as a signed 64-bit int; an epoch of 10^4000
  would refuse every later decision as older);
- `shed_ratio`: the ratio is not a plain decimal number within [0, 1];
- `routing`: the table does not place every partition of the job exactly once (its units tile each partition)
  on a slot the job has, splits a partition deeper than MAX_SPLIT_DEPTH (routing allocates 2^depth entries per
  split partition), or a spill request names a partition it does not have;
- `version`: the routing version, the epoch or the spill request's version is below one already accepted;
- `unsupported`: it spreads a partition or pushes state to disk for a job that cannot cut state so
  (`exact_pairs_only`, from `operators.spec_support`): outer, semi or anti tasks would not see a spread partition's
  probe-only copies or pushed generations pair, as-of tasks keep a key's versions at one slot, and some window kinds
  do not allow it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from windjoin.operators.control.finetune import FINE_DEPTH
from windjoin.operators.control.job_epoch import ControlTarget
from windjoin.operators.control.memory import SpillRequest
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.plain_numbers import plain_float, plain_int

REASONS = ("schema", "shed_ratio", "routing", "version", "unsupported")
MAX_VERSION = 2**63 - 1  # epoch, routing and spill versions: signed 64-bit ints in executors and offsets
# The controller splits at most FINE_DEPTH (4) bits deep (fine_tuning.max_depth <= FINE_DEPTH); twice that leaves
# room for a finer histogram while a split partition's routing directory stays at most 2^8 entries.
MAX_SPLIT_DEPTH = 2 * FINE_DEPTH
_NON_FINITE = re.compile(r"[+-]?(nan|inf|infinity)", re.IGNORECASE)


class DecisionRefused(ValueError):
    """A decision the job will not apply; `reason` is one of REASONS (the metric's label)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Accepted:
    """The versions of the last decision accepted, below which no later one may go."""

    epoch: int = -1
    routing_version: int = -1
    spill_version: int = -1


def check_decision(
    fields: Mapping[str, str],
    partitions: int,
    slots: int,
    accepted: Accepted = Accepted(),
    exact_pairs_only: bool = False,
) -> tuple[ControlTarget, Accepted]:
    """The control target of a recorded decision and its versions, or DecisionRefused naming what is wrong."""
    epoch = _int(fields, "epoch")
    version = _int(fields, "routing_version")
    ratio = _shed_ratio(fields)
    routing = _routing(fields, version, partitions, slots)
    spill = _spill(fields, partitions)
    if exact_pairs_only and (routing.spread or (spill is not None and spill.spill)):
        raise DecisionRefused(
            "unsupported",
            "the job cannot cut a partition's tuples over slots or onto disk (outer, semi or anti tasks see every pair "
            "of the tuples they remember; as-of tasks keep a key's versions at one slot; count, tumbling and hopping "
            "windows do not allow it: operators/spec_support); accepted: decisions without routing.spread and "
            "spill.spill (moves and splits are fine)",
        )
    spill_version = accepted.spill_version if spill is None else spill.version  # no request: nothing to compare
    for name, new, old in (
        ("epoch", epoch, accepted.epoch),
        ("routing_version", version, accepted.routing_version),
        ("spill version", spill_version, accepted.spill_version),
    ):
        if new < old:
            raise DecisionRefused("version", f"{name} {new} is below {old}, already applied; versions only grow")
    return ControlTarget(routing, ratio, spill), Accepted(epoch, version, spill_version)


def _int(fields: Mapping[str, str], key: str) -> int:
    raw = fields.get(key)
    value = plain_int(raw)  # ASCII digits only (int() takes "1_0", " 1", "١" and 4000 digits)
    if value is None:
        raise DecisionRefused("schema", f"field {key!r} must be a whole number in 0..{MAX_VERSION}, got {raw!r}")
    return _version(value, key)


def _version(value: int, what: str) -> int:
    if not 0 <= value <= MAX_VERSION:
        raise DecisionRefused("schema", f"{what} must be within 0..{MAX_VERSION}, got {value}")
    return value


def _shed_ratio(fields: Mapping[str, str]) -> float:
    raw = fields.get("shed_ratio")
    ratio = plain_float(raw)  # float() would also take "0.2_5", " 0.5 " or "١"
    if ratio is None and isinstance(raw, str) and _NON_FINITE.fullmatch(raw):
        ratio = math.nan
    if ratio is None:
        raise DecisionRefused(
            "schema", f"field 'shed_ratio' must be a number in decimals such as 0.25 (no '_' or spaces), got {raw!r}"
        )
    if not math.isfinite(ratio) or not 0.0 <= ratio <= 1.0:
        raise DecisionRefused("shed_ratio", f"shed_ratio {raw!r} is not within [0, 1]")
    return ratio


def _json(fields: Mapping[str, str], key: str) -> Any:
    try:
        return orjson.loads(fields[key])
    except KeyError:
        raise DecisionRefused("schema", f"field {key!r} is missing") from None
    except orjson.JSONDecodeError as err:
        raise DecisionRefused("schema", f"field {key!r} is not JSON ({err})") from None


def _ints(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise DecisionRefused("schema", f"{what} must be a list of whole numbers, got {value!r}")
    return value


def _routing(fields: Mapping[str, str], version: int, partitions: int, slots: int) -> RoutingTable:
    data = _json(fields, "routing")
    if not isinstance(data, dict):
        raise DecisionRefused("schema", f"field 'routing' must be a JSON object, got {data!r}")
    slot_of = _ints(data.get("slot_of"), "routing.slot_of")
    split = [_ints(entry, "a routing.split entry") for entry in _list(data, "split")]
    spread = _list(data, "spread")
    if any(len(entry) != 4 for entry in split):
        raise DecisionRefused("schema", "routing.split entries are [partition, depth, pattern, slot]")
    if any(not isinstance(e, list) or len(e) != 2 or not isinstance(e[0], int) for e in spread):
        raise DecisionRefused("schema", "routing.spread entries are [partition, [slot, ...]]")
    for _, holders in spread:
        _ints(holders, "a routing.spread entry's slots")
    if len(slot_of) != partitions:
        raise DecisionRefused("routing", f"routing.slot_of places {len(slot_of)} partitions, the job has {partitions}")
    _bounded(split, spread, partitions)
    used = [*slot_of, *(e[3] for e in split), *(s for _, ss in spread for s in ss)]
    outside = sorted({s for s in used if not 0 <= s < slots})
    if outside:
        raise DecisionRefused("routing", f"slot(s) {outside} outside the job's slots 0..{slots - 1}")
    try:
        table = RoutingTable.from_json({**data, "version": version})
        table.check_tiling(set(table.groups()))
        split_parts = {g.partition for g, _ in table.split}
        if len({g for g, _ in table.split}) != len(table.split) or any(not 0 <= p < partitions for p in split_parts):
            raise ValueError("a mini-group is placed twice or belongs to no partition")
        if split_parts & {p for p, _ in table.spread}:
            raise ValueError("a split partition is also spread")
        if any(not 0 <= p < partitions for p, _ in table.spread):
            raise ValueError("a spread partition is outside the job's partitions")
    except (ValueError, IndexError) as err:
        raise DecisionRefused("routing", f"routing version {version}: {err}") from None
    return table


def _bounded(split: list[list[int]], spread: list[Any], partitions: int) -> None:
    """Refuse shapes no controller makes before anything is allocated for them."""
    deep = sorted({depth for _, depth, _, _ in split if not 0 <= depth <= MAX_SPLIT_DEPTH})
    if deep:
        raise DecisionRefused(
            "routing", f"routing.split depth(s) {deep[:5]} outside the accepted range 0..{MAX_SPLIT_DEPTH}"
        )
    most = partitions << MAX_SPLIT_DEPTH
    if len(split) > most:
        raise DecisionRefused("routing", f"routing.split has {len(split)} mini-groups; accepted: at most {most}")
    spread_parts = [p for p, _ in spread]
    if len(set(spread_parts)) != len(spread_parts):
        raise DecisionRefused("routing", "routing.spread lists a partition twice; accepted: each at most once")


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise DecisionRefused("schema", f"routing.{key} must be a list, got {value!r}")
    return value


def _spill(fields: Mapping[str, str], partitions: int) -> SpillRequest | None:
    if not fields.get("spill"):
        return None
    data = _json(fields, "spill")
    if not isinstance(data, dict) or not isinstance(data.get("version"), int) or isinstance(data["version"], bool):
        raise DecisionRefused("schema", f"field 'spill' must be {{version, spill, cleanup}}, got {data!r}")
    _version(data["version"], "spill.version")
    spill, cleanup = _ints(data.get("spill", []), "spill.spill"), _ints(data.get("cleanup", []), "spill.cleanup")
    for name, listed in (("spill.spill", spill), ("spill.cleanup", cleanup)):
        if len(listed) > partitions:
            raise DecisionRefused("schema", f"{name} lists {len(listed)} partitions; accepted: at most {partitions}")
    asked = spill + cleanup
    outside = sorted({p for p in asked if not 0 <= p < partitions})
    if outside:
        raise DecisionRefused("routing", f"spill request names partition(s) {outside}, the job has 0..{partitions - 1}")
    return SpillRequest.from_json(data)
