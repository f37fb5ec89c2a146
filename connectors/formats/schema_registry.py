"""Avro schemas from a schema registry (Confluent's REST API), through confluent-kafka's own client.

Decoders fetch a writer schema the first time they meet its id and keep it (`RegistrySchemas`): a schema a producer
registers while the job runs is picked up by the next record that carries its id. What the registry says no to is
the record's problem (a dead letter with the reason): an id it does not know, a schema that is not an Avro record.
What it cannot answer is not (it is unreachable, or refuses our credentials): `RegistryUnavailable` fails the
batch loudly, so no record is dead-lettered for the registry's outage and the job resumes from its checkpoint.

Unknown ids cost one request each, then are remembered for `UNKNOWN_RETRY_S`; past `LOOKUPS_PER_S` lookups a
second, an unseen id is refused without asking, so a stream of made-up ids cannot stall the job on the registry.

Requests of the client used: GET /schemas/ids/{id} (decoders) and POST /subjects/{subject}/versions (producers).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import orjson
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from fastavro import parse_schema

from windjoin.connectors.formats.avro_codec import MAX_SCHEMA_ID, SchemaRegistry
from windjoin.connectors.formats.codec_errors import UNKNOWN_SCHEMA_ID, DecodeError
from windjoin.connectors.secret_files import read_secret

UNKNOWN_RETRY_S = 10.0  # an id the registry did not know is asked again after this long
LOOKUPS_PER_S = 20.0  # lookups of unseen ids a decoder makes at most (a burst of as many)
_NOT_FOUND = 404
T = TypeVar("T")


class RegistryUnavailable(RuntimeError):
    """The registry could not answer (unreachable, a server error, our credentials refused): not the record's
    fault, so the batch fails rather than dead-letter it. The message names the registry, never a credential."""


@dataclass(frozen=True)
class RegistryConnection:
    """Where the registry is and how to log in: the password is read when a client is built, on that process."""

    url: str
    username: str | None = None
    password_file: str | None = None
    password_env: str | None = None
    ca_file: str | None = None
    timeout_s: float = 10.0

    @staticmethod
    def from_spec(registry: Any) -> RegistryConnection:
        """From a validated `operators.spec.SchemaRegistrySpec`."""
        return RegistryConnection(**{f.name: getattr(registry, f.name) for f in fields(RegistryConnection)})

    def client(self) -> SchemaRegistryClient:
        config: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s, "max.retries": 2}
        if self.username is not None:
            password = read_secret(self.password_file, self.password_env, "schema_registry")
            config["basic.auth.user.info"] = f"{self.username}:{password}"
        if self.ca_file is not None:
            config["ssl.ca.location"] = self.ca_file
        return SchemaRegistryClient(config)

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """Register a producer's writer schema under `subject`; its id (the registry's, the same on every call)."""
        text, client = orjson.dumps(schema).decode(), self.client()
        return int(self.ask(f"subject {subject!r}", lambda: client.register_schema(subject, Schema(text, "AVRO"))))

    def ask(self, what: str, request: Callable[[], T]) -> T:
        """`request`'s answer; RegistryUnavailable naming the registry and `what` when it gives none (a 404 is left
        to the caller, as the client's SchemaRegistryError)."""
        try:
            return request()
        except SchemaRegistryError as err:
            if err.http_status_code == _NOT_FOUND:
                raise
            raise RegistryUnavailable(
                f"schema_registry {self.url}: {what} not answered (HTTP {err.http_status_code}, code {err.error_code})"
            ) from None
        except Exception as err:  # transport errors: httpx's, with no stable base class here
            raise RegistryUnavailable(f"schema_registry {self.url}: unreachable ({type(err).__name__})") from None


class RegistrySchemas(SchemaRegistry):
    """A `SchemaRegistry` that fetches the ids it does not hold from a schema registry, and keeps them."""

    def __init__(self, connection: RegistryConnection, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.connection = connection
        self._clock = clock
        self._client: SchemaRegistryClient | None = None
        self._refused: dict[int, tuple[float, str]] = {}  # id -> (when, why), asked again after UNKNOWN_RETRY_S
        self._allowance, self._allowance_at = LOOKUPS_PER_S, clock()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}  # a client is built where it is used

    def find(self, schema_id: int) -> dict[str, Any]:
        """The parsed schema of `schema_id`, fetched if new; DecodeError (unknown_schema_id) if the registry
        does not hold a usable one; RegistryUnavailable if it cannot answer."""
        held = self._parsed.get(schema_id)
        if held is not None:
            return held
        now = self._clock()
        refused = self._refused.get(schema_id)
        if refused is not None and now - refused[0] < UNKNOWN_RETRY_S:
            raise DecodeError(UNKNOWN_SCHEMA_ID, refused[1])
        if not self._take_lookup(now):
            raise DecodeError(
                UNKNOWN_SCHEMA_ID,
                f"schema id {schema_id} not looked up: over {LOOKUPS_PER_S:g} lookups of new ids a second",
            )
        try:
            return self._parsed[self._fetch(schema_id)]
        except DecodeError as err:
            if len(self._refused) >= 10_000:
                self._refused.clear()
            self._refused[schema_id] = (now, err.detail)
            raise

    def _take_lookup(self, now: float) -> bool:
        self._allowance = min(LOOKUPS_PER_S, self._allowance + (now - self._allowance_at) * LOOKUPS_PER_S)
        self._allowance_at = now
        if self._allowance < 1:
            return False
        self._allowance -= 1
        return True

    def _fetch(self, schema_id: int) -> int:
        if not 0 <= schema_id <= MAX_SCHEMA_ID:
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"schema id {schema_id} is out of the registry's range")
        if self._client is None:  # built outside `ask`: an unreadable password file is a configuration error
            self._client = self.connection.client()
        client = self._client
        try:
            schema = self.connection.ask(f"schema id {schema_id}", lambda: client.get_schema(schema_id))
        except SchemaRegistryError:  # a 404: the registry does not hold it
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"schema id {schema_id} is not in {self.connection.url}") from None
        return self._usable(schema_id, schema)

    def _usable(self, schema_id: int, schema: Schema) -> int:
        source = f"schema id {schema_id} of {self.connection.url}"
        if (schema.schema_type or "AVRO") != "AVRO":
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"{source} is a {schema.schema_type} schema, not Avro")
        if schema.references:
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"{source} uses schema references (not supported)")
        try:
            return self._add(parse_schema(orjson.loads(schema.schema_str)), schema_id, source=source)
        except Exception as err:  # fastavro's and ours: a schema no record can be read with
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"{source} is not usable: {err}"[:500]) from None
