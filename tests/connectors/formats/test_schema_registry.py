"""Avro through a schema registry: producers register, decoders fetch by id and keep, what the registry refuses is
the record's dead letter, what it cannot answer fails loudly. Against a server speaking Confluent's REST API
(tests/registry_server.py) with confluent-kafka's real client."""

from __future__ import annotations

import io
import json
import pickle
import re
import subprocess
import time
from pathlib import Path

import pytest
from fastavro import parse_schema, schemaless_writer

from tests.registry_server import RegistryServer
from windjoin.connectors.formats import registry_lookup, schema_registry
from windjoin.connectors.formats.codec_errors import DecodeError
from windjoin.connectors.formats.schema_registry import RegistryConnection, RegistrySchemas, RegistryUnavailable
from windjoin.connectors.formats.stream_codecs import stream_codec
from windjoin.connectors.formats.stream_encoder import stream_encoder
from windjoin.operators.spec import SpecError, parse_spec

V1 = {"type": "record", "name": "A", "fields": [{"name": "ts", "type": "long"}, {"name": "k", "type": "long"}]}
V2 = {  # a field added with a default: a compatible change a producer makes mid-run
    "type": "record",
    "name": "A",
    "fields": [*V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}],
}


def _spec(tmp_path: Path, registry: dict, schema: dict = V1) -> object:
    (tmp_path / "a.avsc").write_text(json.dumps(schema))
    return parse_spec(
        {
            "window": {"kind": "time", "size_ms": 1000},
            "streams": {
                "A": {"fields": {"k": "int"}, "topic": "a", "format": "avro", "schema": "a.avsc"},
                "B": {"fields": {"k": "int"}, "topic": "b"},
            },
            "tasks": [{"name": "t", "join": ["A", "B"], "on": [{"op": "eq", "left": "A.k", "right": "B.k"}]}],
            "schema_registry": registry,
            "base_dir": str(tmp_path),
        }
    )


def test_producer_registers_under_the_topic_subject_and_the_decoder_fetches_once(tmp_path):
    with RegistryServer() as server:
        spec = _spec(tmp_path, {"url": server.url})
        _, value, _ = stream_encoder(spec, "A").encode({"ts": 5, "k": 7})
        [schema_id] = server.subjects["a-value"]
        assert value[1:5] == schema_id.to_bytes(4, "big")  # the registry's id on the wire, not a derived one
        decoder = stream_codec(spec, "A")
        assert decoder.decode(value) == {"ts": 5, "k": 7}
        assert decoder.decode(value) == {"ts": 5, "k": 7}
        assert server.requests.count(("GET", f"/schemas/ids/{schema_id}")) == 1  # kept after the first


def test_a_schema_registered_mid_run_is_picked_up_by_a_running_decoder(tmp_path):
    with RegistryServer() as server:
        decoder = stream_codec(_spec(tmp_path, {"url": server.url}), "A")
        _, old, _ = stream_encoder(_spec(tmp_path, {"url": server.url}), "A").encode({"ts": 1, "k": 2})
        assert decoder.decode(old) == {"ts": 1, "k": 2}
        _, new, _ = stream_encoder(_spec(tmp_path, {"url": server.url}, V2), "A").encode({"ts": 3, "k": 4, "note": "n"})
        assert new[1:5] != old[1:5]
        assert decoder.decode(new) == {"ts": 3, "k": 4, "note": "n"}
        assert decoder.decode(old) == {"ts": 1, "k": 2}


def test_an_unknown_id_is_a_dead_letter_reason_and_asked_again_only_after_a_while(tmp_path):
    now = [100.0]
    with RegistryServer() as server:
        schemas = RegistrySchemas(RegistryConnection(server.url), clock=lambda: now[0])
        for _ in range(3):
            with pytest.raises(DecodeError) as err:
                schemas.find(42)
            assert err.value.reason == "unknown_schema_id" and "42" in err.value.detail
        assert server.requests.count(("GET", "/schemas/ids/42")) == 1
        server.add(V1, schema_id=42)  # registered since
        with pytest.raises(DecodeError):
            schemas.find(42)  # still remembered as unknown
        now[0] += schema_registry.UNKNOWN_RETRY_S
        assert schemas.find(42)["name"] == "A"


def test_made_up_ids_cannot_flood_the_registry(tmp_path):
    with RegistryServer() as server:
        schemas = RegistrySchemas(RegistryConnection(server.url), clock=lambda: 0.0)
        reasons = set()
        for schema_id in range(1000, 1200):
            with pytest.raises(DecodeError) as err:
                schemas.find(schema_id)
            reasons.add(err.value.reason)
        assert reasons == {"unknown_schema_id"}
        assert len(server.requests) == schema_registry.LOOKUPS_PER_S  # the burst, then refused without asking


@pytest.mark.parametrize(
    ("schema", "schema_type", "said"),
    [
        ('syntax = "proto3"; message A {}', "PROTOBUF", "not Avro"),
        ({"type": "array", "items": "long"}, None, "top-level Avro type must be a record"),
        (
            {"type": "record", "name": "Z", "fields": [{"name": "z", "type": {"type": "array", "items": "null"}}]},
            None,
            "zero bytes",
        ),
        ("{not json", None, "not usable"),
    ],
)
def test_a_schema_no_record_can_be_read_with_is_the_records_dead_letter(schema, schema_type, said):
    with RegistryServer() as server:
        schema_id = server.add(schema, schema_type)
        with pytest.raises(DecodeError) as err:
            RegistrySchemas(RegistryConnection(server.url)).find(schema_id)
        assert err.value.reason == "unknown_schema_id" and said in err.value.detail


def test_a_registry_that_cannot_answer_fails_loudly_not_the_record(tmp_path):
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    with RegistryServer(user=("svc", "s3cret")) as server:
        schema_id = server.add(V1)
        good = RegistryConnection(server.url, username="svc", password_file=str(password))
        assert RegistrySchemas(good).find(schema_id)["name"] == "A"
        wrong = tmp_path / "wrong"
        wrong.write_text("guess")
        with pytest.raises(RegistryUnavailable, match="HTTP 401") as err:
            RegistrySchemas(RegistryConnection(server.url, username="svc", password_file=str(wrong))).find(schema_id)
        assert "guess" not in str(err.value) and server.url in str(err.value)
        server.down = True
        with pytest.raises(RegistryUnavailable, match="HTTP 503"):
            RegistrySchemas(good).find(schema_id)
    with pytest.raises(RegistryUnavailable, match="unreachable"):
        RegistrySchemas(RegistryConnection(server.url, timeout_s=2)).find(schema_id)


def test_https_with_the_spec_ca_file(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    with RegistryServer(cert=(cert, key)) as server:
        schema_id = server.add(V1)
        assert RegistrySchemas(RegistryConnection(server.url, ca_file=str(cert))).find(schema_id)["name"] == "A"
        with pytest.raises(RegistryUnavailable):  # not trusted without the CA
            RegistrySchemas(RegistryConnection(server.url, timeout_s=2)).find(schema_id)


def test_decoders_travel_without_a_password():
    schemas = RegistrySchemas(RegistryConnection("http://localhost:1"))
    schemas._user_info = "svc:s3cret"  # as after a first lookup
    assert pickle.loads(pickle.dumps(schemas))._user_info is None


@pytest.mark.parametrize(
    ("registry", "stream", "said"),
    [
        ({"url": "http://u:p@registry:8081"}, {}, "schema_registry.url"),
        ({"url": "http://registry:8081", "username": "u"}, {}, "password_file or password_env"),
        ({"url": "http://registry:8081", "ca_file": "/ca.pem"}, {}, "ca_file: only used with an https"),
        ({"url": "http://registry:8081"}, {"schema_id": 3}, "streams.A.schema_id: not used with a schema_registry"),
        (None, {"schema": None}, "needs a schema file (.avsc) or a schema_registry"),
        (None, {"subject": "a-value"}, "streams.A.subject: only used with a schema_registry"),
    ],
)
def test_spec_errors_name_the_key(tmp_path, registry, stream, said):
    spec = {
        "window": {"kind": "time", "size_ms": 1000},
        "streams": {
            "A": {"fields": {"k": "int"}, "topic": "a", "format": "avro", "schema": "a.avsc", **stream},
            "B": {"fields": {"k": "int"}, "topic": "b"},
        },
        "tasks": [{"name": "t", "join": ["A", "B"]}],
    }
    if registry is not None:
        spec["schema_registry"] = registry
    spec["streams"]["A"] = {k: v for k, v in spec["streams"]["A"].items() if v is not None}
    with pytest.raises(SpecError, match=re.escape(said)):
        parse_spec(spec)


def test_a_decoder_needs_no_schema_file_with_a_registry(tmp_path):
    with RegistryServer() as server:
        schema_id = server.add(V1)
        spec = parse_spec(
            {
                "window": {"kind": "time", "size_ms": 1000},
                "streams": {
                    "A": {"fields": {"k": "int"}, "topic": "a", "format": "avro"},
                    "B": {"fields": {"k": "int"}, "topic": "b"},
                },
                "tasks": [{"name": "t", "join": ["A", "B"]}],
                "schema_registry": {"url": server.url},
            }
        )
        body = io.BytesIO()
        schemaless_writer(body, parse_schema(V1), {"ts": 9, "k": 1})
        message = b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()
        assert stream_codec(spec, "A").decode(message) == {"ts": 9, "k": 1}


def test_an_unreadable_password_file_is_named_not_taken_for_an_outage(tmp_path):
    connection = RegistryConnection("http://localhost:1", username="svc", password_file=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="schema_registry.password_file") as err:
        RegistrySchemas(connection).find(7)
    assert not isinstance(err.value, RegistryUnavailable)


def test_a_404_without_confluents_error_code_fails_the_batch_not_the_record():
    """A wrong URL answering HTML 404s was read as "unknown schema id": every Avro record dead-lettered (issue 47).
    Only error code 40403 in the JSON body means the id is unknown."""
    with RegistryServer() as server:
        schema_id = server.add(V1)
        server.not_a_registry = True
        with pytest.raises(RegistryUnavailable, match="HTTP 404, code None"):
            RegistrySchemas(RegistryConnection(server.url)).find(schema_id)
        server.not_a_registry = False
        with pytest.raises(DecodeError) as err:  # the registry's own 404 (40403) is still the record's
            RegistrySchemas(RegistryConnection(server.url)).find(schema_id + 1)
        assert err.value.reason == "unknown_schema_id"
    # a 404 JSON body of another code is not "unknown id" either
    with RegistryServer() as server, pytest.raises(RegistryUnavailable, match="HTTP 404, code 404"):
        RegistrySchemas(RegistryConnection(f"{server.url}/wrong/prefix")).find(1)


def test_a_lookup_ends_at_its_deadline_however_slowly_the_registry_trickles():
    """A registry sending a byte every 5 s held a lookup past 75 s with timeout_s=10 (issue 47): each read was
    bounded, never the lookup."""
    with RegistryServer() as server:
        schema_id = server.add(V1)
        server.trickle_s = 0.25  # each read answers within its timeout; the whole body takes ~20 s
        started = time.monotonic()
        with pytest.raises(RegistryUnavailable, match="no answer within 1 s"):
            RegistrySchemas(RegistryConnection(server.url, timeout_s=1)).find(schema_id)
        assert time.monotonic() - started < 2.0


def test_a_schema_over_the_size_cap_is_the_records_dead_letter():
    """An answer for one id is read up to MAX_SCHEMA_BYTES, never whole whatever its size (issue 47)."""
    huge = {**V1, "doc": "x" * registry_lookup.MAX_SCHEMA_BYTES}
    with RegistryServer() as server:
        schema_id = server.add(huge)
        with pytest.raises(DecodeError) as err:
            RegistrySchemas(RegistryConnection(server.url)).find(schema_id)
        assert err.value.reason == "unknown_schema_id"
        assert f"over {registry_lookup.MAX_SCHEMA_BYTES} bytes" in err.value.detail
