"""The key prefix every Redis-backed part of a job shares (results, load reports, decisions, ACLs), and its check.

One job's keys live under one namespace (default "windjoin"); two jobs on one Redis take two namespaces.
"""

from __future__ import annotations

import re

DEFAULT_NAMESPACE = "windjoin"
NAMESPACE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")  # no glob characters: ACL key patterns take it literally


def check_namespace(namespace: str) -> str:
    """The namespace, or ValueError naming what is accepted."""
    if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):
        raise ValueError(f"namespace {namespace!r} is not accepted (accepted: {NAMESPACE.pattern})")
    return namespace
