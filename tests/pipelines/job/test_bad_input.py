"""Bad input never breaks the job: every malformed record is dead-lettered once, with its reason and bytes.

Malformed records of many kinds are produced, interleaved with good events, to an Avro stream (Confluent wire
format, schema from an .avsc) and a JSON stream. The job runs twice (`available_now`, one checkpoint): the
second run also gets records that are late (event time over `allowed_lateness_ms` behind their partition's
latest, which only a later batch can see). Then: the job never failed; the dead-letter topic holds exactly one
letter per malformed record, with the expected reason, its stream and coordinates, and its original key and
value bytes; the sinks hold exactly the oracle's pairs over the good events.

The dead-letter topic is limited to 1 MiB (`max.message.bytes`) and some refused records are larger (up to
1.5 MB, whose base64 would make a 2 MB letter): their letters are truncated and flagged, keep the originals'
sizes and digests, and each produced record fits the limit. (The embedded broker does not enforce the limit, so
the sizes are checked here.)
"""

from __future__ import annotations

import io
import json
import random
import uuid

import pytest
from fastavro import parse_schema, schemaless_writer

from tests.pipelines.dead_letter_helpers import describes, record_batch_bytes
from tests.pipelines.pipeline_helpers import parquet_pairs, read_topic, redis_pairs
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.formats.stream_encoder import stream_encoder
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.dead_letter import DeadLetter, decode_dead_letter
from windjoin.connectors.kafka.producer import BatchProducer
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import start_job

BASE_TS = 1_700_000_000_000
STEP_MS = 10
LATENESS_MS = 5_000
SCHEMA_ID = 7
OVERSIZE_BYTES = 1_100_000  # over the codecs' default max_message_bytes (1 MiB)
DEAD_TOPIC_LIMIT = 1_048_576  # the dead-letter topic's max.message.bytes
# The broker takes records this big when the producer allows them (librdkafka's default is 1,000,000 bytes).
BIG_PRODUCER = {"message.max.bytes": 8_000_000}
A_SCHEMA = {
    "type": "record",
    "name": "A",
    "fields": [
        {"name": "ts", "type": "long"},
        {"name": "k", "type": "long"},
        {"name": "x", "type": ["long", "string"]},  # a string is valid Avro here, yet the wrong type for the join
        {"name": "pad", "type": "string", "default": ""},
    ],
}


def _avro(record: dict, schema_id: int = SCHEMA_ID, magic: int = 0) -> bytes:
    buf = io.BytesIO()
    buf.write(bytes([magic]) + schema_id.to_bytes(4, "big"))
    schemaless_writer(buf, parse_schema(A_SCHEMA), {"pad": "", **record})
    return buf.getvalue()


def _json(record: object) -> bytes:
    return json.dumps(record).encode()


def _good_events(n: int, first: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(first, first + n):
        ts, k = BASE_TS + i * STEP_MS, rng.randrange(10)
        if rng.random() < 0.5:
            out.append({"stream": "A", "ts": ts, "k": k, "x": rng.randrange(100)})
        else:
            out.append({"stream": "B", "ts": ts, "k": k, "a": rng.randrange(100)})
    return out


def _bad_records(ts: int) -> list[tuple[str, bytes | None, str]]:
    """(stream, value, expected reason) of malformed records whose event time (if any) is `ts`: on time."""
    good_a = _avro({"ts": ts, "k": 1, "x": 5})
    return [
        ("A", good_a[:5] + b"\x80\x80\x80", "bad_avro"),  # an unterminated varint
        ("A", good_a + b"\x00", "bad_avro"),  # a trailing byte
        ("A", _avro({"ts": ts, "k": 1, "x": 5}, schema_id=999), "unknown_schema_id"),
        ("A", _avro({"ts": ts, "k": 1, "x": 5}, magic=1), "bad_magic_byte"),
        ("A", b"\x00\x00", "truncated"),
        ("A", None, "null_value"),
        ("A", _avro({"ts": ts, "k": 1, "x": "seven"}), "wrong_type"),
        ("A", _avro({"ts": ts, "k": 1, "x": 2**60}), "out_of_range"),
        ("A", _avro({"ts": ts, "k": 1, "x": 5, "pad": "p" * OVERSIZE_BYTES}), "oversize"),
        ("B", b"[1, 2, 3]", "not_an_object"),
        ("B", b'"just a string"', "not_an_object"),
        ("B", b'{"ts": 17', "not_json"),
        ("B", b'{"ts": "\xff"}', "not_utf8"),
        ("B", _json({"ts": ts, "a": 1}), "missing_field"),  # no key field
        ("B", _json({"ts": ts, "k": None, "a": 1}), "missing_field"),  # a null key
        ("B", _json({"k": 1, "a": 1}), "missing_timestamp"),
        ("B", _json({"ts": "yesterday", "k": 1, "a": 1}), "bad_timestamp"),
        ("B", _json({"ts": True, "k": 1, "a": 1}), "bad_timestamp"),
        ("B", _json({"ts": ts, "k": 1, "a": "seven"}), "wrong_type"),
        ("B", _json({"ts": ts, "k": 1.5, "a": 1}), "wrong_type"),
        ("B", _json({"ts": ts, "k": 1, "a": 2**60}), "out_of_range"),
        ("B", _json({"ts": ts, "k": 1, "a": 1, "pad": "p" * OVERSIZE_BYTES}), "oversize"),
        ("B", b"{" + b"\xfe" * 1_500_000, "oversize"),  # 1.5 MB, not JSON: a letter of it cannot be whole
        ("A", b"\x00" + bytes(range(256)) * 6_000, "oversize"),
    ]


def _messages(spec, events: list[dict], bad: list[tuple[str, bytes | None, str]], rng: random.Random, tag: str):
    """Per topic: the good events' messages with the bad ones inserted at random places; and the bad ones
    by their (unique) Kafka key, with stream, value and expected reason."""
    encoders = {name: stream_encoder(spec, name) for name in spec.streams}
    per_topic: dict[str, list] = {s.topic: [] for s in spec.streams.values()}
    for event in events:
        message = encoders[event["stream"]].encode(event)
        per_topic[spec.streams[event["stream"]].topic].append((message.key, message.value, message.timestamp_ms))
    expected = {}
    for i, (stream, value, reason) in enumerate(bad):
        key = f"bad-{tag}-{i}".encode()
        records = per_topic[spec.streams[stream].topic]
        records.insert(rng.randrange(len(records) + 1), (key, value, None))
        expected[key] = (stream, value, reason)
    return per_topic, expected


def _produce(bootstrap: str, per_topic: dict[str, list]) -> None:
    with BatchProducer(bootstrap, BIG_PRODUCER) as producer:
        for topic, records in per_topic.items():
            producer.produce_batch(topic, records)


def _run(spark, spec, bootstrap: str, sinks: list) -> None:
    query = start_job(spark, spec, bootstrap, sinks, available_now=True)
    query.awaitTermination(timeout=300)
    assert not query.isActive, "the job did not finish"
    assert query.exception() is None, f"the job failed: {query.exception()}"


@pytest.mark.slow
def test_malformed_and_late_records_are_dead_lettered_once_and_the_rest_joins(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    rng = random.Random(5)
    (tmp_path / "a.avsc").write_text(json.dumps(A_SCHEMA))
    spec_dict = {
        "window": {"kind": "time", "size_ms": 200},
        "allowed_lateness_ms": LATENESS_MS,
        "streams": {
            "A": {
                "fields": {"k": "int", "x": "int"},
                "key": "k",
                "topic": unique_topic("a"),
                "format": "avro",
                "schema": "a.avsc",
                "schema_id": SCHEMA_ID,
            },
            "B": {"fields": {"k": "int", "a": "int"}, "key": "k", "topic": unique_topic("b"), "format": "json"},
        },
        "tasks": [{"name": "eq", "join": ["A", "B"], "on": [{"op": "eq", "left": "A.k", "right": "B.k"}]}],
        "partitions": 8,
        "slots": 2,
        "checkpoint": str(tmp_path / "checkpoint"),
        "dead_letter_topic": unique_topic("dead"),
    }
    spec = parse_spec({**spec_dict, "base_dir": str(tmp_path)})
    create_topics(kafka_bootstrap, [s.topic for s in spec.streams.values()], 2)
    create_topics(kafka_bootstrap, [spec.dead_letter_topic], 1, config={"max.message.bytes": str(DEAD_TOPIC_LIMIT)})
    parquet = ParquetSink(tmp_path / "parquet")
    redis_sink = RedisSink(redis_url, retain_ms=10**12, namespace=f"t{uuid.uuid4().hex[:8]}")

    # Run 1: 800 good events over 8 s of event time, malformed records on time among them.
    good_1 = _good_events(800, 0, seed=1)
    per_topic, expected_bad = _messages(spec, good_1, _bad_records(BASE_TS + 4_000), rng, "r1")
    _produce(kafka_bootstrap, per_topic)
    _run(spark, spec, kafka_bootstrap, [parquet, redis_sink])

    # Run 2: later good events, more malformed ones, and records late for their partitions: their keys are
    # those of the last events of run 1, whose partitions' latest event times are then ~8 s.
    good_2 = _good_events(300, 800, seed=2)
    bad_2 = _bad_records(BASE_TS + 9_000)[::3]
    last_a = next(e for e in reversed(good_1) if e["stream"] == "A")
    last_b = next(e for e in reversed(good_1) if e["stream"] == "B")
    late_ts = last_a["ts"] - LATENESS_MS - 1_000
    bad_2 += [
        ("A", _avro({"ts": late_ts, "k": last_a["k"], "x": 1}), "late"),
        ("B", _json({"ts": last_b["ts"] - LATENESS_MS - 1_000, "k": last_b["k"], "a": 1}), "late"),
    ]
    per_topic, expected_2 = _messages(spec, good_2, bad_2, rng, "r2")
    expected_bad.update(expected_2)
    _produce(kafka_bootstrap, per_topic)
    _run(spark, spec, kafka_bootstrap, [parquet, redis_sink])

    produced = read_topic(kafka_bootstrap, spec.dead_letter_topic)
    oversize = [(k, v) for k, v in produced if record_batch_bytes(k, v) > DEAD_TOPIC_LIMIT]
    assert not oversize, f"{len(oversize)} letters over the topic's limit: {[k for k, _ in oversize]}"
    letters = [decode_dead_letter(value) for _, value in produced]
    by_key: dict[bytes | None, list[DeadLetter]] = {}
    for letter in letters:
        by_key.setdefault(letter.key, []).append(letter)
    problems = []
    for key, (stream, value, reason) in expected_bad.items():
        found = by_key.pop(key, [])
        if len(found) != 1:
            problems.append(f"{key!r} ({reason}): {len(found)} dead letters")
            continue
        letter = found[0]
        if (letter.reason, letter.stream, letter.topic) != (reason, stream, spec.streams[stream].topic):
            problems.append(f"{key!r}: reason/stream/topic {letter.reason, letter.stream, letter.topic}, want {reason}")
        if not (describes(letter, "key", key) and describes(letter, "value", value)):
            problems.append(f"{key!r} ({reason}): the letter does not describe the original key and value")
        if letter.truncated is (letter.value == value):  # whole letters are complete, cut ones flagged
            problems.append(f"{key!r} ({reason}): truncated is {letter.truncated} for a value of {len(value or b'')}")
        if not letter.detail:
            problems.append(f"{key!r} ({reason}): no detail")
    for key, extra in by_key.items():  # good events refused, or letters nobody asked for
        problems += [f"unexpected dead letter {key!r}: {x.reason} {x.detail}" for x in extra]
    assert not problems, "\n".join(problems)
    assert len(expected_bad) >= 30
    assert sum(letter.truncated for letter in letters) >= 5 and max(len(v) for _, v in produced) > 1_000_000

    good = sorted(good_1 + good_2, key=lambda e: e["ts"])
    expected, late = oracle_join(spec_dict, good)
    assert not late and len(expected) > 300
    assert as_multiset(parquet_pairs(parquet, spec_dict)) == as_multiset(expected)
    assert as_multiset(redis_pairs(redis_sink, spec_dict)) == as_multiset(expected)
    redis_sink.close()
