"""The query proxy's bearer tokens: who may read which tasks, loaded from a YAML file (e.g. a mounted Secret).

File format (only hashes are stored, so the file does not hold the secrets themselves)::

    tokens:
      - name: dashboards                # who: shows in logs and metrics, unique
        sha256: 9f86d081884c7d65...     # hex SHA-256 of the token (printf %s "$TOKEN" | sha256sum)
        tasks: [a, b]                   # the tasks it may read, or "*" for every task of the spec
        expires: 2027-01-31T00:00:00Z   # optional: refused (401) from then on; ISO-8601 with a time zone

A presented token is hashed and looked up; the comparison never depends on how much of a secret matched.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,100}")
ALL_TASKS = "*"
_KEYS, _OPTIONAL_KEYS = {"name", "sha256", "tasks"}, {"expires"}


@dataclass(frozen=True)
class Client:
    """An authenticated caller: its name, the tasks it may read (None: every task), when its token stops
    being accepted (None: never) and the SHA-256 of the token it presented (None: no token, authentication off)."""

    name: str
    tasks: frozenset[str] | None
    expires: datetime | None = None
    sha256: str | None = None

    def may_read(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and now >= self.expires


class Tokens(Protocol):
    """Who presents a token (`TokenTable`, or `token_file.TokenFile` following a file); `refresh()` is called
    before each lookup and says whether a reload happened ("reloaded", "failed", "revoked" or None)."""

    def client(self, token: str) -> Client | None: ...

    def admits(self, client: Client) -> bool: ...

    def refresh(self) -> str | None: ...


class TokenTable:
    """Token hashes -> clients; `client(token)` answers who presents it (None: nobody)."""

    def __init__(self, clients: Mapping[str, Client]) -> None:
        self._clients = dict(clients)

    def __len__(self) -> int:
        return len(self._clients)

    def refresh(self) -> str | None:
        """Nothing to re-read: a table made from data stays as it is (`token_file.TokenFile` follows a file)."""
        return None

    def admits(self, client: Client) -> bool:
        """Whether a client authenticated earlier still has its token here, with the same digest, name, tasks and
        expiry (an open stream of a revoked, rotated or changed token ends)."""
        return client.sha256 is not None and self._clients.get(client.sha256) == client

    def client(self, token: str) -> Client | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        found = None
        for known, client in self._clients.items():  # constant time per entry, whichever matches
            if hmac.compare_digest(known, digest):
                found = client
        return found

    @classmethod
    def from_file(cls, path: str | Path, tasks: Iterable[str]) -> TokenTable:
        """The table of a tokens file; ValueError naming the file, the key and what is accepted when it is bad."""
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as err:
            raise ValueError(f"tokens file {path}: cannot be read ({err.strerror or err})") from None
        except yaml.YAMLError as err:
            raise ValueError(f"tokens file {path}: not YAML ({err})") from None
        try:
            return cls.from_data(data, tasks)
        except ValueError as err:
            raise ValueError(f"tokens file {path}: {err}") from None

    @classmethod
    def from_data(cls, data: Any, tasks: Iterable[str]) -> TokenTable:
        known_tasks = list(tasks)
        if not isinstance(data, dict) or set(data) != {"tokens"} or not isinstance(data["tokens"], list):
            raise ValueError('the top level must be a mapping with one key, "tokens": a list of tokens')
        if not data["tokens"]:
            raise ValueError("tokens: empty (at least one token is needed; nobody could read anything)")
        clients: dict[str, Client] = {}
        names: set[str] = set()
        for i, entry in enumerate(data["tokens"]):
            key = f"tokens[{i}]"
            if not isinstance(entry, dict) or not _KEYS <= set(entry) <= _KEYS | _OPTIONAL_KEYS:
                raise ValueError(f"{key}: a mapping with the keys name, sha256, tasks and optionally expires")
            name, digest, scope = entry["name"], entry["sha256"], entry["tasks"]
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ValueError(f"{key}.name: {str(name)[:100]!r} is not accepted (accepted: {_NAME.pattern})")
            if name in names:
                raise ValueError(f"{key}.name: {name!r} is used by another token (names are unique)")
            if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
                raise ValueError(f"{key}.sha256: not 64 lowercase hex digits (the SHA-256 of the token)")
            if digest in clients:
                raise ValueError(f"{key}.sha256: the same token as {clients[digest].name!r}")
            names.add(name)
            expires = _expiry(f"{key}.expires", entry["expires"]) if "expires" in entry else None
            clients[digest] = Client(name, _scope(f"{key}.tasks", scope, known_tasks), expires, digest)
        return cls(clients)


def _scope(key: str, scope: Any, known: list[str]) -> frozenset[str] | None:
    if scope == ALL_TASKS:
        return None
    if not isinstance(scope, list) or not scope or not all(isinstance(t, str) for t in scope):
        raise ValueError(f'{key}: "*" or a non-empty list of task names (from {known})')
    unknown = [t for t in scope if t not in known]
    if unknown:
        raise ValueError(f"{key}: {unknown} not among the spec's tasks {known}")
    return frozenset(scope)


def _expiry(key: str, value: Any) -> datetime:
    """The UTC instant of an `expires` value: YAML's own timestamp or an ISO-8601 string, with a time zone (a
    local time would mean different instants on different machines)."""
    accepted = "an ISO-8601 date and time with a time zone, e.g. 2027-01-31T00:00:00Z"
    when = value
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{key}: {value[:100]!r} is not accepted (accepted: {accepted})") from None
    if not isinstance(when, datetime) or when.utcoffset() is None:
        raise ValueError(f"{key}: {str(value)[:100]!r} is not accepted (accepted: {accepted})")
    return when.astimezone(UTC)


def token_hash(token: str) -> str:
    """The `sha256` value of a token in a tokens file."""
    return hashlib.sha256(token.encode()).hexdigest()
