"""Redis ACL users, one per component, each limited to the keys and the commands its code issues.

Keys of one namespace `ns` (see `connectors.redis.sink`, `load_reports`, `control_decisions`):
  results  `ns:{task}:index`, `ns:{task}:pieces` (zsets), `ns:{task}:meta` (hash), `ns:{task}:feed` (stream),
           `ns:{task}:piece:<batch>:<piece>` (hashes of pieces), `ns:{task}:staged` (set), `ns:{task}:owner`;
  control  `ns:{control}:load` (stream), `ns:{control}:decision` (hash), `ns:{control}:decisions` (stream).

- job: reads and writes the results keys, appends to the load stream (its driver publishes load reports), reads the
  latest decision (routing, shed ratio, desired executors); it cannot write a decision nor read the load stream.
- controller: reads the load stream, writes the decision hash and stream.
- proxy: reads the results keys a reader reads (not `pieces`, `staged`, `owner`), read-only patterns: its
  functions are called with FCALL_RO, which declares its keys read-only.
- admin: no key; loads the function library and may stop a busy function (FUNCTION KILL, SCRIPT KILL).

Commands are listed one by one, not by category: `+@read`/`+@write`/`+@connection` also grant SCAN/KEYS/RANDOMKEY
(every key's name, whatever the patterns), SELECT/MOVE/SWAPDB (ACLs do not separate databases, so the URL's
database must be 0), CLIENT TRACKING (invalidations of keys the user cannot read), OBJECT, DUMP/RESTORE, WAIT...
Scripts only through the `windjoin` function library (`connectors.redis.functions`): FCALL/FCALL_RO, never EVAL, SCRIPT
or FUNCTION, so a component runs only vetted code, each call inside it checked against its own user. A task named
`control` would share the control keys' hash tag but not their names, so patterns do not overlap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE, check_namespace

COMPONENTS = ("job", "controller", "proxy")
ROLES = (*COMPONENTS, "admin")  # the users of an ACL file: the components and the library's administrator
USER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Every user: the connection handshake redis-py makes (HELLO with the credentials, or AUTH) and PING. CLIENT SETINFO
# is left out (unknown to Redis 7.0; redis-py ignores its refusal).
_BASE = "-@all +hello +auth +ping"
_TRANSACTIONS = "+multi +exec +discard"
# What the library's functions call (each call is checked against the caller's user).
_WRITES_IN_FUNCTIONS = "+hset +hdel +hincrby +unlink +srem +sadd +zadd +zrem +xadd"
_READS_IN_FUNCTIONS = "+hget +hmget +hstrlen +exists +zrank +zcount +zrange +xrange +xinfo|stream +time"
_FUNCTIONS = "+fcall +fcall_ro"


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
    """The key patterns and commands of one role's user (a component or `admin`)."""
    ns = check_namespace(namespace)  # no glob characters: taken literally by the patterns
    results = [f"{ns}:{{*}}:{name}" for name in ("index", "meta", "feed", "piece:*", "pieces", "staged", "owner")]
    load, decision, decisions = f"{ns}:{{control}}:load", f"{ns}:{{control}}:decision", f"{ns}:{{control}}:decisions"
    if component == "job":
        keys = [*(f"~{k}" for k in results), f"%W~{load}", f"%R~{decision}"]
        # sinks (stage, commit, claim, clear), load reports (XADD), decisions (HGETALL; TYPE/GET: a hand-set count)
        own = "+hgetall +smembers +del +type +get"
        commands = f"{own} {_READS_IN_FUNCTIONS} {_WRITES_IN_FUNCTIONS} {_FUNCTIONS} {_TRANSACTIONS}"
    elif component == "controller":
        keys = [f"%R~{load}", f"~{decision}", f"~{decisions}"]
        commands = f"+xrange +xrevrange +hgetall +del +hset +xadd {_TRANSACTIONS}"
    elif component == "proxy":
        keys = [f"%R~{k}" for k in results[:4]]  # what readers read: not pieces/staged (retention's) or owner
        commands = f"+xread {_READS_IN_FUNCTIONS} +fcall_ro"  # TIME: the stepped reads measure their own time
    elif component == "admin":
        keys = []
        commands = "+function|load +function|list +function|kill +script|kill"
    else:
        raise ValueError(f"component {component!r} is not one of {list(ROLES)}")
    return " ".join([*keys, _BASE, commands])


def acl_users(
    password_sha256: Mapping[str, str | None], namespace: str = DEFAULT_NAMESPACE, prefix: str = "windjoin-"
) -> list[AclUser]:
    """One user per role in `password_sha256` (job, controller, proxy, admin -> SHA-256 hex of its password)."""
    users = []
    for component, digest in password_sha256.items():
        name = f"{prefix}{component}"
        if not USER_NAME.fullmatch(name):
            raise ValueError(f"ACL user name {name!r} is not accepted (accepted: {USER_NAME.pattern})")
        if digest is not None and not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError(f"password of {component!r}: a SHA-256 digest is 64 lowercase hex digits")
        users.append(AclUser(name, digest, component_rules(component, namespace)))
    return users


def acl_file(users: list[AclUser]) -> str:
    """An ACL file (Redis `aclfile`): the default user off, then the components' users."""
    return "\n".join(["user default off resetkeys resetchannels -@all", *(u.line() for u in users)]) + "\n"
