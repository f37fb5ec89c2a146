"""The key the query proxy signs its cursors with: read from a file (`--cursor-key-file`) so that cursors survive a
restart and every replica accepts every other's, or made at random at start (logged: cursors then die with the
process and are refused by other replicas). Rotation keeps the old key for a while (`--previous-cursor-key-file`):
its cursors still verify and get 410 with the same position signed by the new key."""

from __future__ import annotations

import logging
from pathlib import Path

from windjoin.operators.query.cursors import MIN_KEY_BYTES, CursorCodec

log = logging.getLogger("windjoin.proxy")

OPTION = "--cursor-key-file"
PREVIOUS_OPTION = "--previous-cursor-key-file"
MAX_KEY_BYTES = 4096


def read_cursor_key(path: str | Path, option: str = OPTION) -> bytes:
    """The key in the file at `path`, surrounding whitespace (a trailing newline) left out; ValueError naming the
    option when it cannot be read or is not `MIN_KEY_BYTES`..`MAX_KEY_BYTES` bytes long."""
    try:
        with open(path, "rb") as file:
            key = file.read(2 * MAX_KEY_BYTES).strip()  # a longer one is refused: no need to read it all
    except OSError as err:
        raise ValueError(f"{option} {path}: cannot be read ({err.strerror or err})") from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise ValueError(
            f"{option} {path}: a key of {len(key)} bytes{' or more' if len(key) > MAX_KEY_BYTES else ''} is not "
            f"accepted (accepted: {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes, surrounding whitespace left out; e.g. "
            "the output of `openssl rand -hex 32`)"
        )
    return key


def cursor_codec(path: str | Path | None, previous: tuple[str | Path, ...] = ()) -> CursorCodec:
    """The proxy's cursor codec: keyed by the file at `path`, the keys of the files `previous` still verifying
    (ValueError naming the option when one is bad), or, without a file, by a random key, with a warning logged once
    (here)."""
    if path is None and previous:
        raise ValueError(f"{PREVIOUS_OPTION}: needs {OPTION} (the key that signs now)")
    if path is not None:
        older = tuple(read_cursor_key(p, PREVIOUS_OPTION) for p in previous)
        return CursorCodec(read_cursor_key(path), older)
    log.warning(
        "no %s: cursors are signed with a random key made at start; they will not survive a restart of this proxy "
        "nor be accepted by another replica (give every replica the same key file)",
        OPTION,
    )
    return CursorCodec.random()
