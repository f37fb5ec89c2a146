"""The controller tests' skewed load (16 partitions round robin on 4 slots), its control configuration, load
reports published to Redis under a namespace, and a spec file for the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from windjoin.connectors.redis.load_reports import LoadReports
from windjoin.pipelines.job.join_job import BatchOutcome
from windjoin.pipelines.job.load_publisher import LoadPublisher

PARTITIONS, SLOTS = 16, 4
# Busy seconds per 1 s batch: slot 0 a supplier, 1 and 3 consumers (1 the idlest), 2 neutral.
BUSY = {0: 0.95, 1: 0.10, 2: 0.60, 3: 0.30}
TUPLES = {0: 400, 1: 40, 2: 248, 3: 112}  # per slot and batch: 800 in all, tau = 800 / 4 / capacity
CONFIG = {
    "scaling": "declustering",  # N_sup = 1 is not > beta * N_con = 0.5 * 2: the slot count stays
    "reorganisation": {"th_sup": 0.8, "th_con": 0.5, "seed": 7},
    "utilisation": {"capacity": 220.0, "tau1": 0.8, "tau2": 0.9},  # tau = 200 / 220 = 0.909...
    "shedding": {"base": 0.1},
}


def skewed_outcome(batch_id: int) -> BatchOutcome:
    """One batch of a round-robin assignment (partition p on slot p mod 4), the load skewed by BUSY/TUPLES."""
    stats = []
    for slot in range(SLOTS):
        parts = list(range(slot, PARTITIONS, SLOTS))
        tuples = [TUPLES[slot] // len(parts)] * len(parts)
        stats.append(
            {
                "slot": 100 + slot,  # Spark's grouping key: not the index
                "slot_index": slot,
                "rows": sum(tuples),
                "joined": sum(tuples),
                "outputs": 0,
                "seconds": BUSY[slot],
                "window_tuples": 10 * sum(tuples),
                "state_bytes": 160 * sum(tuples),
                "groups": {
                    "part": parts,
                    "tuples_in": tuples,
                    "outputs": [0] * len(parts),
                    "seconds": [BUSY[slot] / len(parts)] * len(parts),
                    "window_tuples": [10 * n for n in tuples],
                    "state_bytes": [160 * n for n in tuples],
                },
            }
        )
    return BatchOutcome(batch_id, stats=stats, finished_at=1000.0 + batch_id)


def publish(redis_url: str, namespace: str, batch_ids: range) -> None:
    reports = LoadReports(redis_url, namespace)
    publisher = LoadPublisher(reports, trigger_s=1.0)
    for b in batch_ids:
        assert publisher(skewed_outcome(b)) is not None
    reports.close()


def spec_file(tmp_path: Path, redis_url: str) -> Path:
    spec = {
        "window": {"kind": "time", "size_ms": 1000},
        "streams": {"R": {"fields": {"k": "int"}, "key": "k"}, "S": {"fields": {"k": "int"}, "key": "k"}},
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": PARTITIONS,
        "slots": SLOTS,
        "sinks": {"redis": {"url": redis_url}},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec))
    return path
