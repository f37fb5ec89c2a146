"""The spec's `kafka:` section reaches every Kafka client windjoin creates, the password never leaves its file.

These tests check what reaches each real librdkafka client, on any broker: a CA file that does not exist makes the
client's construction fail naming `ssl.ca.location`, which only happens when the setting got there. The job over a
broker that speaks only SASL_SSL (Apache Kafka) is `test_kafka_sasl_tls.py` (Tansu 0.6.0 serves neither TLS nor
SCRAM users made without an authenticated broker).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaException

from windjoin.connectors.kafka.admin import list_topics
from windjoin.connectors.kafka.arrivals import KafkaArrivals
from windjoin.connectors.kafka.security import KafkaSecurity, KafkaSecurityError
from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.operators.spec import SpecError, parse_spec
from windjoin.pipelines.job.dead_letters import DeadLetterWriter, fetch_originals

BASE = {
    "window": {"kind": "time", "size_ms": 10},
    "streams": {n: {"fields": {"k": "int"}, "key": "k", "topic": n.lower()} for n in "RS"},
    "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
}
NOWHERE = "127.0.0.1:1"


def test_sasl_settings_with_the_password_read_from_its_file(tmp_path: Path):
    (tmp_path / "pw").write_text("kafka-s3cret\n")
    kafka = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "username": "windjoin-job",
        "password_file": str(tmp_path / "pw"),
        "ca_file": "/etc/windjoin/kafka/ca.crt",
    }
    security = KafkaSecurity.from_spec(parse_spec({**BASE, "kafka": kafka}).kafka)
    assert security.client_config() == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": "/etc/windjoin/kafka/ca.crt",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "windjoin-job",
        "sasl.password": "kafka-s3cret",
    }
    options = {"bootstrap.servers": NOWHERE, "topics": "r", **security.to_options()}
    assert "kafka-s3cret" not in str(options)  # what Spark's source options carry: where, never the password
    consumer = KafkaSourceOptions.from_options(options).consumer_config()
    assert consumer["sasl.password"] == "kafka-s3cret" and consumer["security.protocol"] == "SASL_SSL"
    assert consumer["group.id"] == "windjoin-kafka-source"  # the source's own settings stay


def test_the_password_from_an_environment_variable(monkeypatch):
    kafka = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "username": "u", "password_env": "KPW"}
    security = KafkaSecurity.from_spec(parse_spec({**BASE, "kafka": kafka}).kafka)
    with pytest.raises(KafkaSecurityError, match="kafka.password_env: the environment variable KPW is not set"):
        security.client_config()
    monkeypatch.setenv("KPW", "from-env")
    assert security.client_config()["sasl.password"] == "from-env"


@pytest.mark.parametrize(
    ("kafka", "says"),
    [
        ({"security_protocol": "TLS"}, "kafka.security_protocol: Input should be 'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT'"),
        ({"security_protocol": "SASL_SSL"}, "kafka: sasl_mechanism: required with SASL_SSL (one of ['PLAIN'"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"},
            "kafka.sasl_mechanism: Input should be 'PLAIN', 'SCRAM-SHA-256' or 'SCRAM-SHA-512'",
        ),
        ({"username": "u"}, "username: only used with security_protocol SASL_PLAINTEXT or SASL_SSL"),
        ({"ca_file": "/ca"}, "ca_file: only used with security_protocol SSL or SASL_SSL"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "username": "u"},
            "password_file or password_env: exactly one is required",
        ),
        ({"password": "inline"}, "kafka.password: Extra inputs are not permitted"),
    ],
)
def test_a_bad_kafka_section_names_the_key_and_what_is_accepted(kafka, says):
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, "kafka": kafka})
    assert says in str(err.value)


def test_credentials_as_source_options_are_refused():
    with pytest.raises(ValueError, match=r"kafka.sasl.password'\]: credentials go in the spec's kafka: section"):
        KafkaSourceOptions.from_options({"bootstrap.servers": NOWHERE, "topics": "r", "kafka.sasl.password": "x"})


MISSING_CA = KafkaSecurity(security_protocol="SSL", ca_file="/nonexistent/windjoin-ca.pem")


@pytest.mark.parametrize(
    "client",
    [
        pytest.param(
            lambda: Consumer(
                KafkaSourceOptions.from_options(
                    {"bootstrap.servers": NOWHERE, "topics": "r", **MISSING_CA.to_options()}
                ).consumer_config()
            ),
            id="source",
        ),
        pytest.param(lambda: KafkaArrivals(NOWHERE, ["r"], security=MISSING_CA), id="arrivals"),
        pytest.param(lambda: list_topics(NOWHERE, 1.0, MISSING_CA.client_config()), id="admin"),
        pytest.param(lambda: fetch_originals(NOWHERE, [("r", 0, 0)], MISSING_CA), id="dead-letter-originals"),
    ],
)
def test_every_client_gets_the_settings(client):
    with pytest.raises(KafkaException, match="ssl.ca.location failed"):
        client()


def test_the_dead_letter_writer_reads_its_topic_with_the_settings(caplog):
    DeadLetterWriter(NOWHERE, "dead", 1.0, security=MISSING_CA).message_limit()  # falls back to the default
    assert "ssl.ca.location failed" in caplog.text


def test_the_producer_cli_gets_the_settings(tmp_path: Path):
    import yaml

    from windjoin.pipelines.cli.main import cli

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**BASE, "kafka": {"security_protocol": "SSL", "ca_file": MISSING_CA.ca_file}}))
    (tmp_path / "r.jsonl").write_text('{"ts": 1, "k": 1}\n')
    result = CliRunner().invoke(cli, ["produce", str(spec), "R", str(tmp_path / "r.jsonl"), "--bootstrap", NOWHERE])
    assert result.exit_code != 0 and "ssl.ca.location failed" in result.output, result.output
