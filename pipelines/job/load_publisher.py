"""The driver's side of the load reports: each committed batch's per-slot stats, published for the controller."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import redis

from windjoin.connectors.redis.load_reports import LoadReports

if TYPE_CHECKING:
    from windjoin.pipelines.job.join_job import BatchOutcome

log = logging.getLogger(__name__)

# "shed": records the adapter shed, per stream (the controller adds them back to the offered load); "spill": the
# slot's generations on disk and the last spill request it took (the controller's memory adaptation)
REPORT_KEYS = (
    "rows",
    "joined",
    "dead",
    "outputs",
    "window_tuples",
    "state_bytes",
    "seconds",
    "cpu_seconds",
    "groups",
    "shed",
    "spill",
)


def slot_reports(outcome: BatchOutcome) -> list[dict[str, Any]]:
    """One report per slot, by slot index (`slot_index`, else the grouping key), ordered by slot. Its `backlog`
    is its share of the records left waiting in the topics, by its share of the batch's tuples (the waiting
    records are not routed yet; the same keys go on arriving where they did)."""
    joined = sum(int(s.get("joined", 0)) for s in outcome.stats)
    reports = [
        {
            "slot": int(s.get("slot_index", s["slot"])),
            "label": int(s["slot"]),
            **{k: s[k] for k in REPORT_KEYS if k in s},
            "backlog": round(outcome.waiting * int(s.get("joined", 0)) / joined) if joined else 0,
        }
        for s in outcome.stats
    ]
    return sorted(reports, key=lambda r: r["slot"])


class LoadPublisher:
    """Called with every BatchOutcome on the driver: publishes its slot reports with the batch's interval.

    The interval is the wall clock since the previous batch finished, at least the trigger interval (a batch
    cannot start sooner); the first batch counts the trigger interval or its slowest slot, whichever is longer.
    Reports are advisory: a Redis error is logged and the batch goes on (its report is lost).
    """

    def __init__(self, reports: LoadReports, trigger_s: float) -> None:
        self.reports = reports
        self.trigger_s = trigger_s
        self.previous: float | None = None

    def __call__(self, outcome: BatchOutcome) -> str | None:
        slots = slot_reports(outcome)
        if self.previous is None:
            interval = max(self.trigger_s, max((r.get("seconds", 0.0) for r in slots), default=0.0))
        else:
            interval = max(self.trigger_s, outcome.finished_at - self.previous)
        self.previous = outcome.finished_at
        try:
            return self.reports.publish(outcome.batch_id, outcome.finished_at, interval, slots)
        except redis.RedisError as err:
            log.warning("load report of batch %d not published: %s", outcome.batch_id, err)
            return None
