"""`windjoin produce` / `windjoin generate` and the stream encoder under them.

The encoder tests are pure. The command tests run against the session's real broker and read every topic
back with an assigned consumer (no group) up to the end of each partition (not ListOffsets, which Tansu
under-reports), then decode and compare with the input.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from click.testing import CliRunner
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from tests.services_fixtures import on_each_broker
from windjoin.connectors.formats.avro_codec import SchemaRegistry
from windjoin.connectors.formats.codec import codec_for
from windjoin.connectors.formats.stream_encoder import EventEncodeError, key_text, stream_encoder
from windjoin.operators.spec import load_spec, parse_spec
from windjoin.operators.workloads.b_model import Workload, WorkloadConfig
from windjoin.pipelines.cli.produce import generate, produce

kafka_bootstrap = on_each_broker()  # these run on both brokers

BASE_TS = 1_700_000_000_000
S_SCHEMA = {
    "type": "record",
    "name": "S",
    "namespace": "windjoin.test",
    "fields": [
        {"name": "ts", "type": "long"},
        {"name": "k", "type": "int"},
        {"name": "a", "type": "int"},
        {"name": "b", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def write_spec(folder: Path, r_topic: str = "r", s_topic: str = "s", r_key: str | None = "k") -> Path:
    """R as JSON (keyed by k unless told), S as Avro (schema id 42, keyed by k), joined on k."""
    (folder / "schemas").mkdir(exist_ok=True)
    (folder / "schemas" / "s.avsc").write_text(json.dumps(S_SCHEMA))
    r: dict[str, Any] = {"topic": r_topic, "fields": {"k": "int", "x": "int", "y": "float", "z": "string"}}
    if r_key:
        r["key"] = r_key
    spec = {
        "window": {"kind": "time", "size_ms": 1000},
        "streams": {
            "R": r,
            "S": {
                "topic": s_topic,
                "key": "k" if r_key else None,
                "format": "avro",
                "schema": "schemas/s.avsc",
                "schema_id": 42,
                "fields": {"k": "int", "a": "int", "b": "float"},
            },
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


# ---- the encoder (pure) ---------------------------------------------------------------------------------------


def test_encoder_json_message_key_and_timestamp(tmp_path: Path) -> None:
    encoder = stream_encoder(load_spec(write_spec(tmp_path)), "R")
    message = encoder.encode({"stream": "R", "ts": BASE_TS, "k": 7, "x": 1, "y": 2, "z": "a", "extra": [1]})
    assert message.key == b"7"
    assert message.timestamp_ms == BASE_TS
    assert orjson.loads(message.value) == {"ts": BASE_TS, "k": 7, "x": 1, "y": 2.0, "z": "a", "extra": [1]}
    iso = encoder.encode({"ts": "2023-11-14T22:13:20.001+00:00", "k": 7, "x": 1, "y": 2.5, "z": "a"})
    assert iso.timestamp_ms == BASE_TS + 1 and orjson.loads(iso.value)["ts"] == BASE_TS + 1
    unkeyed = stream_encoder(load_spec(write_spec(tmp_path, r_key=None)), "R")
    assert unkeyed.encode({"ts": 5, "k": 7, "x": 1, "y": 2.5, "z": "a"}).key is None


def test_encoder_avro_uses_the_confluent_wire_format_with_the_specs_schema_id(tmp_path: Path) -> None:
    encoder = stream_encoder(load_spec(write_spec(tmp_path)), "S")
    message = encoder.encode({"ts": BASE_TS, "k": 3, "a": 4, "b": 0.5, "note": "hi"})
    assert message.value[0] == 0 and int.from_bytes(message.value[1:5], "big") == 42
    registry = SchemaRegistry()
    registry.register(S_SCHEMA, schema_id=42)
    decoded = codec_for("avro", registry=registry, schema_id=42).decode(message.value)
    assert decoded == {"ts": BASE_TS, "k": 3, "a": 4, "b": 0.5, "note": "hi"}
    assert message.key == b"3" and message.timestamp_ms == BASE_TS


@pytest.mark.parametrize(
    ("stream", "event", "reason", "field"),
    [
        ("R", {"ts": 1, "k": 1, "x": 1, "y": 1.0}, "missing_field", "z"),
        ("R", {"ts": 1, "k": 1, "x": "1", "y": 1.0, "z": "a"}, "wrong_type", "x"),
        ("R", {"ts": 1, "k": 2**60, "x": 1, "y": 1.0, "z": "a"}, "out_of_range", "k"),
        ("R", {"k": 1, "x": 1, "y": 1.0, "z": "a"}, "missing_timestamp", "ts"),
        ("R", {"ts": "yesterday", "k": 1, "x": 1, "y": 1.0, "z": "a"}, "bad_timestamp", "ts"),
        ("R", {"stream": "S", "ts": 1, "k": 1}, "other_stream", "stream"),
        ("S", {"ts": 1, "k": 1, "a": 2**40, "b": 1.0}, "schema_mismatch", "a"),
        ("S", {"ts": 1, "k": 1, "a": 1, "b": 1.0, "note": 5}, "schema_mismatch", "note"),
        ("S", {"ts": 1, "k": 1, "a": 1, "b": 1.0, "colour": "red"}, "not_in_schema", "colour"),
    ],
)
def test_encoder_errors_name_the_field(tmp_path: Path, stream: str, event: dict, reason: str, field: str) -> None:
    encoder = stream_encoder(load_spec(write_spec(tmp_path)), stream)
    with pytest.raises(EventEncodeError) as caught:
        encoder.encode(event)
    assert (caught.value.reason, caught.value.field) == (reason, field)
    assert repr(field) in str(caught.value)


def test_encoder_refuses_unknown_streams_and_schemas_lacking_declared_fields(tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path)
    with pytest.raises(ValueError, match=r"unknown stream 'Q'.*\['R', 'S'\]"):
        stream_encoder(load_spec(spec_path), "Q")
    narrow = {**S_SCHEMA, "fields": [f for f in S_SCHEMA["fields"] if f["name"] != "b"]}
    (tmp_path / "schemas" / "s.avsc").write_text(json.dumps(narrow))
    with pytest.raises(ValueError, match=r"streams\.S\.schema: .*s\.avsc has no field\(s\) \['b'\]"):
        stream_encoder(load_spec(spec_path), "S")
    (tmp_path / "schemas" / "s.avsc").unlink()
    with pytest.raises(ValueError, match=r"streams\.S\.schema: .*not found"):
        stream_encoder(load_spec(spec_path), "S")


def test_key_text() -> None:
    assert [key_text(v) for v in (12, -3, 0.5, 2.0, True, False, "ab c")] == [
        "12",
        "-3",
        "0.5",
        "2.0",
        "true",
        "false",
        "ab c",
    ]


# ---- against the broker ---------------------------------------------------------------------------------------


def consume_all(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Every record of `topic`: assign all partitions from the beginning, read until each reports its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",  # never joined: partitions are assigned
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        ended: set[int] = set()
        records: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        while len(ended) < len(partitions):
            assert time.monotonic() < deadline, f"{topic}: partitions {set(partitions) - ended} never ended"
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    ended.add(msg.partition())
                    continue
                ended.discard(msg.partition())
                records.append(
                    {
                        "partition": msg.partition(),
                        "key": msg.key(),
                        "value": msg.value(),
                        "timestamp": msg.timestamp()[1],
                    }
                )
        return records
    finally:
        consumer.close()


def run(command: Any, args: list[str]) -> Any:
    result = CliRunner().invoke(command, args, catch_exceptions=False)
    return result


@pytest.fixture
def topics(unique_topic: Callable[..., str]) -> tuple[str, str]:
    return unique_topic("r"), unique_topic("s")


def test_produce_round_trips_json_and_avro_streams_and_reports_bad_lines(
    kafka_bootstrap: str, topics: tuple[str, str], tmp_path: Path
) -> None:
    spec_path = write_spec(tmp_path, *topics)
    rows: list[str] = []
    expected: dict[str, list[dict[str, Any]]] = {"R": [], "S": []}
    bad: dict[int, str] = {}
    for i in range(600):
        k = i % 37
        if i % 2 == 0:
            event = {"stream": "R", "ts": BASE_TS + i, "k": k, "x": i, "y": i / 3, "z": f"z{i}"}
            expected["R"].append({key: v for key, v in event.items() if key != "stream"})
        else:
            # Some timestamps as ISO-8601 (BASE_TS is 2023-11-14T22:13:20Z): they become epoch ms.
            ts: Any = f"2023-11-14T22:13:20.{i:03d}+00:00" if i % 10 == 1 else BASE_TS + i
            event = {"stream": "S", "ts": ts, "k": k, "a": i, "b": i / 7}
            expected["S"].append({"ts": BASE_TS + i, "k": k, "a": i, "b": i / 7, "note": None})
        rows.append(orjson.dumps(event).decode())
        if i % 100 == 50:  # interleave bad lines; their numbers are the positions in `rows`
            for text, reason in (
                ("{not json", "not_json"),
                ('{"stream": "R", "ts": 1, "k": 1, "x": "one", "y": 1.0, "z": "a"}', "wrong_type"),
                ('{"stream": "S", "ts": 1, "k": 1, "a": 99999999999, "b": 1.0}', "schema_mismatch"),
            ):
                rows.append(text)
                bad[len(rows)] = reason
    rows.append("")  # blank lines are not events
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(rows) + "\n")

    for stream, topic in zip(("R", "S"), topics, strict=True):
        result = run(produce, [str(spec_path), stream, str(events), "--bootstrap", kafka_bootstrap, "--no-progress"])
        assert result.exit_code == 0, result.output
        reported = {
            int(m.group(1)): m.group(2) for m in re.finditer(rf"{re.escape(str(events))}:(\d+): (\w+):", result.stderr)
        }
        # Every bad line of this stream, and every line that is no event at all, is reported by its number.
        want = {n: r for n, r in bad.items() if r == "not_json" or json.loads(rows[n - 1])["stream"] == stream}
        assert reported == want
        assert f"{len(expected[stream])} events of stream {stream} produced to {topic}" in result.stderr
        assert f"{len(want)} bad lines skipped" in result.stderr
        assert f"topic {topic}: created, 4 partitions" in result.stderr

    r_records = consume_all(kafka_bootstrap, topics[0])
    s_records = consume_all(kafka_bootstrap, topics[1])
    json_codec = codec_for("json")
    registry = SchemaRegistry()
    registry.register(S_SCHEMA, schema_id=42)
    avro_codec = codec_for("avro", registry=registry, schema_id=42)
    for stream, records, codec in (("R", r_records, json_codec), ("S", s_records, avro_codec)):
        decoded = [codec.decode(rec["value"]) for rec in records]
        assert sorted(decoded, key=lambda e: e["ts"]) == expected[stream]
        for rec, event in zip(records, decoded, strict=True):
            assert rec["key"] == str(event["k"]).encode()
            assert rec["timestamp"] == event["ts"]
        # One key, one partition (murmur2 on the key); and the keys did spread over the partitions.
        by_key: dict[bytes, set[int]] = {}
        for rec in records:
            by_key.setdefault(rec["key"], set()).add(rec["partition"])
        assert all(len(parts) == 1 for parts in by_key.values())
        assert len({rec["partition"] for rec in records}) > 1


def test_produce_to_another_topic_with_chosen_partitions(
    kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    spec_path = write_spec(tmp_path)
    events = tmp_path / "r.jsonl"
    events.write_text("".join(f'{{"ts": {BASE_TS + i}, "k": {i}, "x": 1, "y": 0.5, "z": "q"}}\n' for i in range(50)))
    topic = unique_topic("other")
    args = [
        str(spec_path),
        "R",
        str(events),
        "--bootstrap",
        kafka_bootstrap,
        "--topic",
        topic,
        "--topic-partitions",
        "3",
    ]
    result = run(produce, args)
    assert result.exit_code == 0, result.output
    assert f"topic {topic}: created, 3 partitions" in result.stderr
    records = consume_all(kafka_bootstrap, topic)
    assert sorted(orjson.loads(r["value"])["k"] for r in records) == list(range(50))
    again = run(produce, args[:-2] + ["--topic-partitions", "5"])  # an existing topic keeps its partitions
    assert f"topic {topic}: exists, 3 partitions" in again.stderr
    assert len(consume_all(kafka_bootstrap, topic)) == 100


def test_bootstrap_comes_from_the_services_state_or_a_clear_error(kafka_bootstrap: str, tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path, r_topic=f"svc-{uuid.uuid4().hex[:10]}")
    events = tmp_path / "r.jsonl"
    events.write_text(f'{{"ts": {BASE_TS}, "k": 1, "x": 1, "y": 0.5, "z": "q"}}\n')
    runner = CliRunner(env={"WINDJOIN_KAFKA_BOOTSTRAP": None, "WINDJOIN_SERVICES_DIR": None})
    empty = tmp_path / "no-services"
    result = runner.invoke(produce, [str(spec_path), "R", str(events), "--state-dir", str(empty)])
    assert result.exit_code == 2
    assert "no Kafka broker" in result.stderr and "windjoin services up" in result.stderr
    assert "--bootstrap" in result.stderr and "WINDJOIN_KAFKA_BOOTSTRAP" in result.stderr

    # A broker recorded by `windjoin services up` (here: the session's broker, recorded under a live pid).
    state = tmp_path / "services"
    state.mkdir()
    host, _, port = kafka_bootstrap.rpartition(":")
    entry = {"name": "kafka", "pid": os.getpid(), "host": host, "port": int(port), "log": "-", "argv": []}
    (state / "services.json").write_text(json.dumps({"version": 1, "services": {"kafka": entry}}))
    result = runner.invoke(produce, [str(spec_path), "R", str(events), "--state-dir", str(state)])
    assert result.exit_code == 0, result.output
    assert "1 events of stream R produced" in result.stderr


def workload_events(spec_path: Path, config: WorkloadConfig) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {"R": [], "S": []}
    for piece in Workload(load_spec(spec_path), config).slices():
        for name, event in zip(piece.streams, piece.events, strict=True):
            out[name].append(event)
    return out


def without_ts(events: list[dict[str, Any]]) -> Counter:
    return Counter(orjson.dumps({k: v for k, v in e.items() if k != "ts"}, option=orjson.OPT_SORT_KEYS) for e in events)


@pytest.mark.parametrize(
    ("pace", "preencode"), [(False, False), (True, False), (True, True)], ids=["no-pace", "paced", "pre-encoded"]
)
def test_generate_produces_the_workload_to_every_topic(
    kafka_bootstrap: str, topics: tuple[str, str], tmp_path: Path, pace: bool, preencode: bool
) -> None:
    """The events on each topic are exactly the pure generator's for the same seed (timestamps aside), with
    event times from the start of the run (pre-encoded: from the announced schedule time 0), and the count is near
    rate x duration (Poisson, 5 sigma)."""
    spec_path = write_spec(tmp_path, *topics)
    rate, duration, seed = 400.0, 1.5, 3
    args = ["--rate", str(rate), "--duration", str(duration), "--seed", str(seed), "--keys", "1000", "--skew", "0.8"]
    args += ["--pace" if pace else "--no-pace", "--preencode" if preencode else "--no-preencode"]
    started_ms = time.time() * 1000
    began = time.perf_counter()
    result = run(generate, [str(spec_path), *args, "--bootstrap", kafka_bootstrap])
    if preencode:  # the schedule starts once every event is encoded, at the time it announces
        started_ms = int(re.search(r"schedule time 0 at (\d+) ms", result.stderr).group(1))
    elapsed = time.perf_counter() - began
    assert result.exit_code == 0, result.output
    expected = workload_events(
        spec_path, WorkloadConfig(rate=rate, duration_s=duration, seed=seed, bias=0.8, n_keys=1000)
    )
    registry = SchemaRegistry()
    registry.register(S_SCHEMA, schema_id=42)
    codecs = {"R": codec_for("json"), "S": codec_for("avro", registry=registry, schema_id=42)}
    for stream, topic in zip(("R", "S"), topics, strict=True):
        records = consume_all(kafka_bootstrap, topic)
        assert len(records) == len(expected[stream])
        assert abs(len(records) - rate * duration) < 5 * math.sqrt(rate * duration)
        assert f"{stream} -> {topic}: {len(records)}" in result.stderr
        decoded = [codecs[stream].decode(r["value"]) for r in records]
        if stream == "S":
            assert all(e.pop("note") is None for e in decoded)
        assert without_ts(decoded) == without_ts(expected[stream])
        for rec, event in zip(records, decoded, strict=True):
            assert rec["timestamp"] == event["ts"] and rec["key"] == str(event["k"]).encode()
            assert started_ms - 1000 <= event["ts"] <= started_ms + 1000 * (duration + 1)
    if pace:
        assert elapsed >= duration
        assert "behind schedule" in result.stderr
    else:
        assert "behind schedule" not in result.stderr


def test_generate_refuses_streams_without_topics(tmp_path: Path) -> None:
    spec = yaml.safe_load(write_spec(tmp_path).read_text())
    del spec["streams"]["R"]["topic"]
    parse_spec(spec)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    result = run(generate, [str(tmp_path / "spec.yaml"), "--duration", "1", "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "['R'] have no topic" in result.stderr
