"""Avro schemas from a schema registry (Confluent's REST API), through confluent-kafka's own client.

Decoders fetch a writer schema the first time they meet its id and keep it (`RegistrySchemas`): a schema a producer
registers while the job runs is picked up by the next record that carries its id. What the registry says no to is
the record's problem (a dead letter with the reason): an id it does not know, a schema that is not an Avro record.
What it cannot answer is not (it is unreachable, or refuses our credentials): `RegistryUnavailable` fails the
batch loudly, so no record is dead-lettered for the registry's outage and the job resumes from its checkpoint.

Unknown ids cost one request each, then are remembered for `UNKNOWN_RETRY_S`; past `LOOKUPS_PER_S` lookups a
second, an unseen id is refused without asking, so a stream of made-up ids cannot stall the job on the registry.

Decoders look ids up by `registry_lookup` (GET /schemas/ids/{id}): within one deadline of `timeout_s` for the whole
lookup, the answer at most `MAX_SCHEMA_BYTES`, and only Confluent's error code 40403 taken for "unknown id" (any
other 404, such as a wrong URL answering HTML, is `RegistryUnavailable`). Producers register through confluent-kafka's
client (POST /subjects/{subject}/versions).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import httpcore
import orjson
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from fastavro import parse_schema

from windjoin.connectors.formats.avro_codec import MAX_SCHEMA_ID, SchemaRegistry
from windjoin.connectors.formats.codec_errors import UNKNOWN_SCHEMA_ID, DecodeError
from windjoin.connectors.formats.registry_lookup import Found, LookupFailed, SchemaTooLarge, UnknownId, lookup
from windjoin.connectors.secret_files import read_secret

UNKNOWN_RETRY_S = 10.0  # an id the registry did not know is asked again after this long
LOOKUPS_PER_S = 20.0  # lookups of unseen ids a decoder makes at most (a burst of as many)
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

    def user_info(self) -> str | None:
        """`user:password` for basic auth, the password read now (None without a user)."""
        if self.username is None:
            return None
        return f"{self.username}:{read_secret(self.password_file, self.password_env, 'schema_registry')}"

    def client(self) -> SchemaRegistryClient:
        config: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s, "max.retries": 2}
        user_info = self.user_info()
        if user_info is not None:
            config["basic.auth.user.info"] = user_info
        if self.ca_file is not None:
            config["ssl.ca.location"] = self.ca_file
        return SchemaRegistryClient(config)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context verifying an https registry: the spec's CA file, else certifi's (None for http)."""
        if not self.url.startswith("https://"):
            return None
        if self.ca_file is not None:
            return ssl.create_default_context(cafile=self.ca_file)
        return httpcore.default_ssl_context()

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """Register a producer's writer schema under `subject`; its id (the registry's, the same on every call)."""
        text, client = orjson.dumps(schema).decode(), self.client()
        return int(self.ask(f"subject {subject!r}", lambda: client.register_schema(subject, Schema(text, "AVRO"))))

    def ask(self, what: str, request: Callable[[], T]) -> T:
        """`request`'s answer; RegistryUnavailable naming the registry and `what` when it gives none."""
        try:
            return request()
        except SchemaRegistryError as err:
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
        self._user_info: str | None = None  # read at the first lookup, on the process that makes it
        self._refused: dict[int, tuple[float, str]] = {}  # id -> (when, why), asked again after UNKNOWN_RETRY_S
        self._allowance, self._allowance_at = LOOKUPS_PER_S, clock()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_user_info": None}  # the password is read where it is used, never shipped

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
        connection = self.connection
        if self._user_info is None:  # read outside the lookup: an unreadable password file is a configuration error
            self._user_info = connection.user_info() or ""
        source = f"schema id {schema_id} of {connection.url}"
        try:
            found = lookup(
                connection.url, schema_id, connection.timeout_s, self._user_info or None, connection.ssl_context()
            )
        except UnknownId:  # the registry's own "no such id" (error code 40403), not any 404
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"schema id {schema_id} is not in {connection.url}") from None
        except SchemaTooLarge as err:
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"{source} is refused: {err}") from None
        except LookupFailed as err:
            raise RegistryUnavailable(
                f"schema_registry {connection.url}: schema id {schema_id} not answered ({err})"
            ) from None
        return self._usable(schema_id, found, source)

    def _usable(self, schema_id: int, found: Found, source: str) -> int:
        if found.schema_type != "AVRO":
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"{source} is a {found.schema_type} schema, not Avro")
        if found.references:
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"{source} uses schema references (not supported)")
        try:
            return self._add(parse_schema(orjson.loads(found.schema)), schema_id, source=source)
        except Exception as err:  # fastavro's and ours: a schema no record can be read with
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"{source} is not usable: {err}"[:500]) from None
