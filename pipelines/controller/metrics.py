"""The controller's Prometheus metrics, set from each epoch's decision, in a registry of their own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server

if TYPE_CHECKING:
    from windjoin.pipelines.controller.control_loop import EpochOutcome

SUPPLIER, NEUTRAL, CONSUMER = 1, 0, -1  # windjoin_controller_slot_class values


class ControllerMetrics:
    """Epoch, routing version, desired slots, shed ratio, utilisation; per slot occupancy and class; moves;
    malformed load reports skipped; failed epochs; whether this replica leads."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.epoch = Gauge("windjoin_controller_epoch", "Last control epoch decided.", registry=r)
        self.batches = Gauge("windjoin_controller_epoch_batches", "Batches the last epoch's load covered.", registry=r)
        self.routing_version = Gauge(
            "windjoin_controller_routing_version", "Version of the routing table decided last.", registry=r
        )
        self.slots = Gauge("windjoin_controller_desired_slots", "Slots (workers) the controller wants.", registry=r)
        self.shed_ratio = Gauge("windjoin_controller_shed_ratio", "Shed ratio decided for the next epoch.", registry=r)
        self.utilisation = Gauge(
            "windjoin_controller_utilisation", "Average utilisation tau over the last epoch (S2J).", registry=r
        )
        self.occupancy = Gauge(
            "windjoin_controller_slot_occupancy",
            "A slot's average occupancy over the last epoch.",
            ["slot"],
            registry=r,
        )
        self.slot_class = Gauge(
            "windjoin_controller_slot_class",
            "A slot's class in the last epoch: 1 supplier, 0 neutral, -1 consumer.",
            ["slot"],
            registry=r,
        )
        self.moves = Counter("windjoin_controller_moves", "Group moves decided.", registry=r)
        self.skipped_reports = Counter(
            "windjoin_controller_load_reports_skipped",
            "Load report entries skipped as malformed (each logged with its id and the reason).",
            registry=r,
        )
        self.failed_epochs = Counter(
            "windjoin_controller_epochs_failed",
            "Epochs whose load reports gave no decision (each logged and recorded with the reason).",
            registry=r,
        )
        self.hot = Gauge(
            "windjoin_controller_hot_slots", "Suppliers holding a single group in the last epoch.", registry=r
        )
        self.leader = Gauge(
            "windjoin_controller_leader",
            "1 while this replica runs epochs (holds the Lease, or runs without leader election), else 0.",
            registry=r,
        )

    def observe(self, outcome: EpochOutcome) -> None:
        state = outcome.decision.state
        self.epoch.set(state.epoch)
        self.batches.set(outcome.batches)
        self.routing_version.set(state.routing.version)
        self.slots.set(state.slots)
        self.shed_ratio.set(state.shed_ratio)
        self.utilisation.set(outcome.decision.tau)
        self.moves.inc(len(outcome.decision.moves))
        self.hot.set(len(outcome.decision.hot))
        for slot, value in outcome.occupancy.items():
            self.occupancy.labels(str(slot)).set(value)
            kind = (
                SUPPLIER
                if slot in outcome.classes.suppliers
                else CONSUMER
                if slot in outcome.classes.consumers
                else NEUTRAL
            )
            self.slot_class.labels(str(slot)).set(kind)

    def failed_epoch(self, epoch: int, reason: str) -> None:
        """Count one failed epoch (the control loop logs and records its reason)."""
        self.failed_epochs.inc()

    def skipped_report(self, entry_id: str, reason: str) -> None:
        """Count one skipped load report entry (the control loop logs its id and reason)."""
        self.skipped_reports.inc()

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        """Serve /metrics on `port` from a background thread; returns (server, thread)."""
        return start_http_server(port, addr=addr, registry=self.registry)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
