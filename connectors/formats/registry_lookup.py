"""One schema lookup by id (`GET /schemas/ids/{id}` of Confluent's REST API) within an overall deadline and a size
cap, its answer told apart: the schema, "no such id", or no answer.

confluent-kafka's client bounds each socket read only, so a registry trickling a byte every 5 s held a lookup past
75 s with `timeout_s=10`; and it raised the same error for every 404, so a wrong URL answering HTML was read as
"unknown schema id" and every Avro record was dead-lettered. Here every socket operation of a lookup gets the time
left of one deadline (httpcore's network backend, wrapped), the body is read up to `MAX_SCHEMA_BYTES`, and only a
404 whose JSON body carries Confluent's error code 40403 means the id is unknown.
"""

from __future__ import annotations

import base64
import ssl
import time
from dataclasses import dataclass
from typing import Any

import httpcore
import orjson

MAX_SCHEMA_BYTES = 1 << 20  # a registry's answer for one id (the schema's text and its envelope), at most
SCHEMA_NOT_FOUND = 40403  # Confluent's error code for an id the registry does not hold
_RETRIED = {408, 429, 500, 502, 503, 504}  # answers worth one more try while time is left
_ATTEMPTS = 3


class LookupFailed(Exception):
    """The registry gave no answer about the id (the message says why, never a credential)."""


class UnknownId(Exception):
    """The registry answered that it does not hold the id (a 404 with error code 40403)."""


class SchemaTooLarge(Exception):
    """The registry's answer for the id is over MAX_SCHEMA_BYTES."""


@dataclass(frozen=True)
class Found:
    """The registry's answer for an id: the schema's text, its type and references as sent."""

    schema: str
    schema_type: str
    references: list[Any]


def lookup(
    url: str,
    schema_id: int,
    timeout_s: float,
    user_info: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Found:
    """The schema of `schema_id` at the registry `url`, answered within `timeout_s` in all (every try included);
    UnknownId, SchemaTooLarge or LookupFailed otherwise."""
    deadline = time.monotonic() + timeout_s
    headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
    if user_info is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode()
    target = f"{url.rstrip('/')}/schemas/ids/{schema_id}"
    backend, attempt = _DeadlineBackend(deadline), 0
    while True:
        attempt += 1
        last = attempt >= _ATTEMPTS or time.monotonic() >= deadline
        try:
            with httpcore.ConnectionPool(ssl_context=ssl_context, network_backend=backend, retries=0) as pool:
                status, body = _get(pool, target, headers, timeout_s)
        except (httpcore.TimeoutException, _DeadlinePassed):
            raise LookupFailed(f"no answer within {timeout_s:g} s") from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol, OSError) as err:
            if last:
                raise LookupFailed(f"unreachable ({type(err).__name__})") from None
            continue
        if status == 200:
            return _found(body)
        code = _error_code(body)
        if status == 404 and code == SCHEMA_NOT_FOUND:
            raise UnknownId()
        if status not in _RETRIED or last:
            raise LookupFailed(f"HTTP {status}, code {code}")


def _get(pool: httpcore.ConnectionPool, target: str, headers: dict[str, str], timeout_s: float) -> tuple[int, bytes]:
    timeouts = {"connect": timeout_s, "read": timeout_s, "write": timeout_s, "pool": timeout_s}
    with pool.stream("GET", target, headers=headers, extensions={"timeout": timeouts}) as response:
        body = bytearray()
        for chunk in response.iter_stream():
            body += chunk
            if len(body) > MAX_SCHEMA_BYTES:
                if response.status == 200:
                    raise SchemaTooLarge(f"its answer is over {MAX_SCHEMA_BYTES} bytes")
                break  # an error page: its first bytes say enough
        return response.status, bytes(body)


def _found(body: bytes) -> Found:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise LookupFailed("HTTP 200 without a JSON body (not a schema registry?)") from None
    if not isinstance(data, dict) or not isinstance(data.get("schema"), str):
        raise LookupFailed("HTTP 200 without a schema (not a schema registry?)")
    references = data.get("references") or []
    references = references if isinstance(references, list) else [references]  # any: refused as references
    return Found(data["schema"], str(data.get("schemaType") or "AVRO"), references)


def _error_code(body: bytes) -> int | None:
    """Confluent's error code in an error answer's JSON body (None for HTML, text or anything else)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    code = data.get("error_code") if isinstance(data, dict) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


class _DeadlinePassed(Exception):
    """The lookup's deadline came before a socket operation."""


def _time_left(deadline: float, timeout: float | None) -> float:
    """The seconds a socket operation may take: its own timeout, at most what is left before the deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _DeadlinePassed()
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation waits at most the time left before the lookup's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self.inner, self.deadline = inner, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _time_left(self.deadline, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _time_left(self.deadline, timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        inner = self.inner.start_tls(ssl_context, server_hostname, _time_left(self.deadline, timeout))
        return _DeadlineStream(inner, self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own sockets, each operation bounded by the time left before one deadline."""

    def __init__(self, deadline: float) -> None:
        self.inner, self.deadline = httpcore.SyncBackend(), deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        stream = self.inner.connect_tcp(host, port, _time_left(self.deadline, timeout), local_address, socket_options)
        return _DeadlineStream(stream, self.deadline)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
