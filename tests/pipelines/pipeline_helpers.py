"""Shared pieces of the end-to-end pipeline tests: producing events, reading sinks, the oracle's shape."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.support.redis_rows import redis_rows
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.dead_letter import DeadLetter, decode_dead_letter
from windjoin.connectors.kafka.producer import produce


def produce_events(bootstrap: str, spec: dict, events: list[dict], topic_partitions: int = 2) -> None:
    """Create the spec's topics (if missing) and produce each event (JSON) to its stream's topic, keyed like the spec;
    call again to produce another wave to the same topics."""
    create_topics(bootstrap, [s["topic"] for s in spec["streams"].values()], topic_partitions, exist_ok=True)
    for name, stream in spec["streams"].items():
        key_field = stream.get("key")
        records = [
            (
                None if key_field is None else str(e[key_field]).encode(),
                orjson.dumps({k: v for k, v in e.items() if k != "stream"}),
                e[stream.get("timestamp", "ts")],
            )
            for e in events
            if e["stream"] == name
        ]
        produce(bootstrap, stream["topic"], records)


def read_topic(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every record (key, value) of `topic`, read to the end of each partition with assign() (no consumer group)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        pending, records = set(partitions), []
        for _ in range(600):
            if not pending:
                break
            for msg in consumer.consume(num_messages=500, timeout=0.2):
                if msg.error() is None:
                    records.append((msg.key(), msg.value()))
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                else:
                    raise AssertionError(f"reading {topic}: {msg.error()}")
        assert not pending, f"no end of partition seen for {sorted(pending)} of {topic}"
        return records
    finally:
        consumer.close()


def read_dead_letters(bootstrap: str, topic: str) -> list[DeadLetter]:
    """Every dead letter of `topic`, decoded."""
    return [decode_dead_letter(value) for _, value in read_topic(bootstrap, topic)]


def keyed_eq_spec(unique_topic: Callable[[str], str], folder: Path) -> dict:
    """A spec on Kafka: R (k, x) and S (k, a), both keyed by k, and one task "eq" joining them on k (time window
    50 ms, lateness 5 s, 4 partitions on 2 slots, checkpoint under `folder`)."""
    return {
        "window": {"kind": "time", "size_ms": 50},
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "key": "k", "topic": unique_topic("r")},
            "S": {"fields": {"k": "int", "a": "int"}, "key": "k", "topic": unique_topic("s")},
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": 4,
        "slots": 2,
        "checkpoint": str(folder / "checkpoint"),
        "allowed_lateness_ms": 5000,
    }


def punctuated_spec(
    tasks: list[str], unique_topic: Callable[[str], str], folder: Path, redis_url: str, retain_ms: int
) -> dict:
    """The spec of `punctuated_events` on Kafka: tasks[0] joins R, S on k, tasks[1] S, R on nothing (time window
    30 ms); Parquet under `folder` with snapshots closed by R's punctuation (kind "end") only, and Redis keeping
    `retain_ms` of result time once a snapshot is closed."""
    return {
        "window": {"kind": "time", "size_ms": 30},
        "allowed_lateness_ms": 10_000,
        "streams": {
            "R": {"fields": {"k": "int", "kind": "string"}, "topic": unique_topic("r")},
            "S": {"fields": {"k": "int"}, "topic": unique_topic("s")},
        },
        "tasks": [
            {"name": tasks[0], "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
            {"name": tasks[1], "join": ["S", "R"]},
        ],
        "partitions": 4,
        "slots": 2,
        "max_offsets_per_trigger": 150,
        "checkpoint": str(folder / "checkpoint"),
        "sinks": {
            "parquet": {
                "path": str(folder / "parquet"),
                "snapshots": {"every_ms": 3_600_000, "punctuation": {"stream": "R", "field": "kind", "value": "end"}},
            },
            "redis": {"url": redis_url, "retain_ms": retain_ms},
        },
    }


def punctuated_events(n: int, punctuate_at: set[int], seed: int, base_ts: int) -> list[dict]:
    """R (k, kind "data") and S (k) events 1 ms apart, k in 0..4; at the positions `punctuate_at`, an R punctuation
    (kind "end") instead."""
    rng = random.Random(seed)
    events = []
    for i in range(n):
        if i in punctuate_at:
            events.append({"stream": "R", "ts": base_ts + i, "k": 0, "kind": "end"})
        elif rng.random() < 0.5:
            events.append({"stream": "R", "ts": base_ts + i, "k": rng.randrange(5), "kind": "data"})
        else:
            events.append({"stream": "S", "ts": base_ts + i, "k": rng.randrange(5)})
    return events


def parquet_pairs(sink, spec: dict) -> list[tuple]:
    """(task, left, right) for every row the Parquet sink holds."""
    out = []
    for task in spec["tasks"]:
        left, right = task["join"]
        for row in sink.read(task["name"]).to_pylist():
            out.append((task["name"], row[left], row[right]))
    return out


def redis_pairs(sink, spec: dict) -> list[tuple]:
    out = []
    for task in spec["tasks"]:
        left, right = task["join"]
        for row in redis_rows(sink, task["name"], 0, 2**53):
            out.append((task["name"], row[left], row[right]))
    return out


def produce_closers(bootstrap: str, spec: dict, ts: int, topic_partitions: int, wave: int, key: str = "k") -> None:
    """One event at `ts` in every partition of every input topic, each with a `key` of its own (negative, by
    `wave` and partition: the tests' keys are not) so that it pairs with nothing under an equality on `key`.
    Once the job has planned a batch after reading them, its watermark has passed the windows of every earlier
    tuple: outer and anti tasks have emitted each earlier unpaired row (the closers' own stay open, and are not
    the oracle's)."""
    defaults = {"int": 0, "float": 0.0, "string": "", "bool": False}
    number = 0
    for stream in spec["streams"].values():
        for partition in range(topic_partitions):
            number += 1
            event = {f: defaults[t] for f, t in stream["fields"].items()}
            event |= {key: -(wave * 1000 + number), stream.get("timestamp", "ts"): ts}
            produce(bootstrap, stream["topic"], [(None, orjson.dumps(event), ts)], partition=partition)
