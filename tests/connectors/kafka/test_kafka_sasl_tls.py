"""The job's every Kafka client on a broker that speaks only SASL_SSL with SCRAM-SHA-512 (Apache Kafka,
`tests/support/secure_kafka.py`), configured by the spec's `kafka:` section alone: the source reads the input
topics, the dead-letter writer and the Kafka results sink write theirs; Parquet and a read_committed reader of
the results topic equal the brute-force oracle. And a wrong password is an error naming the spec's key."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.pipelines.pipeline_helpers import keyed_eq_spec, parquet_pairs
from tests.services_fixtures import fetch_kafka_jars
from tests.support.secure_kafka import SecureKafka, start_secure_kafka
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.dead_letter import decode_dead_letter
from windjoin.connectors.kafka.login_check import KafkaLoginError
from windjoin.connectors.kafka.producer import BatchProducer
from windjoin.connectors.kafka.results_sink import TASK_HEADER
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import start_job
from windjoin.pipelines.job.sinks import build_sinks

pytest_plugins = ["tests.services_fixtures", "tests.spark_fixtures"]

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory):
    fetch_kafka_jars()
    broker = start_secure_kafka(tmp_path_factory.mktemp("secure-kafka"))
    try:
        yield broker
    finally:
        broker.stop()


def _client(broker: SecureKafka) -> dict[str, str]:
    return {k: v for k, v in broker.client_config().items() if k != "bootstrap.servers"}


def _read_committed(broker: SecureKafka, topic: str, partitions: int) -> list:
    consumer = Consumer(
        {**broker.client_config(), "group.id": f"read-{uuid.uuid4().hex}", "isolation.level": "read_committed"}
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records = []
        while any(consumer.position([TopicPartition(topic, p)])[0].offset < end for p, end in ends.items() if end):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                records.append(message)
        return records
    finally:
        consumer.close()


@pytest.mark.slow
def test_the_job_reads_and_writes_every_topic_over_sasl_ssl_exactly(spark, secure_kafka, unique_topic, tmp_path):
    spec_dict = keyed_eq_spec(unique_topic, tmp_path)
    results, dead = unique_topic("results"), unique_topic("dead")
    spec_dict |= {
        "kafka": secure_kafka.spec_section(),
        "dead_letter_topic": dead,
        "sinks": {"parquet": {"path": str(tmp_path / "parquet")}, "kafka": {"topic": results}},
    }
    topics = [s["topic"] for s in spec_dict["streams"].values()]
    create_topics(secure_kafka.bootstrap, topics, 2, client=_client(secure_kafka))
    create_topics(secure_kafka.bootstrap, [dead, results], 1, client=_client(secure_kafka))
    events = [
        {"stream": "RS"[i % 2], "ts": BASE_TS + i, "k": i % 7, ("x" if i % 2 == 0 else "a"): i} for i in range(600)
    ]
    with BatchProducer(secure_kafka.bootstrap, _client(secure_kafka)) as producer:
        for name, stream in spec_dict["streams"].items():
            records = [
                (str(e["k"]).encode(), json.dumps({k: v for k, v in e.items() if k != "stream"}).encode(), e["ts"])
                for e in events
                if e["stream"] == name
            ]
            producer.produce_batch(stream["topic"], [*records, (b"1", b"not json", BASE_TS + 700)])
    spec = parse_spec(spec_dict)
    query = start_job(spark, spec, secure_kafka.bootstrap, build_sinks(spec), available_now=True)
    assert query.awaitTermination(300), "the job over SASL_SSL did not drain its topics within 300 s"
    assert query.exception() is None, query.exception()

    expected, late = oracle_join(spec_dict, events)
    assert not late and len(expected) > 1000
    assert as_multiset(parquet_pairs(ParquetSink(tmp_path / "parquet"), spec_dict)) == as_multiset(expected)
    records = _read_committed(secure_kafka, results, 1)
    assert all(dict(r.headers())[TASK_HEADER] == b"eq" for r in records)
    rows = [json.loads(r.value()) for r in records]
    assert as_multiset(("eq", row["R"], row["S"]) for row in rows) == as_multiset(expected)
    letters = [decode_dead_letter(r.value()) for r in _read_committed(secure_kafka, dead, 1)]
    assert sorted((letter.reason, letter.stream) for letter in letters) == [("not_json", "R"), ("not_json", "S")]


def test_a_refused_login_or_handshake_is_an_error_naming_the_spec_keys(spark, secure_kafka, unique_topic, tmp_path):
    """Before Spark starts: librdkafka alone says only "Broker transport failure" (the source's first metadata call
    failed so, naming nothing, before this check)."""
    spec_dict = keyed_eq_spec(unique_topic, tmp_path) | {"sinks": {"parquet": {"path": str(tmp_path / "parquet")}}}
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_text((secure_kafka.ca_file.parent / "server.crt").read_text())  # not the CA that signed it
    cases = {
        "password_file": (
            {"password_file": str(wrong)},
            f"refused the login of kafka.username 'windjoin-job' with kafka.sasl_mechanism SCRAM-SHA-512 and the "
            f"password in kafka.password_file {wrong}",
        ),
        "ca_file": ({"ca_file": str(other_ca)}, f"the TLS handshake with {secure_kafka.bootstrap} failed"),
        "security_protocol": (
            {
                "security_protocol": "PLAINTEXT",
                **dict.fromkeys(("sasl_mechanism", "username", "password_file", "ca_file")),
            },
            "but not in kafka.security_protocol PLAINTEXT",
        ),
    }
    for key, (change, says) in cases.items():
        spec = parse_spec(spec_dict | {"kafka": {**secure_kafka.spec_section(), **change}})
        with pytest.raises(KafkaLoginError) as err:
            start_job(spark, spec, secure_kafka.bootstrap, build_sinks(spec), available_now=True)
        assert says in str(err.value) and f"kafka.{key}" in str(err.value), (key, str(err.value))
