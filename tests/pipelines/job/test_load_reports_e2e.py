"""Load reports of a real run (Kafka → Spark → Redis load stream): per-partition reports add up to the slots' and to
what the run did (events in, pairs out), and each partition is reported by the slot the routing table gives it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from tests.pipelines.pipeline_helpers import keyed_eq_spec, produce_events
from windjoin.connectors.redis.client import redis_client
from windjoin.connectors.redis.load_reports import LoadReports
from windjoin.operators.control.load_entries import slot_batches
from windjoin.operators.partitioning import partition_of
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import oracle_join
from windjoin.pipelines.job.join_job import BatchOutcome, start_job
from windjoin.pipelines.job.load_publisher import LoadPublisher


@pytest.mark.slow
def test_group_reports_add_up_to_slots_events_and_pairs(spark, kafka_bootstrap, redis_url, unique_topic, tmp_path):
    spec_dict = {**keyed_eq_spec(unique_topic, tmp_path), "partitions": 8, "max_offsets_per_trigger": 150}
    t0 = 1_700_000_000_000
    keys = [0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 9, 11]  # skewed: key 0 three times as often as the others
    events = [
        {"stream": "RS"[i % 2], "ts": t0 + i, "k": keys[(i * 7) % len(keys)], "x" if i % 2 == 0 else "a": i}
        for i in range(1200)
    ]
    produce_events(kafka_bootstrap, spec_dict, events)
    expected_pairs, late = oracle_join(spec_dict, events)
    assert not late

    reports = LoadReports(redis_url, namespace=f"t{uuid.uuid4().hex[:8]}")
    publisher = LoadPublisher(reports, trigger_s=0.0)
    outcomes: list[BatchOutcome] = []

    def on_batch(outcome: BatchOutcome) -> None:
        outcomes.append(outcome)
        publisher(outcome)

    spec = parse_spec(spec_dict)
    query = start_job(spark, spec, kafka_bootstrap, [], available_now=True, on_batch=on_batch)
    query.awaitTermination(timeout=600)
    assert query.exception() is None
    try:
        assert len(outcomes) >= 2  # several batches: 1200 records at 150 offsets per trigger and topic partition
        for outcome in outcomes:
            for stat in outcome.stats:
                groups = stat["groups"]
                assert sum(groups["tuples_in"]) == stat["joined"]
                assert sum(groups["outputs"]) == stat["outputs"]
                assert sum(groups["window_tuples"]) == stat["window_tuples"]
                assert sum(groups["state_bytes"]) == stat["state_bytes"] > 0
                assert sum(groups["seconds"]) == pytest.approx(stat["seconds"], rel=1e-9)
                assert sum(groups["cpu"]) == pytest.approx(stat["cpu_seconds"], rel=1e-9)
                # keyed streams: every row in counts in one mini-bits bin of its partition
                assert [sum(bins) for bins in groups["fine_in"]] == groups["tuples_in"]
                # round robin: partition p on slot p mod 2
                assert all(p % 2 == stat["slot_index"] for p in groups["part"]), (stat["slot_index"], groups)
            assert sum(s["outputs"] for s in outcome.stats) == sum(outcome.pairs.values())

        batches = slot_batches(reports.read())
        assert sorted({b.batch_id for b in batches}) == [o.batch_id for o in outcomes]
        assert sum(g.tuples_in for b in batches for g in b.groups.values()) == len(events)
        assert sum(g.outputs for b in batches for g in b.groups.values()) == len(expected_pairs)
        assert sum(b.total.outputs for b in batches) == len(expected_pairs)
        by_part: dict[int, int] = {}
        for b in batches:
            for g, load in b.groups.items():
                by_part[g.partition] = by_part.get(g.partition, 0) + load.tuples_in
        assert by_part == _tuples_per_partition(spec, events)
    finally:
        reports.client.delete(reports.key)
        reports.close()


def _tuples_per_partition(spec, events: list[dict]) -> dict[int, int]:
    """Independently of the job: each event's partition from the key's hash."""
    parts = partition_of(np.asarray([e["k"] for e in events], dtype=np.int64), spec.partitions)
    values, counts = np.unique(parts, return_counts=True)
    return {int(v): int(c) for v, c in zip(values, counts, strict=True)}


@pytest.mark.slow
def test_windjoin_run_publishes_and_the_controller_decides_on_it(kafka_bootstrap, redis_url, unique_topic, tmp_path):
    """The real commands: `windjoin run --available-now` with a Redis sink publishes its batches' load, then
    `windjoin controller --once` decides one epoch over all of it. Redis database 11 is this test's own."""
    url = redis_url.rsplit("/", 1)[0] + "/11"
    client = redis_client(url)
    client.flushdb()
    spec = {
        **keyed_eq_spec(unique_topic, tmp_path),
        "partitions": 8,
        "max_offsets_per_trigger": 100,
        "sinks": {"redis": {"url": url}},
    }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))
    t0 = 1_700_000_000_000
    events = [{"stream": "RS"[i % 2], "ts": t0 + i, "k": i % 6, "x" if i % 2 == 0 else "a": i} for i in range(600)]
    produce_events(kafka_bootstrap, spec, events)
    script = Path(sys.executable).with_name("windjoin")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "windjoin.pipelines"]
    try:
        run = subprocess.run(
            [*cli, "run", str(spec_path), "--available-now", "--bootstrap", kafka_bootstrap],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        reports = LoadReports(url)
        entries = reports.read()
        reports.close()
        batch_ids = sorted({e.batch_id for e in entries})
        assert len(batch_ids) >= 2
        assert sum(g.tuples_in for b in slot_batches(entries) for g in b.groups.values()) == len(events)
        config = tmp_path / "control.yaml"
        config.write_text(json.dumps({"utilisation": {"capacity": 1000.0}}))
        done = subprocess.run(
            [*cli, "controller", str(spec_path), "--once", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"epoch 1: {len(batch_ids)} batches, ")
        recorded = client.hgetall("windjoin:{control}:decision")
        assert recorded[b"epoch"] == b"1" and recorded[b"load_cursor"] == entries[-1].entry_id.encode()
        assert set(json.loads(recorded[b"occupancy"])) == {"0", "1"}
    finally:
        client.flushdb()
        client.close()
