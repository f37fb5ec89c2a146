"""The query proxy's bearer tokens: who may read which tasks, loaded from a YAML file (e.g. a mounted Secret).

File format (only hashes are stored, so the file does not hold the secrets themselves)::

    tokens:
      - name: dashboards                # who: shows in logs and metrics, unique
        sha256: 9f86d081884c7d65...     # hex SHA-256 of the token (printf %s "$TOKEN" | sha256sum)
        tasks: [a, b]                   # the tasks it may read, or "*" for every task of the spec

A presented token is hashed and looked up; the comparison never depends on how much of a secret matched.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,100}")
ALL_TASKS = "*"


@dataclass(frozen=True)
class Client:
    """An authenticated caller: its name and the tasks it may read (None: every task)."""

    name: str
    tasks: frozenset[str] | None

    def may_read(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks


class TokenTable:
    """Token hashes -> clients; `client(token)` answers who presents it (None: nobody)."""

    def __init__(self, clients: Mapping[str, Client]) -> None:
        self._clients = dict(clients)

    def __len__(self) -> int:
        return len(self._clients)

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
            if not isinstance(entry, dict) or set(entry) != {"name", "sha256", "tasks"}:
                raise ValueError(f"{key}: a mapping with exactly the keys name, sha256, tasks")
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
            clients[digest] = Client(name, _scope(f"{key}.tasks", scope, known_tasks))
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


def token_hash(token: str) -> str:
    """The `sha256` value of a token in a tokens file."""
    return hashlib.sha256(token.encode()).hexdigest()
