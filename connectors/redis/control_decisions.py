"""The controller's decisions in Redis: the latest one as a hash, every one in a capped stream.

Layout (`ns` as for the load reports, `{control}` the shared hash tag):

- `ns:{control}:decision` - hash, the latest decision's fields (strings; JSON for structured values), what a
  restarted controller resumes from and what the join job will read to apply a decision;
- `ns:{control}:decisions` - stream, one entry per decided epoch with the same fields, `MAXLEN ~ maxlen`.

Both are written in one MULTI/EXEC, so the hash and the stream never disagree on the latest epoch. The fields
are encoded and decoded here (`encode_decision`, `state_from_fields`, `recorded_moves`); groups in them take
their one JSON form (`Group.to_json`). The join job reads them strictly through `operators.control.decision_check`.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from windjoin.connectors.redis.client import RedisAuth, redis_client
from windjoin.operators.control.declustering import UtilisationState
from windjoin.operators.control.epoch import Decision
from windjoin.operators.control.epoch_state import ControlState
from windjoin.operators.control.memory import SpillRequest
from windjoin.operators.control.reorganise import Classes
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE, check_namespace

DEFAULT_MAXLEN = 10_000


def decision_key(namespace: str = DEFAULT_NAMESPACE) -> str:
    return f"{check_namespace(namespace)}:{{control}}:decision"


def decisions_key(namespace: str = DEFAULT_NAMESPACE) -> str:
    return f"{check_namespace(namespace)}:{{control}}:decisions"


class DecisionStore:
    """Record and read the controller's decisions of one namespace."""

    def __init__(
        self,
        url: str,
        namespace: str = DEFAULT_NAMESPACE,
        maxlen: int = DEFAULT_MAXLEN,
        socket_timeout: float = 10.0,
        auth: RedisAuth | None = None,
    ) -> None:
        self.latest_key = decision_key(namespace)
        self.stream_key = decisions_key(namespace)
        self.maxlen = maxlen
        self.client = redis_client(url, auth, socket_timeout=socket_timeout)

    def close(self) -> None:
        self.client.close()

    def record(self, fields: Mapping[str, str | int | float]) -> str:
        """Make `fields` the latest decision (replacing the hash whole) and append it to the stream; the entry id."""
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self.latest_key)
        pipe.hset(self.latest_key, mapping=dict(fields))
        pipe.xadd(self.stream_key, dict(fields), maxlen=self.maxlen, approximate=True)
        return pipe.execute()[-1].decode()

    def latest(self) -> dict[str, str] | None:
        """The latest decision's fields, or None before the first."""
        raw = self.client.hgetall(self.latest_key)
        return {k.decode(): v.decode() for k, v in raw.items()} or None

    def history(self, after: str = "-", count: int | None = None) -> list[tuple[str, dict[str, str]]]:
        """(entry id, fields) of recorded decisions after entry id `after` (exclusive; "-" for all), oldest first."""
        low = after if after == "-" else f"({after}"
        return [
            (entry_id.decode(), {k.decode(): v.decode() for k, v in fields.items()})
            for entry_id, fields in self.client.xrange(self.stream_key, min=low, max="+", count=count)
        ]


def encode_decision(
    decision: Decision,
    occupancy: Mapping[int, float],
    classes: Classes,
    batches: int,
    shed: int,
    cursor: str,
    decided_at: float,
) -> dict[str, str | int | float]:
    """The recorded fields of a decision with the epoch's load it came from and the load cursor after it
    (`state_from_fields` reads the state and cursor back)."""
    state = decision.state
    # the latest disk request, in every decision until a newer one: the job takes each version once
    spill = {} if state.spill is None else {"spill": orjson.dumps(state.spill.to_json()).decode()}
    return {
        **spill,
        "forced_bytes": state.forced_bytes,
        "epoch": state.epoch,
        "routing_version": state.routing.version,
        "routing": routing_json(state.routing),
        "slots": state.slots,
        "shed_ratio": repr(state.shed_ratio),
        "tau": repr(decision.tau),
        "sustained_above": state.sustained.above,
        "sustained_below": state.sustained.below,
        "moves": orjson.dumps([[*m.group.to_json(), m.source, m.target] for m in decision.moves]).decode(),
        "hot": orjson.dumps(list(decision.hot)).decode(),
        "held": orjson.dumps([g.to_json() for g in decision.held]).decode(),
        "moved_at": orjson.dumps([[*g.to_json(), e] for g, e in sorted(state.moved_at.items())]).decode(),
        "over_streak": orjson.dumps({str(s): n for s, n in sorted(state.over_streak.items())}).decode(),
        "slot_moved_at": orjson.dumps({str(s): e for s, e in sorted(state.slot_moved_at.items())}).decode(),
        "occupancy": orjson.dumps({str(s): f for s, f in occupancy.items()}).decode(),
        "suppliers": orjson.dumps(list(classes.suppliers)).decode(),
        "consumers": orjson.dumps(list(classes.consumers)).decode(),
        "batches": batches,
        "shed": shed,
        "load_cursor": cursor,
        "decided_at": repr(decided_at),
    }


def routing_json(routing: RoutingTable) -> str:
    """A routing table as recorded in a decision (`state_from_fields` reads it back)."""
    return orjson.dumps(routing.to_json()).decode()


def state_from_fields(fields: Mapping[str, str]) -> tuple[ControlState, str]:
    """The control state and load cursor of a recorded decision."""
    table = RoutingTable.from_json({**orjson.loads(fields["routing"]), "version": fields["routing_version"]})
    sustained = UtilisationState(int(fields["sustained_above"]), int(fields["sustained_below"]))
    spill = SpillRequest.from_json(orjson.loads(fields["spill"])) if fields.get("spill") else None
    state = ControlState(
        int(fields["epoch"]),
        table,
        int(fields["slots"]),
        float(fields["shed_ratio"]),
        sustained,
        spill,
        int(fields.get("forced_bytes", 0)),
        # decisions recorded before damping carry neither: nothing held, no streak
        {Group.from_json(g): e for *g, e in orjson.loads(fields.get("moved_at", "[]"))},
        {int(s): int(n) for s, n in orjson.loads(fields.get("over_streak", "{}")).items()},
        {int(s): int(e) for s, e in orjson.loads(fields.get("slot_moved_at", "{}")).items()},
    )
    return state, fields["load_cursor"]


def recorded_moves(fields: Mapping[str, str]) -> list[tuple[Group, int, int]]:
    """(group, source slot, target slot) of a recorded decision's moves."""
    return [(Group.from_json(group), src, dst) for *group, src, dst in orjson.loads(fields["moves"])]
