"""A credential read when a client is built: from a file (a mounted Secret) or an environment variable."""

from __future__ import annotations

import os
from pathlib import Path


def read_secret(path: str | None, env: str | None, key: str, error: type[ValueError] = ValueError) -> str | None:
    """The file's text without its trailing newline, else the variable's value, else None (neither given);
    `error` naming `key`.password_file / `key`.password_env when the one given cannot be read."""
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as err:
            raise error(f"{key}.password_file: cannot read {path} ({err.strerror})") from None
    if env:
        value = os.environ.get(env)
        if value is None:
            raise error(f"{key}.password_env: the environment variable {env} is not set")
        return value
    return None
