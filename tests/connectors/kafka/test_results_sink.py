"""The Kafka results sink: records as documented (values as Parquet's rows, key, timestamp, task header), a piece
written once per batch for `read_committed` readers however often it is staged, zombies fenced, the owner
fence's records; on Apache Kafka. And the reproduction on Tansu of what it lacks: a new producer's
`init_transactions` makes the open transaction of the one it fences visible instead of aborting it."""

from __future__ import annotations

import pickle
import time
import uuid
from collections.abc import Callable

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.result_records import (
    avro_encoder,
    avro_schema,
    json_values,
    key_fields,
    record_keys,
    record_timestamps,
)
from windjoin.connectors.kafka.results_sink import (
    TASK_HEADER,
    KafkaResultsSink,
    KafkaTarget,
    PieceWriter,
    close_writers,
    piece_group,
)
from windjoin.operators.result_table import result_schema, table_from_records
from windjoin.operators.sink_owner import CheckpointId, StaleBatchError
from windjoin.operators.spec import SpecError, parse_spec

pytest_plugins = ["tests.services_fixtures"]

SPEC = {
    "window": {"kind": "time", "size_ms": 100},
    "streams": {
        "R": {"fields": {"k": "int", "s": "string", "f": "float"}, "key": "k"},
        "S": {"fields": {"k": "int", "b": "bool"}, "key": "k"},
    },
    "tasks": [
        {"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
        {"name": "lo", "type": "left", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
    ],
}


@pytest.fixture(autouse=True)
def _writers_closed():
    yield
    close_writers()


def _rows(batch: int, n: int = 5, text: str = "x") -> list[dict]:
    return [
        {
            "R": {"ts": batch * 100 + i, "k": i, "s": text, "f": i / 3},
            "S": {"ts": batch * 100 + 2 * i, "k": i, "b": i % 2 == 0},
        }
        for i in range(n)
    ]


def _table(spec, task: str, batch: int, rows: list[dict]):
    return table_from_records(spec, task, rows, batch, 1_700_000_000_000)


def test_values_are_the_rows_as_parquet_holds_them_fast_path_or_not():
    spec = parse_spec(SPEC)
    lone = {"R": {"ts": 7, "k": 9, "s": "y", "f": 1.0}, "S": None}
    for text in ("plain", 'a "quote", a \\ and a \n'):  # the second takes orjson's row path
        table = _table(spec, "lo", 3, [*_rows(3, text=text), lone])
        decoded = [orjson.loads(v) for v in json_values(table)]
        assert decoded == table.to_pylist()
        assert decoded[-1]["S"] is None and decoded[-1]["batch_id"] == 3
    assert record_keys(table, key_fields(spec, "lo")) == [b"0", b"1", b"2", b"3", b"4", b"9"]
    assert record_timestamps(table) == [300, 302, 304, 306, 308, 7]  # the latest of the tuples' times


def test_no_key_without_keyed_streams_and_avro_round_trip():
    plain = {**SPEC, "streams": {n: {"fields": s["fields"]} for n, s in SPEC["streams"].items()}}
    spec = parse_spec(plain)
    assert key_fields(spec, "eq") is None
    table = _table(spec, "lo", 1, [*_rows(1), {"R": {"ts": 7, "k": 9, "s": "y", "f": 1.0}, "S": None}])
    assert record_keys(table, None) is None
    import io

    from fastavro import parse_schema, schemaless_reader

    schema = avro_schema(spec, "lo", result_schema(spec, "lo"))
    values = avro_encoder(schema, 42)(table)
    assert all(v[:5] == b"\x00\x00\x00\x00\x2a" for v in values)
    parsed = parse_schema(schema)
    assert [schemaless_reader(io.BytesIO(v[5:]), parsed) for v in values] == table.to_pylist()


def test_spec_errors_name_the_keys():
    with pytest.raises(SpecError) as err:
        parse_spec({**SPEC, "sinks": {"kafka": {"topic": "bad topic", "format": "xml"}}})
    assert "sinks.kafka.topic" in str(err.value) and "sinks.kafka.format: Input should be 'json' or 'avro'" in str(
        err.value
    )
    with pytest.raises(SpecError, match="sinks.kafka.topic: Field required"):
        parse_spec({**SPEC, "sinks": {"kafka": {}}})


def _read_committed(bootstrap: str, topic: str, partitions: int, timeout_s: float = 20.0) -> list:
    """Every record a read_committed reader gets from the start to the partitions' ends."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}", "isolation.level": "read_committed"}
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records, deadline = [], time.monotonic() + timeout_s
        while any(consumer.position([TopicPartition(topic, p)])[0].offset < end for p, end in ends.items() if end):
            assert time.monotonic() < deadline, f"not read to {ends} in time"
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                records.append(message)
        return records
    finally:
        consumer.close()


@pytest.fixture
def claimed(apache_kafka_bootstrap: str, unique_topic: Callable[..., str]):
    spec = parse_spec(SPEC)
    topic = unique_topic("results")
    create_topics(apache_kafka_bootstrap, topic, 3)
    sink = KafkaResultsSink(topic, apache_kafka_bootstrap, keys={t: key_fields(spec, t) for t in ("eq", "lo")})
    checkpoint = CheckpointId(str(uuid.uuid4()), "/checkpoints/a")
    for task in ("eq", "lo"):
        assert sink.owner(task) is None and not sink.holds_results(task)
        sink.claim(task, checkpoint)
    return spec, sink, checkpoint


def test_each_piece_is_read_once_however_often_it_is_staged(claimed, apache_kafka_bootstrap):
    spec, sink, _ = claimed
    executor = pickle.loads(pickle.dumps(sink))  # as the slots get it
    want = []
    for batch in range(3):
        pieces = {0: _table(spec, "eq", batch, _rows(batch)), 1: _table(spec, "eq", batch, _rows(batch, 3, "y"))}
        for piece, table in pieces.items():
            assert executor.stage(batch, piece, {"eq": table}) == {"eq": table.num_rows}
            assert executor.stage(batch, piece, {"eq": table}) == {}  # a replay's staging: written already
            want += table.to_pylist()
        assert sink.commit(batch, {"eq": [0, 1], "lo": []}) == ["eq", "lo"]
        assert sink.commit(batch, {"eq": [0, 1], "lo": []}) == []  # a replay's commit
    records = _read_committed(apache_kafka_bootstrap, sink.topic, 3)

    def order(row: dict) -> tuple:
        return row["batch_id"], row["R"]["ts"], row["R"]["s"]

    assert sorted((orjson.loads(r.value()) for r in records), key=order) == sorted(want, key=order)
    for record in records:
        assert record.headers() == [(TASK_HEADER, b"eq")]
        row = orjson.loads(record.value())
        assert record.key() == str(row["R"]["k"]).encode()
        result_time = max(row["R"]["ts"], row["S"]["ts"])
        if result_time:  # 0, the epoch, is stamped with the producer's clock (librdkafka reads 0 as "now")
            assert record.timestamp()[1] == result_time
    with pytest.raises(StaleBatchError):
        executor.stage(1, 0, {"eq": _table(spec, "eq", 1, _rows(1))})
    with pytest.raises(StaleBatchError):
        sink.commit(1, {"eq": [0]})


def test_a_zombie_attempt_is_fenced_and_its_open_transaction_never_read(claimed, apache_kafka_bootstrap):
    spec, sink, checkpoint = claimed
    table = _table(spec, "eq", 0, _rows(0))
    target = KafkaTarget(apache_kafka_bootstrap, sink.topic)
    zombie = PieceWriter(target, piece_group(sink.topic, "eq", checkpoint.run_id, 0))
    zombie.producer.begin_transaction()  # an attempt killed while it wrote: its records sent, never committed
    for value in json_values(table):
        zombie.producer.produce(sink.topic, value, partition=0)
    zombie.producer.flush(30)
    assert pickle.loads(pickle.dumps(sink)).stage(0, 0, {"eq": table}) == {"eq": 5}  # the next attempt fences it
    with pytest.raises(Exception, match="fenced"):
        zombie.producer.commit_transaction(30)
    records = _read_committed(apache_kafka_bootstrap, sink.topic, 3)
    zombie.close()
    got = sorted((r.partition(), r.offset(), r.value()) for r in records)
    assert sorted(v for *_, v in got) == sorted(json_values(table)), got


def test_the_owner_fence_records(claimed):
    spec, sink, checkpoint = claimed
    assert sink.owner("eq") == checkpoint and not sink.holds_results("eq")
    sink.stage(0, 0, {"eq": _table(spec, "eq", 0, _rows(0))})
    assert sink.holds_results("eq") and not sink.holds_results("lo")  # a written piece is held, before a commit
    fresh = KafkaResultsSink(sink.topic, sink.bootstrap)
    assert fresh.owner("eq") == checkpoint  # the run in the groups' names, the path in the ledger's metadata
    fresh.clear("eq")
    assert fresh.owner("eq") is None and not fresh.holds_results("eq")
    other = CheckpointId(str(uuid.uuid4()), "/checkpoints/b")
    fresh.claim("eq", other)
    assert fresh.owner("eq") == other
    assert fresh.stage(0, 0, {"eq": _table(spec, "eq", 0, _rows(0))}) == {"eq": 5}  # the new run writes batch 0


def test_tansu_makes_a_fenced_transaction_visible_instead_of_aborting_it(tansu_bootstrap, unique_topic):
    """The reproduction: what a kill -9 during staging leaves (an open transaction) becomes visible to
    read_committed readers when the restarted producer fences it, so Tansu cannot keep a piece exactly once."""
    topic = unique_topic("tansu-txn")
    create_topics(tansu_bootstrap, topic, 1)
    transactional_id = f"repro-{uuid.uuid4().hex}"
    first = Producer({"bootstrap.servers": tansu_bootstrap, "transactional.id": transactional_id})
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, b"committed", partition=0)
    first.commit_transaction(30)
    first.begin_transaction()
    first.produce(topic, b"open", partition=0)
    first.flush(30)  # killed here: never committed
    assert [r.value() for r in _read_until(tansu_bootstrap, topic, 1)] == [b"committed"]
    second = Producer({"bootstrap.servers": tansu_bootstrap, "transactional.id": transactional_id})
    second.init_transactions(30)  # Apache Kafka aborts the open transaction here
    assert [r.value() for r in _read_until(tansu_bootstrap, topic, 2)] == [b"committed", b"open"]


def _read_until(bootstrap: str, topic: str, count: int, quiet_s: float = 2.0) -> list:
    """read_committed from the start until `count` records, then `quiet_s` more (nothing else may come)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}", "isolation.level": "read_committed"}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        records, deadline, quiet = [], time.monotonic() + 20, None
        while time.monotonic() < (deadline if quiet is None else quiet):
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                records.append(message)
            if quiet is None and len(records) >= count:
                quiet = time.monotonic() + quiet_s
        return records
    finally:
        consumer.close()


def test_avro_records_carry_the_ids_the_registry_gave_each_task(apache_kafka_bootstrap, unique_topic):
    """`sinks.kafka.format: avro` through the spec's registry: each task's schema registered under
    `<topic>-windjoin.results.<task>` at build, records in Confluent's framing with that id, decoded by it."""
    from tests.registry_server import RegistryServer
    from windjoin.pipelines.job.sinks import bind_job_broker, build_sinks

    topic = unique_topic("avro-results")
    create_topics(apache_kafka_bootstrap, topic, 1)
    with RegistryServer() as registry:
        spec = parse_spec(
            {**SPEC, "schema_registry": {"url": registry.url}, "sinks": {"kafka": {"topic": topic, "format": "avro"}}}
        )
        [sink] = build_sinks(spec)
        bind_job_broker([sink], apache_kafka_bootstrap)
        assert sorted(registry.subjects) == [f"{topic}-windjoin.results.eq", f"{topic}-windjoin.results.lo"]
        sink.claim("lo", CheckpointId(str(uuid.uuid4()), "/checkpoints/avro"))
        table = _table(spec, "lo", 0, [*_rows(0), {"R": {"ts": 7, "k": 9, "s": "y", "f": 1.0}, "S": None}])
        assert sink.stage(0, 0, {"lo": table}) == {"lo": 6}
        [schema_id] = registry.subjects[f"{topic}-windjoin.results.lo"]
        schema = orjson.loads(registry.schemas[schema_id]["schema"])
    import io

    from fastavro import parse_schema, schemaless_reader

    records = _read_committed(apache_kafka_bootstrap, topic, 1)
    assert all(r.value()[:5] == b"\x00" + schema_id.to_bytes(4, "big") for r in records)
    parsed = parse_schema(schema)
    assert [schemaless_reader(io.BytesIO(r.value()[5:]), parsed) for r in records] == table.to_pylist()


def test_avro_needs_the_registry():
    from windjoin.pipelines.job.sinks import build_sinks

    spec = parse_spec({**SPEC, "sinks": {"kafka": {"topic": "out", "format": "avro"}}})
    with pytest.raises(ValueError, match="sinks.kafka.format: 'avro' needs the spec's schema_registry"):
        build_sinks(spec)


def test_the_job_fence_refuses_another_checkpoint_unless_fresh(claimed):
    from windjoin.pipelines.job.sink_fence import SinkOwnerError, fence_sinks

    spec, sink, checkpoint = claimed
    sink.stage(0, 0, {"eq": _table(spec, "eq", 0, _rows(0))})
    sink.commit(0, {"eq": [0]})  # "lo" has no batch committed: it holds nothing
    assert fence_sinks([sink], ["eq", "lo"], checkpoint, fresh=False) == []  # a restart on the same checkpoint
    other = CheckpointId(str(uuid.uuid4()), "/checkpoints/b")
    with pytest.raises(SinkOwnerError, match=f"topic {sink.topic} task eq .* written by checkpoint /checkpoints/a"):
        fence_sinks([KafkaResultsSink(sink.topic, sink.bootstrap)], ["eq", "lo"], other, fresh=False)
    fresh = KafkaResultsSink(sink.topic, sink.bootstrap)
    [cleared] = fence_sinks([fresh], ["eq", "lo"], other, fresh=True)  # "lo" holds nothing: claimed silently
    assert "fresh sinks: cleared Kafka" in cleared and fresh.owner("eq") == other == fresh.owner("lo")
    assert pickle.loads(pickle.dumps(fresh)).stage(0, 0, {"eq": _table(spec, "eq", 0, _rows(0))}) == {"eq": 5}


def test_on_tansu_the_sink_writes_each_piece_at_least_once(tansu_bootstrap, unique_topic):
    """Tansu keeps no transactions, but what the sink writes there is read (at least once)."""
    spec = parse_spec(SPEC)
    topic = unique_topic("tansu-results")
    create_topics(tansu_bootstrap, topic, 1)
    sink = KafkaResultsSink(topic, tansu_bootstrap)
    sink.claim("eq", CheckpointId(str(uuid.uuid4()), "/checkpoints/t"))
    table = _table(spec, "eq", 0, _rows(0))
    assert sink.stage(0, 0, {"eq": table}) == {"eq": 5} and sink.stage(0, 0, {"eq": table}) == {}
    assert sink.commit(0, {"eq": [0]}) == ["eq"] and sink.last_committed("eq") == 0
    assert sorted(r.value() for r in _read_until(tansu_bootstrap, topic, 5)) == sorted(json_values(table))
