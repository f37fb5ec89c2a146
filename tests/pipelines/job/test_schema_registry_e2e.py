"""Avro through a schema registry, end to end: the producer registers its schema under `<topic>-value`, the running
job fetches writer schemas by id on its executors, a schema change mid-run (a field added with a default) is picked
up by the running query, and a record with an id the registry does not know is a dead letter with the reason. The
sinks hold exactly the oracle's pairs."""

from __future__ import annotations

import io
import json
import random
import uuid

import pytest
from fastavro import parse_schema, schemaless_writer

from tests.pipelines.pipeline_helpers import parquet_pairs, read_dead_letters, redis_pairs
from tests.registry_server import RegistryServer
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.formats.stream_encoder import stream_encoder
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.producer import produce
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import start_job

BASE_TS = 1_700_000_000_000
V1 = {"type": "record", "name": "A", "fields": [{"name": "ts", "type": "long"}, {"name": "k", "type": "long"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}


def _events(first: int, n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"stream": rng.choice("AB"), "ts": BASE_TS + i * 10, "k": rng.randrange(8)} for i in range(first, first + n)
    ]


def _produce(spec, spec_dict: dict, events: list[dict]) -> None:
    """A's events with the stream's encoder (registering the schema now in a.avsc), B's as JSON."""
    encoder = stream_encoder(spec, "A")
    a = [encoder.encode({k: v for k, v in e.items() if k != "stream"}) for e in events if e["stream"] == "A"]
    produce(spec_dict["bootstrap"], spec_dict["streams"]["A"]["topic"], a)
    b = [
        (str(e["k"]).encode(), json.dumps({"ts": e["ts"], "k": e["k"]}).encode(), e["ts"])
        for e in events
        if e["stream"] == "B"
    ]
    produce(spec_dict["bootstrap"], spec_dict["streams"]["B"]["topic"], b)


@pytest.mark.slow
def test_avro_through_the_registry_with_a_schema_change_mid_run(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    with RegistryServer() as registry:
        spec_dict = {
            "window": {"kind": "time", "size_ms": 100},
            "streams": {
                "A": {
                    "fields": {"k": "int"},
                    "key": "k",
                    "topic": unique_topic("a"),
                    "format": "avro",
                    "schema": "a.avsc",
                },
                "B": {"fields": {"k": "int"}, "key": "k", "topic": unique_topic("b")},
            },
            "tasks": [{"name": "eq", "join": ["A", "B"], "on": [{"op": "eq", "left": "A.k", "right": "B.k"}]}],
            "partitions": 4,
            "slots": 2,
            "trigger_ms": 200,
            "checkpoint": str(tmp_path / "checkpoint"),
            "dead_letter_topic": unique_topic("dead"),
            "schema_registry": {"url": registry.url},
        }
        spec = parse_spec({**spec_dict, "base_dir": str(tmp_path)})
        create_topics(kafka_bootstrap, [s.topic for s in spec.streams.values()], 2)
        create_topics(kafka_bootstrap, [spec.dead_letter_topic], 1)
        parquet = ParquetSink(tmp_path / "parquet")
        redis_sink = RedisSink(redis_url, retain_ms=10**12, namespace=f"t{uuid.uuid4().hex[:8]}")
        spec_dict["bootstrap"] = kafka_bootstrap

        (tmp_path / "a.avsc").write_text(json.dumps(V1))
        first = _events(0, 400, seed=1)
        _produce(spec, spec_dict, first)
        query = start_job(spark, spec, kafka_bootstrap, [parquet, redis_sink])
        try:
            query.processAllAvailable()
            (tmp_path / "a.avsc").write_text(json.dumps(V2))  # the producer's new schema, registered as it starts
            second = _events(400, 400, seed=2)
            _produce(spec, spec_dict, second)
            body = io.BytesIO()
            schemaless_writer(body, parse_schema(V1), {"ts": BASE_TS + 9_000, "k": 1})
            unknown = b"\x00" + (9_999).to_bytes(4, "big") + body.getvalue()
            produce(kafka_bootstrap, spec.streams["A"].topic, [(b"unknown", unknown, BASE_TS + 9_000)])
            query.processAllAvailable()
            assert query.exception() is None
        finally:
            query.stop()
        assert len(registry.subjects[spec.streams["A"].topic + "-value"]) == 2  # v1 and v2 registered

        letters = read_dead_letters(kafka_bootstrap, spec.dead_letter_topic)
        assert [(letter.key, letter.reason) for letter in letters] == [(b"unknown", "unknown_schema_id")]
        assert "9999" in letters[0].detail
        oracle_spec = {k: v for k, v in spec_dict.items() if k not in ("bootstrap", "schema_registry")}
        expected, late = oracle_join(oracle_spec, first + second)
        assert not late and len(expected) > 100
        assert as_multiset(parquet_pairs(parquet, oracle_spec)) == as_multiset(expected)
        assert as_multiset(redis_pairs(redis_sink, oracle_spec)) == as_multiset(expected)
        redis_sink.close()
