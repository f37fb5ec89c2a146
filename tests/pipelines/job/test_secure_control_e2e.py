"""The join job on a Redis with ACL users (real Kafka, Redis, Spark): it logs in as its own user from the spec's
credential keys, follows a good decision the controller's user recorded, refuses a malformed and an out-of-range
one through its real reading path (the source's planner process) and keeps running on the last good one; its
results land in Redis, where the proxy's user reads them. Started as a library user starts a controlled job
(`windjoin.start_job(..., control_redis=...)`), which also publishes its load as the job's user."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import orjson

import windjoin
from tests.pipelines.pipeline_helpers import produce_events
from tests.support.redis_acl import acl_redis
from windjoin.connectors.redis.client import redis_client, spec_auth
from windjoin.connectors.redis.control_decisions import DecisionStore, routing_json
from windjoin.connectors.redis.load_reports import LoadReports
from windjoin.connectors.redis.sink import RedisSink
from windjoin.connectors.results.redis_tier import read_all
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.job.control_feed import RefusalCounts, refusals_path
from windjoin.pipelines.job.job_metrics import JobMetrics
from windjoin.pipelines.job.join_job import BatchOutcome

PARTITIONS, SLOTS = 4, 2


def decision(epoch: int, shed_ratio: str, routing: str | None = None) -> dict[str, str]:
    return {
        "epoch": str(epoch),
        "routing_version": "0",
        "routing": routing or routing_json(RoutingTable.round_robin(PARTITIONS, SLOTS)),
        "slots": str(SLOTS),
        "shed_ratio": shed_ratio,
        "sustained_above": "0",
        "sustained_below": "0",
        "load_cursor": "0-0",
    }


def test_the_job_runs_as_its_redis_user_and_keeps_the_last_good_decision(spark, kafka_bootstrap, tmp_path):
    run = uuid.uuid4().hex[:8]
    (tmp_path / "redis").mkdir()
    with acl_redis(tmp_path / "redis") as (url, auths):
        job = auths["job"]
        spec_dict = {
            "window": {"kind": "time", "size_ms": 1000},
            "partitions": PARTITIONS,
            "slots": SLOTS,
            "trigger_ms": 200,
            "streams": {
                "R": {"topic": f"sec-r-{run}", "key": "k", "fields": {"k": "int", "x": "int"}},
                "S": {"topic": f"sec-s-{run}", "key": "k", "fields": {"k": "int", "a": "int"}},
            },
            "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
            "checkpoint": str(tmp_path / "checkpoint"),
            "sinks": {"redis": {"url": url, "username": job.username, "password_file": job.password_file}},
        }
        spec = parse_spec(spec_dict)
        auth = spec_auth(spec.sinks.redis)
        assert auth == job  # the spec's keys, as `windjoin run` reads them
        sink = RedisSink(url, 10**9, auth=auth)
        decisions = DecisionStore(url, auth=auths["controller"])
        decisions.record(decision(1, "0.5"))
        outcomes: list[BatchOutcome] = []
        lock = threading.Lock()

        def on_batch(outcome: BatchOutcome) -> None:
            with lock:
                outcomes.append(outcome)

        def wait_for(total: int, timeout_s: float = 120.0) -> None:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                with lock:
                    taken = sum(o.records + sum(o.shed.values()) for o in outcomes)
                if taken >= total:
                    return
                time.sleep(0.2)
            raise AssertionError(f"the job took {taken} of {total} records in {timeout_s} s")

        def wait_until(check, timeout_s: float = 30.0) -> None:
            deadline = time.monotonic() + timeout_s
            while not check():
                assert time.monotonic() < deadline, "the job's planner did not read the decision"
                time.sleep(0.1)

        ts0 = int(time.time() * 1000)
        events = [{"stream": "RS"[i % 2], "ts": ts0 + i, "k": i % 5, "x" if i % 2 == 0 else "a": i} for i in range(400)]
        produce_events(kafka_bootstrap, spec_dict, events[:200])
        query = windjoin.start_job(spec, kafka_bootstrap, spark=spark, on_batch=on_batch, control_redis=url)
        try:
            wait_for(200)
            refusals = RefusalCounts(refusals_path(spec))
            decisions.record(decision(2, "1.5"))  # out of range
            wait_until(lambda: refusals.read() == {"shed_ratio": 1})  # seen by the planner, between batches
            decisions.record(decision(3, "0.5", routing=orjson.dumps({"slot_of": [0, 1]}).decode()))  # too few
            wait_until(lambda: refusals.read() == {"shed_ratio": 1, "routing": 1})
            produce_events(kafka_bootstrap, spec_dict, events[200:])
            wait_for(400)
            with lock:
                taken = [o for o in outcomes if o.records or o.shed]
            assert taken and all(o.shed_ratio == 0.5 for o in taken)  # the last good decision, all along
            assert 0 < sum(sum(o.shed.values()) for o in taken) < 400
            assert refusals.read() == {"shed_ratio": 1, "routing": 1}  # each refused once, however often read
            text = JobMetrics(streams=["R", "S"], refused=refusals.read).exposition()
            assert b'windjoin_job_decisions_refused_total{reason="routing"} 1.0' in text
            assert b'windjoin_job_decisions_refused_total{reason="shed_ratio"} 1.0' in text
        finally:
            query.stop()
        committed = sink.last_committed("eq")
        assert committed is not None
        proxy = redis_client(url, auths["proxy"])
        rows = read_all(proxy, "eq", "windjoin", 0, 2**53 - 1)
        assert rows and len(rows) == sum(o.pairs.get("eq", 0) for o in outcomes)
        proxy.close()
        sink.close()
        decisions.close()
        assert Path(refusals_path(spec)).parent == Path(spec.checkpoint).resolve()
        reports = LoadReports(url, auth=auths["controller"])  # the load the controller reads, published as the job
        assert {e.batch_id for e in reports.read()} >= {o.batch_id for o in outcomes}
        reports.close()
