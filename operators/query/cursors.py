"""The opaque cursors of result queries: where a one-time query's next page starts, where a continuous query
resumes (in the feed, or in Parquet up to a batch, then the feed).

A cursor is URL-safe base64 of the JSON list `[kind, *ints]` followed by a MAC: kind "t" (one-time:
result_time, batch_id, row), "f" (feed position: batch_id, row) or "p" (resume: batch_id, row, last batch to read
from Parquet). The MAC is HMAC-SHA-256 (its first 16 bytes) over the task's name and the JSON, keyed by the
`CursorCodec`'s key: a client cannot make a cursor the service did not return (another position, another batch
bound, another kind or task), so every position a query starts from is one the service handed out. Feed positions
are (batch_id, row): "after row `row` of batch `batch_id`"; `row = -1` is "before the batch", `FEED_END` is
"after the whole batch".

Whoever checks a cursor needs the key that made it: the query proxy reads it from a file shared by its replicas
(`pipelines/proxy/cursor_key.py`); an in-process reader (`windjoin.query_results`) uses a random one. Keys rotate
with an overlap: a codec also holds the previous keys, which still verify; a cursor one of them made is `Gone`
(410) with the same cursor signed by the current key, so a client resumes where it was instead of starting over.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import Any

import orjson

from windjoin.operators.query.errors import BadQuery, Gone
from windjoin.operators.query.fields import Key

MAX_TIME = 2**53 - 1  # result times must survive a round trip through a double (Redis scores)
FEED_END = 2**53  # a row past any batch's last row: (b, FEED_END) is "after batch b"
MIN_KEY_BYTES = 32
MAC_BYTES = 16
MAX_TOKEN = 200  # characters: a cursor of three 64-bit integers is about 110
_DOMAIN = b"windjoin cursor v1\0"  # the MAC input starts with it: these keys sign nothing else
_OUT_OF_RANGE = "cursor: out of range (pass back a cursor this service returned)"
ROTATED = "previous cursor key"  # in the Gone of a cursor a previous key signed


class CursorCodec:
    """Makes cursors and reads them back, signed with `key` (at least `MIN_KEY_BYTES` bytes; ValueError
    otherwise): a cursor reads back only with the key that made it, for the task it was made for. `previous`: keys
    this service signed with before a rotation; their cursors are `Gone` with the cursor re-signed."""

    def __init__(self, key: bytes, previous: tuple[bytes, ...] = ()) -> None:
        for which, one in (("cursor key", key), *(("previous cursor key", k) for k in previous)):
            if not isinstance(one, bytes) or len(one) < MIN_KEY_BYTES:
                size = len(one) if isinstance(one, bytes) else type(one).__name__
                raise ValueError(f"{which}: {size} bytes is not accepted (accepted: at least {MIN_KEY_BYTES} bytes)")
        self._key = key
        self._previous = tuple(previous)

    @classmethod
    def random(cls) -> CursorCodec:
        """A codec with a new random key: its cursors read back with this codec only (this process)."""
        return cls(secrets.token_bytes(MIN_KEY_BYTES))

    def __repr__(self) -> str:
        return "CursorCodec(key=<hidden>)"

    def _mac(self, task: str, body: bytes, key: bytes | None = None) -> bytes:
        message = _DOMAIN + task.encode() + b"\0" + body  # task names are identifiers: no NUL in them
        return hmac.new(self._key if key is None else key, message, hashlib.sha256).digest()[:MAC_BYTES]

    def encode(self, kind: str, task: str, ints: list[int] | tuple[int, ...]) -> str:
        """The cursor token of `[kind, *ints]` for `task` (kind "t": one-time, "f"/"p": continuous)."""
        body = orjson.dumps([kind, *ints])
        return base64.urlsafe_b64encode(body + self._mac(task, body)).rstrip(b"=").decode()

    def decode(self, token: Any, kinds: tuple[str, ...], task: str, param: str = "cursor") -> tuple[str, list[int]]:
        """The kind (one of `kinds`) and integers of a cursor token this codec made for `task`, or BadQuery naming
        `param` (the same for a garbled token, another task's or kind's, and one whose MAC does not verify)."""
        query = "one-time" if kinds == ("t",) else "continuous"
        bad = BadQuery(
            f"{param}: not a cursor of a {query} query of task {task!r} (pass back a cursor this service returned)"
        )
        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN or not token.isascii():
            raise bad
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise bad from None
        body, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
        if len(raw) <= MAC_BYTES:
            raise bad
        current = hmac.compare_digest(mac, self._mac(task, body))
        if not current and not any(hmac.compare_digest(mac, self._mac(task, body, key)) for key in self._previous):
            raise bad
        try:
            parts = orjson.loads(body)
        except ValueError:
            raise bad from None
        if (
            not isinstance(parts, list)
            or not parts
            or parts[0] not in kinds
            or len(parts) != 1 + _SIZES[parts[0]]
            or not all(type(v) is int and abs(v) <= 2**63 for v in parts[1:])
        ):
            raise bad
        if not current:
            raise Gone(
                f"{param}: signed with this service's {ROTATED} (rotated since); resume with the returned cursor, "
                "the same position signed with the current key",
                cursor=self.encode(parts[0], task, parts[1:]),
            )
        return parts[0], parts[1:]

    # -- one-time queries -------------------------------------------------------------------------------------

    def page_cursor(self, task: str, key: Key) -> str:
        """The one-time-query cursor of the page after the row with this (result_time, batch_id, row) key."""
        return self.encode("t", task, key)

    def page_position(self, token: Any, task: str) -> Key:
        """The (result_time, batch_id, row) key a one-time-query cursor names; BadQuery for anything else."""
        _, (t, b, r) = self.decode(token, ("t",), task)
        if not (abs(t) <= MAX_TIME and 0 <= b <= MAX_TIME and 0 <= r <= MAX_TIME):
            raise BadQuery(_OUT_OF_RANGE)
        return (t, b, r)

    # -- continuous queries -----------------------------------------------------------------------------------

    def feed_cursor(self, task: str, position: tuple[int, int] | None) -> str:
        """The continuous-query cursor of a feed position (batch_id, row), the one `ResultStore.follow` returns
        after that row; None is the start of the feed."""
        return self.encode("f", task, position if position is not None else (-1, -1))

    def resume_cursor(self, task: str, position: tuple[int, int], upto: int) -> str:
        """The continuous-query cursor "after `position`, reading from Parquet up to batch `upto`, then the
        feed"."""
        return self.encode("p", task, (*position, upto))

    def follow_position(self, token: Any, task: str) -> tuple[tuple[int, int], int | None]:
        """The (batch_id, row) position of a continuous-query cursor and, for a resume cursor, the last batch to
        read from Parquet (None for a feed cursor); BadQuery for anything else, also for a resume cursor no
        service returns (its position is never past its last batch, and that batch is never below 0)."""
        kind, ints = self.decode(token, ("f", "p"), task)
        batch, row = ints[:2]
        upto = ints[2] if kind == "p" else None
        if upto is not None and not (0 <= upto <= MAX_TIME and batch <= upto):
            raise BadQuery(_OUT_OF_RANGE)
        if not (-1 <= batch <= MAX_TIME and -1 <= row <= FEED_END):
            raise BadQuery(_OUT_OF_RANGE)
        return (batch, row), upto

    def cursor_like(self, cursor: str, task: str, position: tuple[int, int]) -> str:
        """A cursor at `position` of the same kind as `cursor` (a resume cursor keeps its Parquet bound)."""
        _, upto = self.follow_position(cursor, task)
        return self.feed_cursor(task, position) if upto is None else self.resume_cursor(task, position, upto)


_SIZES = {"t": 3, "f": 2, "p": 3}  # the integers of each kind of cursor


def needed_batch(after: tuple[int, int] | None) -> int:
    """The first batch a (batch_id, row) feed position still needs rows of."""
    if after is None:
        return 0
    batch, row = after
    return max(batch + 1 if row >= FEED_END else batch, 0)
