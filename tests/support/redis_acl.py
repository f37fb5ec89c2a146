"""A redis-server with the generated ACLs (a user and a password file per component), and a pair to write."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path

from windjoin.connectors.local import processes
from windjoin.connectors.local.services import redis_binary
from windjoin.connectors.redis.client import RedisAuth, redis_client
from windjoin.connectors.redis.functions import load_library
from windjoin.operators.redis_acl import ROLES, acl_file, acl_users

NS = "windjoin"
PAIRS = [{"R": {"ts": 7, "k": 1, "x": 1.0, "z": "a"}, "S": {"t": 9, "k": 1, "d": True}}]


@contextmanager
def acl_redis(root: Path, namespace: str = NS, args: Sequence[str] = ()) -> Iterator[tuple[str, dict[str, RedisAuth]]]:
    """A redis-server whose users come from `acl_file`, each password in a file as a mounted Secret would be;
    `args`: more of its options (`--maxmemory 20mb`); its PID is in `root / "redis.pid"`."""
    passwords = {c: f"{c}-secret-{i}" for i, c in enumerate(ROLES)}
    auths = {}
    for component, password in passwords.items():
        (root / component).write_text(password + "\n")  # a trailing newline, as `echo > file` leaves
        auths[component] = RedisAuth(username=f"windjoin-{component}", password_file=str(root / component))
    digests = {c: hashlib.sha256(p.encode()).hexdigest() for c, p in passwords.items()}
    (root / "users.acl").write_text(acl_file(acl_users(digests, namespace)))
    port = processes.free_port()
    argv = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--aclfile", str(root / "users.acl"), "--dir", str(root), *args]
    pid = processes.spawn(argv, root / "redis.log")
    (root / "redis.pid").write_text(str(pid))
    try:
        deadline = time.monotonic() + 10
        while not processes.port_open("127.0.0.1", port):
            assert time.monotonic() < deadline, (root / "redis.log").read_text()
            time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}/0"
        with closing(redis_client(url, auths["admin"])) as admin:
            load_library(admin)  # as the chart's Redis pod does
        yield url, auths
    finally:
        processes.stop(pid)
