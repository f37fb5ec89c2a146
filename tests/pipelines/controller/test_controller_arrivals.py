"""The controller measuring utilisation by arrivals (real Redis): tau is the records appended to the input topics
per second since the previous decided epoch, whatever the job's load reports say it took."""

from __future__ import annotations

import uuid

import pytest

from windjoin.connectors.redis.control_decisions import DecisionStore
from windjoin.connectors.redis.load_reports import LoadReports
from windjoin.operators.control.config import parse_control_config
from windjoin.pipelines.controller.control_loop import Controller
from windjoin.pipelines.job.join_job import BatchOutcome
from windjoin.pipelines.job.load_publisher import LoadPublisher

CONFIG = {
    "utilisation": {"tau1": 0.6, "tau2": 1.0, "tau_star": 0.3, "capacity": 1000, "measure": "arrivals"},
    "reorganisation": {"th_sup": 0.99, "th_con": 0.0},
}


def _outcome(batch_id: int, joined: int, shed: int) -> BatchOutcome:
    stats = [
        {"slot": s, "slot_index": s, "rows": joined, "joined": joined, "seconds": 0.5, "shed": {"R": shed}}
        for s in range(2)
    ]
    return BatchOutcome(batch_id, stats=stats, finished_at=100.0 + batch_id)


def test_tau_is_the_arrival_rate_between_decided_epochs(redis_url):
    namespace = f"t{uuid.uuid4().hex[:8]}"
    reports, decisions = LoadReports(redis_url, namespace), DecisionStore(redis_url, namespace)
    publisher = LoadPublisher(reports, trigger_s=1.0)
    now, arrived = [0.0], [5_000]
    controller = Controller(
        reports, decisions, parse_control_config(CONFIG), 4, 2, clock=lambda: now[0], arrivals=lambda: arrived[0]
    )
    try:
        for b in range(4):  # the job took 2 x 3000 per 1 s batch (a backlog), 1800 arrived per second
            publisher(_outcome(b, 3000, 0))
        now[0], arrived[0] = 4.0, 5_000 + 4 * 1800
        first = controller.step()
        assert first is not None and first.decision.tau == pytest.approx(0.9)  # 1800 / 2 / 1000
        assert first.decision.state.shed_ratio == pytest.approx(0.75)
        now[0] = 6.0  # nothing new published: no epoch, and the reading is not taken
        assert controller.step() is None
        publisher(_outcome(4, 100, 300))
        now[0], arrived[0] = 8.0, arrived[0] + 4 * 500
        calm = controller.step()
        assert calm is not None and calm.decision.tau == pytest.approx(0.25)  # 2000 arrived over 4 s
        assert calm.decision.state.shed_ratio == 0.0 and calm.shed == 600
    finally:
        reports.client.delete(reports.key, decisions.latest_key, decisions.stream_key)
        reports.close()
        decisions.close()
