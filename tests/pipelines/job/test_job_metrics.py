"""The job's metrics: a batch outcome accounted for (outcomes built by hand, no Spark), and served by a real run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.pipelines.pipeline_helpers import keyed_eq_spec, produce_events
from windjoin.operators.batch_delays import Delays
from windjoin.pipelines.job.executor_scaling import executor_count
from windjoin.pipelines.job.job_metrics import DELAY_BUCKETS, JobMetrics
from windjoin.pipelines.job.join_job import BatchOutcome


def _outcome(batch_id: int, delays_ms: list[int]) -> BatchOutcome:
    return BatchOutcome(
        batch_id,
        pairs={"eq": 7, "band": 2},
        dead_by_reason={"late": 3, "wrong_type": 1},
        stats=[
            {"slot": 2, "rows": 100, "joined": 96, "segments": 4, "window_tuples": 900, "seconds": 0.4},
            {"slot": 0, "rows": 50, "joined": 50, "segments": 2, "window_tuples": 400, "seconds": 1.5},
        ],
        delays_ms=Delays.of(np.asarray(delays_ms, dtype=np.int64)),
        finished_at=1_700_000_000.5,
    )


def test_counters_add_up_over_batches_and_gauges_keep_the_last():
    m = JobMetrics()
    m.observe(_outcome(0, [100, 900, 2500]))
    m.observe(_outcome(1, [50_000]))
    value = m.registry.get_sample_value
    assert value("windjoin_job_input_rows_total", {"slot": "2"}) == 200
    assert value("windjoin_job_joined_rows_total", {"slot": "2"}) == 192
    assert value("windjoin_job_pairs_total", {"task": "eq"}) == 14
    assert value("windjoin_job_dead_letters_total", {"reason": "late"}) == 6
    assert value("windjoin_job_batches_total") == 2
    assert value("windjoin_job_batch_id") == 1
    assert value("windjoin_job_window_tuples", {"slot": "0"}) == 400
    assert value("windjoin_job_slot_batch_seconds_count", {"slot": "0"}) == 2
    assert value("windjoin_job_last_batch_timestamp_seconds") == 1_700_000_000.5


def test_control_metrics_shed_per_stream_from_zero_and_the_applied_epoch():
    counts = iter([1, 3])
    m = JobMetrics(streams=["R", "S"], tasks=["eq", "band"], executors=lambda: next(counts))
    value = m.registry.get_sample_value
    # pairs per task at 0 too: a job that joins its whole backlog in its first batch still shows a rate above 0
    assert value("windjoin_job_pairs_total", {"task": "band"}) == 0
    # before any batch: a series per stream at 0 (a labelled counter never incremented would export nothing)
    assert value("windjoin_job_shed_records_total", {"stream": "R"}) == 0
    assert value("windjoin_job_shed_records_total", {"stream": "S"}) == 0
    assert b'windjoin_job_shed_records_total{stream="S"} 0.0' in m.exposition()
    first = _outcome(0, [])
    first.shed, first.shed_ratio, first.routing_version = {"R": 40, "S": 2}, 0.25, 3
    m.observe(first)
    second = _outcome(1, [])
    second.shed, second.shed_ratio, second.routing_version = {"R": 10}, 0.1, 4
    m.observe(second)
    assert value("windjoin_job_shed_records_total", {"stream": "R"}) == 50
    assert value("windjoin_job_shed_records_total", {"stream": "S"}) == 2
    assert value("windjoin_job_shed_ratio") == 0.1 and value("windjoin_job_routing_version") == 4
    assert value("windjoin_job_executors") == 3


def test_executor_count_failing_keeps_the_last_value():
    calls = iter([2])

    def count() -> int:
        return next(calls)  # StopIteration the second time, like py4j failing while Spark stops

    m = JobMetrics(executors=count)
    m.observe(_outcome(0, []))
    m.observe(_outcome(1, []))
    assert m.registry.get_sample_value("windjoin_job_executors") == 2


class _Seq:
    """A Scala Seq as py4j shows it: size() and apply(i), not iterable."""

    def __init__(self, items: list[str]) -> None:
        self.items = items

    def size(self) -> int:
        return len(self.items)

    def apply(self, i: int) -> str:
        return self.items[i]


class _Context:
    def __init__(self, master: str, ids: list[str]) -> None:
        self.master = master
        jvm_sc = type("JvmSc", (), {"getExecutorIds": lambda _self: _Seq(ids)})()
        self._jsc = type("Jsc", (), {"sc": lambda _self: jvm_sc})()


def test_executor_count_is_the_registered_executors_or_1_on_a_local_master():
    assert executor_count(_Context("spark://127.0.0.1:7077", ["0", "1", "3"])) == 3
    assert executor_count(_Context("k8s://https://kubernetes.default.svc", [])) == 0
    assert executor_count(_Context("local[2]", [])) == 1


def test_delay_histogram_counts_every_pair_in_its_bucket():
    m = JobMetrics()
    delays = np.random.default_rng(1).integers(0, 400_000, 10_000)
    m.observe(_outcome(0, delays.tolist()))
    value = m.registry.get_sample_value
    assert value("windjoin_job_production_delay_seconds_count") == 10_000
    assert value("windjoin_job_production_delay_seconds_sum") == pytest.approx(delays.sum() / 1000)
    for bound in DELAY_BUCKETS:  # le semantics: a value equal to the bound is in the bucket
        expected = int((delays / 1000 <= bound).sum())
        assert value("windjoin_job_production_delay_seconds_bucket", {"le": f"{bound:g}"}) == expected
    assert value("windjoin_job_production_delay_seconds_bucket", {"le": "+Inf"}) == 10_000


def test_served_over_http():
    m = JobMetrics()
    m.observe(_outcome(5, [1000]))
    server, thread = m.serve(0, addr="127.0.0.1")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
        thread.join(5)
    assert "windjoin_job_batch_id 5.0" in body
    assert 'windjoin_job_production_delay_seconds_bucket{le="1"} 1.0' in body


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(url: str) -> dict[str, float]:
    """Sample name with labels → value, from a Prometheus text exposition."""
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


@pytest.mark.slow
def test_windjoin_run_serves_its_metrics_while_it_runs(kafka_bootstrap, unique_topic, tmp_path):
    """The real `windjoin run --metrics-port`, scraped over HTTP while it joins, then stopped (its process group)."""
    spec = keyed_eq_spec(unique_topic, tmp_path)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))
    t0 = 1_700_000_000_000
    events = [{"stream": "RS"[i % 2], "ts": t0 + i, "k": i % 5, "x" if i % 2 == 0 else "a": i} for i in range(400)]
    produce_events(kafka_bootstrap, spec, events)
    port = _free_port()
    script = Path(sys.executable).with_name("windjoin")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "windjoin.pipelines"]
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*cli, "run", str(spec_path), "--bootstrap", kafka_bootstrap, "--metrics-port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline, samples = time.monotonic() + 300, {}
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"windjoin run exited with {proc.returncode}: {log_path.read_text()[-2000:]}"
            try:
                samples = _scrape(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                samples = {}
            read = sum(v for k, v in samples.items() if k.startswith("windjoin_job_input_rows_total"))
            if samples.get("windjoin_job_pairs_total{task=eq}", 0) > 0 and read == 400:
                break  # the first batch may be a probe of a few records per partition (aligned reading)
            time.sleep(0.5)
        assert samples.get("windjoin_job_pairs_total{task=eq}", 0) > 0, log_path.read_text()[-2000:]
        assert sum(v for k, v in samples.items() if k.startswith("windjoin_job_input_rows_total")) == 400
        assert samples["windjoin_job_batches_total{}"] >= 1
        assert samples["windjoin_job_production_delay_seconds_count{}"] == samples["windjoin_job_pairs_total{task=eq}"]
        # no shedding configured: a series per stream at 0; the local master counts as one executor
        assert samples["windjoin_job_shed_records_total{stream=R}"] == 0
        assert samples["windjoin_job_shed_records_total{stream=S}"] == 0
        assert samples["windjoin_job_executors{}"] == 1
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
