"""Apache Kafka restarted under a running job (Kafka -> Spark -> Parquet): the broker stops (a controlled shutdown)
between committed batches, stays down for seconds while the job plans and reads, and comes back on its log and
port; the job rides it out and the Parquet results equal the brute-force oracle, no pair lost or duplicated."""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests.pipelines.pipeline_helpers import keyed_eq_spec, parquet_pairs, produce_events
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import start_job
from windjoin.pipelines.job.sinks import build_sinks

BASE_TS = 1_700_000_000_000
N_EVENTS = 2400
RESTART_AFTER_BATCH = 2  # the broker goes down once Parquet committed this batch
DOWN_S = 4.0


def _events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    events = []
    for i in range(n):
        if rng.random() < 0.5:
            events.append({"stream": "R", "ts": BASE_TS + i, "k": rng.randrange(40), "x": i})
        else:
            events.append({"stream": "S", "ts": BASE_TS + i, "k": rng.randrange(40), "a": i})
    return events


class Restarter(threading.Thread):
    """Restarts the broker once the Parquet sink has committed batch RESTART_AFTER_BATCH; remembers when."""

    def __init__(self, broker, sink: ParquetSink, task: str) -> None:
        super().__init__(daemon=True)
        self.broker, self.sink, self.task = broker, sink, task
        self.after_batch: int | None = None
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                last = self.sink.last_committed(self.task)
                if last is not None and last >= RESTART_AFTER_BATCH:
                    self.after_batch = last
                    self.broker.restart(down_s=DOWN_S)
                    return
                time.sleep(0.02)
        except BaseException as err:  # raised in the test
            self.error = err


@pytest.mark.slow
def test_a_broker_restart_under_a_running_job_loses_and_duplicates_nothing(
    spark, private_apache_kafka, unique_topic, tmp_path
):
    spec_dict = keyed_eq_spec(unique_topic, tmp_path)
    spec_dict["max_offsets_per_trigger"] = 150  # many batches: the restart lands in the middle of the run
    spec_dict["sinks"] = {"parquet": {"path": str(tmp_path / "parquet")}}
    events = _events(N_EVENTS, seed=5)
    bootstrap = private_apache_kafka.bootstrap
    produce_events(bootstrap, spec_dict, events, topic_partitions=2)
    expected, late = oracle_join(spec_dict, events)
    assert not late and len(expected) > 1000
    spec = parse_spec(spec_dict)
    sink = ParquetSink(tmp_path / "parquet")
    restarter = Restarter(private_apache_kafka, sink, "eq")
    restarter.start()
    try:
        query = start_job(spark, spec, bootstrap, build_sinks(spec), available_now=True)
        query.awaitTermination(timeout=900)
        assert query.exception() is None
    finally:
        restarter.stop.set()
        restarter.join(timeout=60)
    assert restarter.error is None, restarter.error
    assert private_apache_kafka.restarts == 1, "the run ended before the restart"
    last = sink.last_committed("eq")
    assert last is not None and restarter.after_batch is not None and restarter.after_batch < last
    assert as_multiset(parquet_pairs(sink, spec_dict)) == as_multiset(expected)
