"""Cursors are signed: each kind reads back as what it was made from, with the key and for the task it was made
with only; any change to a token (a byte, its length, its key) is a BadQuery naming the cursor, never another
position; a short key is refused; the longest cursor fits the length cursors are read up to."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.operators.query.cursors import FEED_END, MAX_TIME, MAX_TOKEN, CursorCodec
from windjoin.operators.query.errors import BadQuery

KEY = b"k" * 32
CURSORS = CursorCodec(KEY)
times = st.integers(-MAX_TIME, MAX_TIME)
ids = st.integers(0, MAX_TIME)
rows = st.integers(-1, FEED_END)


def raw(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def token(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def read_back(token: str, task: str = "a") -> object:
    """What the cursor names to a one-time query and to a continuous one (None: refused)."""
    try:
        one_time = CURSORS.page_position(token, task)
    except BadQuery:
        one_time = None
    try:
        continuous = CURSORS.follow_position(token, task)
    except BadQuery:
        continuous = None
    return one_time, continuous


@given(t=times, b=ids, r=st.integers(0, MAX_TIME), b2=st.integers(-1, MAX_TIME), r2=rows, upto=ids)
def test_each_kind_reads_back_as_made(t: int, b: int, r: int, b2: int, r2: int, upto: int) -> None:
    assert read_back(CURSORS.page_cursor("a", (t, b, r))) == ((t, b, r), None)
    assert read_back(CURSORS.feed_cursor("a", (b2, r2))) == (None, ((b2, r2), None))
    if b2 <= upto:
        assert read_back(CURSORS.resume_cursor("a", (b2, r2), upto)) == (None, ((b2, r2), upto))
    assert read_back(CURSORS.feed_cursor("a", None)) == (None, ((-1, -1), None))


@settings(max_examples=300)
@given(
    kind=st.sampled_from(["t", "f", "p"]),
    position=st.tuples(ids, st.integers(0, MAX_TIME)),
    at=st.integers(0, 10_000),
    bit=st.integers(0, 7),
)
def test_any_changed_bit_is_refused(kind: str, position: tuple[int, int], at: int, bit: int) -> None:
    made = {
        "t": lambda: CURSORS.page_cursor("a", (7, *position)),
        "f": lambda: CURSORS.feed_cursor("a", position),
        "p": lambda: CURSORS.resume_cursor("a", position, position[0]),
    }[kind]()
    data = bytearray(raw(made))
    data[at % len(data)] ^= 1 << bit
    assert read_back(token(bytes(data))) == (None, None)


@pytest.mark.parametrize(
    "forged",
    [
        token(b'["t",5,2,7]'),  # the JSON alone
        token(b'["t","a",5,2,7]'),  # the format before cursors were signed
        token(raw(CURSORS.page_cursor("a", (5, 2, 7)))[:-1]),  # the MAC cut short
        token(raw(CURSORS.page_cursor("a", (5, 2, 7))) + b"\0"),  # a byte more
        token(b'["t",5,2,8]' + raw(CURSORS.page_cursor("a", (5, 2, 7)))[-16:]),  # another row, the MAC kept
        token(b'["f",2,7]' + raw(CURSORS.page_cursor("a", (5, 2, 7)))[-16:]),  # another kind, the MAC kept
        CursorCodec(b"K" * 32).page_cursor("a", (5, 2, 7)),  # another key's
        CURSORS.page_cursor("b", (5, 2, 7)),  # another task's
        CURSORS.page_cursor("a", (5, 2, 7))[:-2] + "==",
        CURSORS.page_cursor("a", (5, 2, 7)) + "A" * MAX_TOKEN,
        "",
        "é" * 20,
        None,
        12,
    ],
)
def test_a_forged_cursor_is_refused_naming_it(forged: object) -> None:
    with pytest.raises(BadQuery, match=r"^cursor: not a cursor of a one-time query of task 'a'"):
        CURSORS.page_position(forged, "a")
    with pytest.raises(BadQuery, match=r"^cursor: not a cursor of a continuous query of task 'a'"):
        CURSORS.follow_position(forged, "a")


def test_keys_of_fewer_than_32_bytes_are_refused_and_never_shown() -> None:
    for bad in (b"", b"k" * 31, "k" * 32):
        with pytest.raises(ValueError, match=r"^cursor key: .* \(accepted: at least 32 bytes\)"):
            CursorCodec(bad)  # type: ignore[arg-type]
    assert "kkkk" not in repr(CURSORS) and "kkkk" not in str(CURSORS)
    assert CursorCodec.random().page_cursor("a", (1, 2, 3)) != CursorCodec.random().page_cursor("a", (1, 2, 3))


def test_the_longest_cursor_fits() -> None:
    longest = max(len(CURSORS.encode(kind, "a", [-(2**63)] * size)) for kind, size in (("t", 3), ("f", 2), ("p", 3)))
    assert longest <= 120 < MAX_TOKEN
