"""The join job's view of the controller: its latest recorded decision as a control target."""

from __future__ import annotations

import orjson

from windjoin.connectors.control_decisions import DecisionStore
from windjoin.pipelines.control_epoch import ControlTarget, SpillRequest
from windjoin.pipelines.controller import state_from_fields


class DecisionFeed:
    """Reads the latest decision of a namespace from Redis (one small HGETALL per planned batch)."""

    def __init__(self, url: str, namespace: str = "windjoin") -> None:
        self.store = DecisionStore(url, namespace, socket_timeout=2.0)

    def latest(self) -> ControlTarget | None:
        fields = self.store.latest()
        if fields is None:
            return None
        state, _ = state_from_fields(fields)
        spill = fields.get("spill")  # optional: a decision without it asks for no push or clean-up
        request = SpillRequest.from_json(orjson.loads(spill)) if spill else None
        return ControlTarget(state.routing, state.shed_ratio, request)
