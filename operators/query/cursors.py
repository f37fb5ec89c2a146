"""The opaque cursors of result queries: where a one-time query's next page starts, where a continuous query
resumes (in the feed, or in Parquet up to a batch, then the feed).

A cursor is URL-safe base64 of the JSON list `[kind, task, *ints]`: kind "t" (one-time: result_time, batch_id,
row), "f" (feed position: batch_id, row) or "p" (resume: batch_id, row, last batch to read from Parquet). Feed
positions are (batch_id, row): "after row `row` of batch `batch_id`"; `row = -1` is "before the batch",
`FEED_END` is "after the whole batch".
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from windjoin.operators.query.errors import BadQuery
from windjoin.operators.query.fields import Key

MAX_TIME = 2**53 - 1  # result times must survive a round trip through a double (Redis scores)
FEED_END = 2**53  # a row past any batch's last row: (b, FEED_END) is "after batch b"
_OUT_OF_RANGE = "cursor: out of range (pass back a cursor this service returned)"


def encode_cursor(parts: list[Any]) -> str:
    """An opaque cursor token for `[kind, task, *ints]` (kind "t": one-time, "f": continuous); see `decode_cursor`."""
    return base64.urlsafe_b64encode(orjson.dumps(parts)).rstrip(b"=").decode()


def decode_cursor(token: Any, kind: str, task: str, size: int, param: str = "cursor") -> list[int]:
    """The `size` integers of a cursor token made by `encode_cursor([kind, task, *ints])`, or BadQuery naming
    `param`."""
    query = "one-time" if kind == "t" else "continuous"
    message = f"{param}: not a cursor of a {query} query of task {task!r} (pass back a cursor this service returned)"
    bad = BadQuery(message)
    if not isinstance(token, str) or not 0 < len(token) <= 200:
        raise bad
    try:
        parts = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    if (
        not isinstance(parts, list)
        or len(parts) != size + 2
        or parts[:2] != [kind, task]
        or not all(type(v) is int and abs(v) <= 2**63 for v in parts[2:])
    ):
        raise bad
    return parts[2:]


def page_cursor(task: str, key: Key) -> str:
    """The one-time-query cursor of the page after the row with this (result_time, batch_id, row) key."""
    return encode_cursor(["t", task, *key])


def page_position(token: Any, task: str) -> Key:
    """The (result_time, batch_id, row) key a one-time-query cursor names; BadQuery for anything else."""
    t, b, r = decode_cursor(token, "t", task, 3)
    if not (abs(t) <= MAX_TIME and 0 <= b <= MAX_TIME and 0 <= r <= MAX_TIME):
        raise BadQuery(_OUT_OF_RANGE)
    return (t, b, r)


def feed_cursor(task: str, position: tuple[int, int] | None) -> str:
    """The continuous-query cursor of a feed position (batch_id, row), the one `ResultStore.follow` returns after
    that row; None is the start of the feed."""
    return encode_cursor(["f", task, *(position if position is not None else (-1, -1))])


def resume_cursor(task: str, position: tuple[int, int], upto: int) -> str:
    """The continuous-query cursor "after `position`, reading from Parquet up to batch `upto`, then the feed"."""
    return encode_cursor(["p", task, *position, upto])


def follow_position(token: Any, task: str) -> tuple[tuple[int, int], int | None]:
    """The (batch_id, row) position of a continuous-query cursor and, for a resume cursor, the last batch to read
    from Parquet (None for a feed cursor); BadQuery for anything else, also for a resume cursor no service
    returns (its position is never past its last batch, and that batch is never below 0)."""
    try:
        batch, row = decode_cursor(token, "f", task, 2)
        upto = None
    except BadQuery:
        batch, row, upto = decode_cursor(token, "p", task, 3)
        if not (0 <= upto <= MAX_TIME and batch <= upto):
            raise BadQuery(_OUT_OF_RANGE) from None
    if not (-1 <= batch <= MAX_TIME and -1 <= row <= FEED_END):
        raise BadQuery(_OUT_OF_RANGE)
    return (batch, row), upto


def needed_batch(after: tuple[int, int] | None) -> int:
    """The first batch a (batch_id, row) feed position still needs rows of."""
    if after is None:
        return 0
    batch, row = after
    return max(batch + 1 if row >= FEED_END else batch, 0)


def cursor_like(cursor: str, task: str, position: tuple[int, int]) -> str:
    """A cursor at `position` of the same kind as `cursor` (a resume cursor keeps its Parquet bound)."""
    _, upto = follow_position(cursor, task)
    return feed_cursor(task, position) if upto is None else resume_cursor(task, position, upto)
