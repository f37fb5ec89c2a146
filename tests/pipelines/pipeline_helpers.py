"""Shared pieces of the end-to-end pipeline tests: producing events, reading sinks, the oracle's shape."""

from __future__ import annotations

import orjson

from windjoin.connectors.kafka_admin import create_topics
from windjoin.connectors.kafka_producer import produce


def produce_events(bootstrap: str, spec: dict, events: list[dict], topic_partitions: int = 2) -> None:
    """Create the spec's topics and produce each event (JSON) to its stream's topic, keyed like the spec."""
    create_topics(bootstrap, [s["topic"] for s in spec["streams"].values()], topic_partitions)
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
        for row in sink.query(task["name"], 0, 2**53):
            out.append((task["name"], row[left], row[right]))
    return out
