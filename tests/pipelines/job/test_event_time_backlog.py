"""A job started over a backlog whose Kafka partitions differ in density stays exact: event time per partition.

Each Kafka partition holds over 60 s of event time in order, at its own density (10x apart), keys spread over all
of them. Read by equal offsets, the sparse partitions would run tens of seconds ahead of the dense ones, and a
lateness judged against the newest tuple of a join partition would refuse the dense partitions' tuples. With
the watermark taken over the input partitions, not one tuple may be late (lateness 1 s), both sinks must equal
the brute-force oracle, and aligned reading must keep every partition's state within window + lateness +
alignment + how far the batch moved the slowest partition (+ one segment more, as segments expire whole) of
event time.
"""

from __future__ import annotations

import random
import time
import uuid

import orjson
import pytest

from tests.pipelines.pipeline_helpers import parquet_pairs, redis_pairs
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.producer import produce
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import BatchOutcome, start_job

BASE_TS = 1_700_000_000_000
SPAN_MS = 64_000
STEPS_MS = {"R": [10, 20, 50, 100], "S": [100, 50, 20, 10]}  # event-time step per Kafka partition
KEYS = 50
WINDOW_MS, LATENESS_MS, ALIGNMENT_MS = 300, 1_000, 2_000


def _events(seed: int, idle_after_ms: int | None = None) -> dict[tuple[str, int], list[dict]]:
    """Per (stream, Kafka partition), events in event-time order at the partition's density; with
    `idle_after_ms`, R's partition 3 stops there (it goes idle while the others go on)."""
    rng = random.Random(seed)
    out = {}
    for stream, steps in STEPS_MS.items():
        for part, step in enumerate(steps):
            end = idle_after_ms if idle_after_ms is not None and (stream, part) == ("R", 3) else SPAN_MS
            ts = BASE_TS + rng.randrange(step)
            events = []
            while ts < BASE_TS + end:
                events.append({"stream": stream, "ts": ts, "k": rng.randrange(KEYS), "v": rng.randrange(10**6)})
                ts += rng.randrange(1, 2 * step)
            out[stream, part] = events
    return out


def _spec(unique_topic, tmp_path, redis_url: str, **extra) -> dict:
    return {
        "window": {"kind": "time", "size_ms": WINDOW_MS},
        "allowed_lateness_ms": LATENESS_MS,
        "alignment_ms": ALIGNMENT_MS,
        "streams": {
            "R": {"fields": {"k": "int", "v": "int"}, "key": "k", "topic": unique_topic("r")},
            "S": {"fields": {"k": "int", "v": "int"}, "key": "k", "topic": unique_topic("s")},
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": 8,
        "slots": 2,
        "max_offsets_per_trigger": 2_000,
        "trigger_ms": 0,
        "checkpoint": str(tmp_path / "checkpoint"),
        "sinks": {"parquet": {"path": str(tmp_path / "parquet")}, "redis": {"url": redis_url, "retain_ms": 10**12}},
        **extra,
    }


def _produce(bootstrap: str, spec: dict, events: dict[tuple[str, int], list[dict]]) -> None:
    create_topics(bootstrap, [s["topic"] for s in spec["streams"].values()], 4)
    for (stream, part), rows in events.items():
        records = [
            (str(e["k"]).encode(), orjson.dumps({k: v for k, v in e.items() if k != "stream"}), e["ts"]) for e in rows
        ]
        produce(bootstrap, spec["streams"][stream]["topic"], records, partition=part)


def _oracle(spec: dict, events: dict[tuple[str, int], list[dict]]) -> list[tuple]:
    """The brute-force pairs, key by key (an equi-join pairs nothing across keys), each key's events in event-time
    order: nothing can be late there, as nothing is late within an in-order Kafka partition."""
    by_key: dict[int, list[dict]] = {}
    for rows in events.values():
        for e in rows:
            by_key.setdefault(e["k"], []).append(e)
    pairs = []
    for rows in by_key.values():
        found, late = oracle_join(spec, sorted(rows, key=lambda e: e["ts"]))
        assert not late
        pairs += found
    return pairs


def _sinks(spec: dict, redis_url: str) -> tuple[ParquetSink, RedisSink]:
    parquet = ParquetSink(spec["sinks"]["parquet"]["path"])
    return parquet, RedisSink(redis_url, retain_ms=10**12, namespace=f"t{uuid.uuid4().hex[:8]}")


def _check_results(spec, parquet, redis_sink, outcomes: list[BatchOutcome], events) -> None:
    late = sum(o.dead_by_reason.get("late", 0) for o in outcomes)
    assert late == 0, f"{late} in-order tuples were refused as late"
    assert sum(o.records for o in outcomes) == sum(len(rows) for rows in events.values())
    expected = as_multiset(_oracle(spec, events))
    assert len(expected) > 10_000
    assert as_multiset(parquet_pairs(parquet, spec)) == expected
    assert as_multiset(redis_pairs(redis_sink, spec)) == expected


def _floor_advance(outcome: BatchOutcome) -> int:
    """How far the batch moved the slowest partition it read: the least newest event time read, less where the
    slowest partition stood when the batch was planned (its watermark plus the lateness)."""
    if not outcome.input_marks or outcome.watermark is None:
        return 0
    return max(0, min(newest for _, newest in outcome.input_marks.values()) - (outcome.watermark + LATENESS_MS))


def _check_state_span(outcomes: list[BatchOutcome]) -> None:
    """After every batch, each partition's live state (from the batch's watermark less the window to its newest
    tuple) spans at most window + lateness + alignment of event time, plus how far the batch moved the slowest
    partition (the watermark follows it only in the next batch), plus the density estimate's error. All it holds
    spans at most one segment more: a segment holds one batch's tuples, from the slowest partition's to up to an
    alignment past where the slowest ended, and goes only once the watermark has passed its newest.

    Without alignment a sparse partition's equal share of a batch spans ten times a dense one's (the steps
    differ tenfold), so its tuples run far over this bound."""
    # Reading is aligned by each partition's density as measured so far (operators.event_time); a partition a
    # little sparser than measured overshoots by that error, which stays well under a quarter of the alignment.
    base = WINDOW_MS + LATENESS_MS + ALIGNMENT_MS + ALIGNMENT_MS // 4
    bounds = [base + _floor_advance(o) for o in outcomes]
    segment = ALIGNMENT_MS + ALIGNMENT_MS // 4 + max(_floor_advance(o) for o in outcomes)
    live = [o.state_span_ms for o in outcomes]
    held = [o.held_span_ms for o in outcomes]
    print(f"live spans {live}\nheld spans {held}\nbounds {bounds}")
    assert all(span <= bound for span, bound in zip(live, bounds, strict=True)), f"live spans {live} over {bounds}"
    assert all(span <= bound + segment for span, bound in zip(held, bounds, strict=True)), (
        f"held spans {held} over {[b + segment for b in bounds]}"
    )


@pytest.mark.slow
def test_a_skewed_backlog_is_joined_exactly_with_no_tuple_late(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    spec_dict = _spec(unique_topic, tmp_path, redis_url)
    events = _events(seed=17)
    counts = [len(rows) for rows in events.values()]
    assert max(counts) >= 5 * min(counts)
    _produce(kafka_bootstrap, spec_dict, events)
    spec = parse_spec(spec_dict)
    parquet, redis_sink = _sinks(spec_dict, redis_url)
    outcomes: list[BatchOutcome] = []
    query = start_job(spark, spec, kafka_bootstrap, [parquet, redis_sink], available_now=True, on_batch=outcomes.append)
    query.awaitTermination(timeout=600)
    assert query.exception() is None, f"the job failed: {query.exception()}"
    _check_results(spec_dict, parquet, redis_sink, outcomes, events)
    _check_state_span(outcomes)
    assert outcomes[-1].watermark >= BASE_TS + SPAN_MS - LATENESS_MS - 2 * ALIGNMENT_MS
    redis_sink.close()


@pytest.mark.slow
def test_an_idle_partition_stops_holding_the_watermark(spark, kafka_bootstrap, redis_url, unique_topic, tmp_path):
    """R's partition 3 ends 20 s into the backlog while the others go on: the job, running on a processing-time
    trigger, waits for it at most the idle timeout (then it no longer holds the watermark back), and the
    results are still complete."""
    idle_timeout_ms = 3_000
    spec_dict = _spec(unique_topic, tmp_path, redis_url, idle_timeout_ms=idle_timeout_ms, trigger_ms=200)
    events = _events(seed=23, idle_after_ms=20_000)
    _produce(kafka_bootstrap, spec_dict, events)
    spec = parse_spec(spec_dict)
    parquet, redis_sink = _sinks(spec_dict, redis_url)
    outcomes: list[BatchOutcome] = []
    total = sum(len(rows) for rows in events.values())
    query = start_job(spark, spec, kafka_bootstrap, [parquet, redis_sink], on_batch=outcomes.append)
    try:
        deadline = time.monotonic() + 600
        while sum(o.records for o in outcomes) < total and time.monotonic() < deadline:
            assert query.exception() is None, f"the job failed: {query.exception()}"
            time.sleep(0.5)
    finally:
        query.stop()
    _check_results(spec_dict, parquet, redis_sink, outcomes, events)
    _check_state_span(outcomes)
    idle_mark = events["R", 3][-1]["ts"]
    assert outcomes[-1].watermark > idle_mark, "the idle partition still holds the watermark back"
    reading = [o.finished_at for o in outcomes if o.records]
    gaps = [b - a for a, b in zip(reading, reading[1:], strict=False)]
    slowest = max(max((s["seconds"] for s in o.stats), default=0) for o in outcomes)
    assert max(gaps) <= idle_timeout_ms / 1000 + 2 * slowest + 1.0, f"reading stalled {max(gaps):.1f} s"
    redis_sink.close()
