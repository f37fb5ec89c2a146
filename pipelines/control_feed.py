"""The join job's view of the controller: its latest recorded decision as a control target."""

from __future__ import annotations

from windjoin.connectors.control_decisions import DecisionStore
from windjoin.pipelines.control_epoch import ControlTarget
from windjoin.pipelines.controller import state_from_fields


class DecisionFeed:
    """Reads the latest decision of a namespace from Redis (one small HGETALL per planned batch)."""

    def __init__(self, url: str, namespace: str = "windjoin") -> None:
        self.store = DecisionStore(url, namespace, socket_timeout=2.0)

    def latest(self) -> ControlTarget | None:
        fields = self.store.latest()
        if fields is None:
            return None
        state, _ = state_from_fields(fields)  # a decision without `spill` asks for no push or clean-up
        return ControlTarget(state.routing, state.shed_ratio, state.spill)
