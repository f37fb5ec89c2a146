"""Redis ACL users, one per component, each limited to the keys and commands its code uses.

Keys of one namespace `ns` (see `redis_sink`, `load_reports`, `control_decisions`):
  results  `ns:{task}:index`, `ns:{task}:pieces` (zsets), `ns:{task}:meta` (hash), `ns:{task}:feed` (stream),
           `ns:{task}:piece:<batch>:<piece>` (hashes of pieces), `ns:{task}:owner` (the job only);
  control  `ns:{control}:load` (stream), `ns:{control}:decision` (hash), `ns:{control}:decisions` (stream).

- job: reads and writes the results keys and the load stream (its driver publishes load reports), reads the
  latest decision (routing, shed ratio, desired executors); it cannot write a decision.
- controller: reads the load stream, writes the decision hash and stream.
- proxy: reads the results keys only: read commands and scripts, whose every call is checked against the user's
  keys and commands like any other, so a script that writes is refused too.
Every user is refused the dangerous commands (FLUSHALL, CONFIG, KEYS, DEBUG, ...) and every other key. A task named
`control` would share the control keys' hash tag but not their names, so patterns do not overlap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from windjoin.connectors.redis_namespace import DEFAULT_NAMESPACE, check_namespace

COMPONENTS = ("job", "controller", "proxy")
USER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Every user: the connection handshake redis-py makes (HELLO, AUTH, CLIENT SETINFO, PING, ...), nothing else yet.
_BASE = "-@all +@connection"
_SCRIPTS = "+eval +evalsha +eval_ro +evalsha_ro"  # not SCRIPT/FUNCTION: they change what every user runs
_TRANSACTIONS = "+multi +exec +discard +watch +unwatch"
# Taken away last (ACL rules apply in order): FLUSHALL, KEYS, CONFIG, DEBUG, CLIENT KILL, MIGRATE, ...
_NEVER = "-@dangerous -@admin"


@dataclass(frozen=True)
class AclUser:
    name: str
    password_sha256: str | None  # None: no password (only for a local test server; the chart always sets one)
    rules: str  # key patterns and commands

    def line(self) -> str:
        """The user as an ACL file line (`user NAME on #sha256 RULES`)."""
        password = f"#{self.password_sha256}" if self.password_sha256 else "nopass"
        return f"user {self.name} on {password} resetkeys resetchannels {self.rules}"


def component_rules(component: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The key patterns and commands of one component's user."""
    ns = check_namespace(namespace)  # no glob characters: taken literally by the patterns
    results = [f"{ns}:{{*}}:{name}" for name in ("index", "meta", "feed", "piece:*", "pieces", "owner")]
    load, decision, decisions = f"{ns}:{{control}}:load", f"{ns}:{{control}}:decision", f"{ns}:{{control}}:decisions"
    if component == "job":
        keys = [*(f"~{k}" for k in results), f"~{load}", f"%R~{decision}"]
        commands = f"+@read +@write {_SCRIPTS} {_TRANSACTIONS}"
    elif component == "controller":
        keys = [f"%R~{load}", f"~{decision}", f"~{decisions}"]
        commands = f"+@read +@write {_TRANSACTIONS}"
    elif component == "proxy":
        # EVAL declares its keys read-write, so read-only key patterns would refuse the read scripts; the
        # commands keep the proxy to reads instead, inside scripts too (each call there is checked alike).
        keys = [f"~{k}" for k in results[:4]]  # what readers read: not the pieces set (retention's) or the owner
        commands = f"+@read +time {_SCRIPTS}"  # TIME: the stepped reads measure their own time in Redis
    else:
        raise ValueError(f"component {component!r} is not one of {list(COMPONENTS)}")
    return " ".join([*keys, _BASE, commands, _NEVER])


def acl_users(
    password_sha256: Mapping[str, str | None], namespace: str = DEFAULT_NAMESPACE, prefix: str = "windjoin-"
) -> list[AclUser]:
    """One user per component in `password_sha256` (component -> SHA-256 hex of its password)."""
    users = []
    for component, digest in password_sha256.items():
        name = f"{prefix}{component}"
        if not USER_NAME.match(name):
            raise ValueError(f"ACL user name {name!r} is not accepted (accepted: {USER_NAME.pattern})")
        if digest is not None and not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError(f"password of {component!r}: a SHA-256 digest is 64 lowercase hex digits")
        users.append(AclUser(name, digest, component_rules(component, namespace)))
    return users


def acl_file(users: list[AclUser]) -> str:
    """An ACL file (Redis `aclfile`): the default user off, then the components' users."""
    return "\n".join(["user default off resetkeys resetchannels -@all", *(u.line() for u in users)]) + "\n"
