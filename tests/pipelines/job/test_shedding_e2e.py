"""Load shedding end to end (real Kafka, Redis, Spark): a burst makes the controller shed, the job sheds what it
decided, and nothing once the load drops; the results are the join of exactly the records kept.

The job runs continuously, publishing every batch's load to Redis; the test steps the controller (the real
`pipelines.controller.control_loop.Controller`, S2J's linear shed ratio) between waves of records:

    calm wave  -> step: tau low, ratio 0
    burst A    -> step: tau above tau1, ratio SR = (tau - tau1) / (1 - tau1) from the tau it measured
    burst B    -> shed at SR (per stream, within a binomial tolerance); step: still shedding (the offered
                  load counts the shed records)
    calm wave  -> step: ratio 0
    calm wave  -> nothing shed

The oracle of which records were shed is independent of the job's code: every record is read back from Kafka
with its (topic, partition, offset); the batch that read it and that batch's shed ratio come from the end offsets
Spark recorded in the checkpoint (the control epoch travels in them); the decision is recomputed with a plain
Python re-implementation of the documented hash (blake2b seed of "topic\\0partition", splitmix64 of the offset,
shed when the top 32 bits fall below ratio * 2^32). The job's pairs cannot serve, because a kept record without
a partner leaves no trace in them and the job exposes only counts. The job's per-batch shed counts must equal the
oracle's exactly, and its pairs must equal a brute-force join of exactly the kept records.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.pipelines.pipeline_helpers import produce_events
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.kafka.range_reader import read_range
from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.connectors.redis.control_decisions import DecisionStore
from windjoin.connectors.redis.load_reports import LoadReports
from windjoin.operators.control.config import parse_control_config
from windjoin.operators.control.shedding import shed_mask, shed_ratio
from windjoin.operators.offset_plan import KafkaRange, split_key
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.controller.control_loop import Controller
from windjoin.pipelines.job.join_job import BatchOutcome, ControlSource, start_job
from windjoin.pipelines.job.load_publisher import LoadPublisher

WINDOW_MS = 100
KEYS = 20
MAX_OFFSETS = 2000  # per batch, both topics: a burst fills batches, so tau is known within a range
SLOTS = 2
TAU1 = 0.5
CAPACITY = MAX_OFFSETS / SLOTS / 0.95  # a full batch is tau 0.95 (SR 0.9); a calm wave stays below 0.2
CALM, BURST = 400, 6000  # records per wave, both streams
CONTROL = {
    "scaling": "utilisation",
    "utilisation": {
        "tau0": 0.05,
        "tau_star": 0.25,
        "tau1": TAU1,
        "tau2": 1.0,
        "capacity": CAPACITY,
        "min_workers": SLOTS,
        "max_workers": SLOTS,
    },
    "reorganisation": {"th_sup": 0.99, "th_con": 0.0},  # no consumers: no moves in this test
    "shedding": {"base": 0.0, "model": "linear"},
}
MASK64 = (1 << 64) - 1


def oracle_shed(topic: str, partition: int, offset: int, ratio: float) -> bool:
    """The documented decision (operators/control/shedding.py), re-implemented on Python ints."""
    threshold = round(ratio * (1 << 32))
    if threshold == 0:
        return False
    if threshold >= 1 << 32:
        return True
    seed = int.from_bytes(hashlib.blake2b(f"{topic}\x00{partition}".encode(), digest_size=8).digest(), "little")
    x = ((offset * 0x9E3779B97F4A7C15) & MASK64) ^ seed
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK64
    x ^= x >> 31
    return (x >> 32) < threshold


def parquet_pairs(sink: ParquetSink) -> Counter:
    """The committed results as (R.x, S.a) counts."""
    return Counter((row["R"]["x"], row["S"]["a"]) for row in sink.read("eq").to_pylist())


def wave(first_id: int, n: int, ts0: int, rng: random.Random) -> list[dict]:
    """n events 1 ms apart, R or S at random, keys 0..KEYS-1; x / a are unique ids (a pair names its records)."""
    out = []
    for i in range(n):
        ident = first_id + i
        if rng.random() < 0.5:
            out.append({"stream": "R", "ts": ts0 + ident, "k": rng.randrange(KEYS), "x": ident})
        else:
            out.append({"stream": "S", "ts": ts0 + ident, "k": rng.randrange(KEYS), "a": ident})
    return out


def brute_force(events: list[dict]) -> Counter:
    """Every (R.x, S.a) with R.k = S.k and |R.ts - S.ts| <= WINDOW_MS: nested loops within each key's lists."""
    by_key: dict[int, tuple[list, list]] = {}
    for e in events:
        by_key.setdefault(e["k"], ([], []))[0 if e["stream"] == "R" else 1].append(e)
    out: Counter = Counter()
    for rs, ss in by_key.values():
        for r in rs:
            for s in ss:
                if abs(r["ts"] - s["ts"]) <= WINDOW_MS:
                    out[(r["x"], s["a"])] += 1
    return out


def checkpoint_batches(checkpoint: Path) -> dict[int, tuple[dict[str, int], float]]:
    """Per batch id: its end positions ("topic:partition" -> next offset) and shed ratio, from Spark's offset log."""
    out = {}
    for path in (checkpoint / "offsets").iterdir():
        if not path.name.isdigit():
            continue
        source = json.loads(path.read_text().splitlines()[2])
        out[int(path.name)] = (source["partitions"], float(source["control"]["shed_ratio"]))
    return out


def read_back(bootstrap: str, ends: dict[str, int]) -> list[tuple[str, int, int, dict]]:
    """(topic, partition, offset, event) of every record up to `ends`, read from Kafka."""
    options = KafkaSourceOptions(bootstrap_servers=bootstrap, topics=tuple({split_key(k)[0] for k in ends}))
    out = []
    for key, end in ends.items():
        topic, partition = split_key(key)
        for batch in read_range(options, KafkaRange(topic, partition, 0, end)):
            for offset, value in zip(
                batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True
            ):
                out.append((topic, partition, offset, json.loads(value)))
    return out


@pytest.mark.slow
def test_a_burst_is_shed_at_the_decided_ratio_and_nothing_after(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    spec_dict = {
        "window": {"kind": "time", "size_ms": WINDOW_MS},
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "key": "k", "topic": unique_topic("r")},
            "S": {"fields": {"k": "int", "a": "int"}, "key": "k", "topic": unique_topic("s")},
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": 4,
        "slots": SLOTS,
        "trigger_ms": 200,
        "max_offsets_per_trigger": MAX_OFFSETS,
        "allowed_lateness_ms": 600_000,
        "checkpoint": str(tmp_path / "checkpoint"),
    }
    spec = parse_spec(spec_dict)
    namespace = f"t{uuid.uuid4().hex[:8]}"
    reports, decisions = LoadReports(redis_url, namespace), DecisionStore(redis_url, namespace)
    publisher = LoadPublisher(reports, trigger_s=0.2)
    controller = Controller(reports, decisions, parse_control_config(CONTROL), spec.partitions, SLOTS)
    sink = ParquetSink(tmp_path / "parquet")
    outcomes: list[tuple[str | None, BatchOutcome]] = []  # (load report entry id, outcome), in batch order
    lock = threading.Lock()

    def on_batch(outcome: BatchOutcome) -> None:
        entry = publisher(outcome)
        with lock:
            outcomes.append((entry, outcome))

    def offered(o: BatchOutcome) -> int:
        return sum(s["joined"] for s in o.stats) + sum(o.shed.values())

    def wait_for(produced: int, ratio: float | None = None, after_batch: int = -1, timeout_s: float = 120) -> int:
        """Until the job has taken `produced` records in all (joined or shed) and, if `ratio` is given, has run a
        batch after `after_batch` under that shed ratio (the job follows a new decision); that batch's id."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            with lock:
                done = sum(offered(o) for _, o in outcomes)
                under = [o.batch_id for _, o in outcomes if o.batch_id > after_batch and o.shed_ratio == ratio]
            if done >= produced and (ratio is None or under):
                return min(under, default=-1)
            time.sleep(0.2)
        raise AssertionError(f"the job took {done} of {produced} records in {timeout_s} s (ratio {ratio})")

    def last_batch() -> int:
        with lock:
            return max(o.batch_id for _, o in outcomes)

    cursor = "0-0"

    def step() -> tuple[float, float, list[BatchOutcome]]:
        """One controller epoch: (tau, ratio) it decided and the batches it saw; tau checked against them."""
        nonlocal cursor
        outcome = controller.step()
        assert outcome is not None
        with lock:
            seen = [o for e, o in outcomes if e is not None and _after(e, cursor) and not _after(e, outcome.cursor)]
        cursor = outcome.cursor
        assert len(seen) == outcome.batches
        tau = sum(offered(o) for o in seen) / len(seen) / SLOTS / CAPACITY
        assert outcome.decision.tau == pytest.approx(tau)
        ratio = outcome.decision.state.shed_ratio
        assert ratio == pytest.approx(shed_ratio(tau, TAU1))  # S2J's linear model, base 0
        return tau, ratio, seen

    rng = random.Random(5)
    ts0 = int(time.time() * 1000)
    events: list[dict] = []

    def send(n: int) -> None:
        new = wave(len(events), n, ts0, rng)
        produce_events(kafka_bootstrap, spec_dict, new)
        events.extend(new)

    send(CALM)  # topics exist before the query starts
    started = time.monotonic()
    query = start_job(
        spark, spec, kafka_bootstrap, [sink], on_batch=on_batch, control=ControlSource(redis_url, namespace)
    )
    try:
        wait_for(len(events))
        tau, ratio, _ = step()
        assert tau < TAU1 and ratio == 0.0

        send(BURST)  # burst A: taken at ratio 0, measured
        wait_for(len(events))
        tau_a, sr, _ = step()
        assert TAU1 < tau_a < 1 and 0 < sr < 1, (tau_a, sr)
        mark, before = len(events), last_batch()

        send(BURST)  # burst B: shed at sr (a new ratio alone runs no batch: the next records bring it)
        wait_for(len(events), ratio=sr, after_batch=before)  # the job follows the new decision
        tau_b, sr_b, burst_b = step()
        assert tau_b > TAU1 and sr_b > 0, "the offered load (joined + shed) still shows the burst"
        in_b = [o for o in burst_b if offered(o)]
        assert in_b and all(o.shed_ratio == sr for o in in_b)
        for stream in ("R", "S"):
            n = sum(1 for e in events[mark:] if e["stream"] == stream)
            shed = sum(o.shed.get(stream, 0) for o in in_b)
            tolerance = 4 * math.sqrt(n * sr * (1 - sr))  # binomial, 4 sigma
            assert abs(shed - n * sr) <= tolerance, (stream, shed, n, sr)
        before = last_batch()

        send(CALM)  # taken at sr_b: the controller has not seen the drop yet
        wait_for(len(events), ratio=sr_b, after_batch=before)
        tau_c, ratio_c, _ = step()
        assert tau_c < TAU1 and ratio_c == 0.0
        before = last_batch()

        send(CALM)
        quiet_from = wait_for(len(events), ratio=0.0, after_batch=before)
        after = [o for _, o in outcomes if o.batch_id >= quiet_from]
        assert sum(offered(o) for o in after) == CALM
        assert all(o.shed_ratio == 0.0 and not o.shed for o in after)
    finally:
        query.stop()
        reports.client.delete(reports.key, decisions.latest_key, decisions.stream_key)
        reports.close()
        decisions.close()
    wall_s = time.monotonic() - started

    # The oracle: which records each batch read, at which ratio, and which of those the hash sheds.
    batches = checkpoint_batches(Path(spec.checkpoint))
    ends = batches[max(batches)][0]
    records = read_back(kafka_bootstrap, ends)
    assert len(records) == len(events)
    by_id = {(e.get("x", e.get("a"))): e for e in events}
    batch_of: dict[tuple[str, int, int], int] = {}
    previous: dict[str, int] = {}
    for batch_id in sorted(batches):
        positions, _ = batches[batch_id]
        for key, end in positions.items():
            topic, partition = split_key(key)
            for offset in range(previous.get(key, 0), end):
                batch_of[(topic, partition, offset)] = batch_id
        previous = positions
    kept, shed_per_batch = [], Counter()
    stream_of = {spec_dict["streams"][s]["topic"]: s for s in ("R", "S")}
    for topic, partition, offset, value in records:
        batch_id = batch_of[(topic, partition, offset)]
        ratio = batches[batch_id][1]
        shed = oracle_shed(topic, partition, offset, ratio)
        assert shed == bool(shed_mask(ratio, topic, partition, np.array([offset]))[0])  # the library agrees
        if shed:
            shed_per_batch[(batch_id, stream_of[topic])] += 1
        else:
            event = by_id[value.get("x", value.get("a"))]
            assert event["ts"] == value["ts"] and event["k"] == value["k"]
            kept.append(event)
    job_shed = Counter()
    for _, o in outcomes:
        for stream, n in o.shed.items():
            job_shed[(o.batch_id, stream)] = n  # a replayed batch counts once
    assert job_shed == shed_per_batch
    assert sum(shed_per_batch.values()) > BURST * sr / 2
    expected = brute_force(kept)
    assert len(expected) > 1000
    assert parquet_pairs(sink) == expected
    print(
        f"tau calm {tau:.3f}, burst A {tau_a:.3f} -> SR {sr:.3f}, burst B {tau_b:.3f} -> SR {sr_b:.3f}, "
        f"after {tau_c:.3f} -> {ratio_c}; shed {sum(shed_per_batch.values())} of {len(events)}; "
        f"{len(expected)} pairs; {wall_s:.0f} s"
    )


def _after(entry_id: str, cursor: str) -> bool:
    """Whether stream entry id `entry_id` comes after `cursor` ("ms-seq" ids compare as integer pairs)."""
    return tuple(map(int, entry_id.split("-"))) > tuple(map(int, cursor.split("-")))
