"""JSON messages for the batch decoders' tests: the message size bound, Hypothesis strategies for field values,
raw messages the batch and per-message paths may read differently, and bit-for-bit value equality."""

from __future__ import annotations

import struct

from hypothesis import strategies as st

from windjoin.connectors.formats.json_codec import JsonCodec
from windjoin.operators.schema import MAX_SAFE_INT

CODEC = JsonCodec()
MAX_BYTES = CODEC.max_message_bytes


ints = st.integers(-MAX_SAFE_INT, MAX_SAFE_INT)
floats = st.floats(allow_nan=False, allow_infinity=False)
texts = st.text(max_size=12)
extra_values = st.recursive(
    st.none() | st.booleans() | ints | floats | texts, lambda c: st.lists(c, max_size=3), max_leaves=6
)


# Raw messages each path may read differently: every one must send the batch to the per-message path or be read
# alike by both.
ODD_MESSAGES = [
    b'{"ts":1,"k":2,"x":1.5,"s":"a","b":true,"z":NaN}',
    b'{"ts":1,"k":2,"x":NaN,"s":"a","b":true}',
    b'{"ts":1,"k":2,"x":1.5,"s":"a","b":true,"z":-Infinity}',
    b'{"ts":1,"k":2.0,"x":1.5,"s":"a","b":true}',
    b'{"ts":1,"k":1e3,"x":1.5,"s":"a","b":true}',
    b'{"ts":1,"k":"2","x":1.5,"s":"a","b":true}',
    b'{"ts":1,"k":true,"x":1.5,"s":"a","b":true}',
    b'{"ts":1,"k":2,"x":true,"s":"a","b":true}',
    b'{"ts":1,"k":2,"x":1.5,"s":5,"b":true}',
    b'{"ts":1,"k":2,"x":1.5,"s":"a","b":1}',
    b'{"ts":"2024-01-01T00:00:00","k":2,"x":1.5,"s":"a","b":true}',
    b'{"ts":1.5,"k":2,"x":1.5,"s":"a","b":true}',
    b'{"ts":-1,"k":2,"x":1.5,"s":"a","b":true}',
    b'{"ts":1,"k":9007199254740992,"x":1.5,"s":"a","b":true}',
    b'{"ts":1,"k":-9223372036854775808,"x":1.5,"s":"a","b":true}',
    b'{"ts":1,"k":2,"x":100000000000000000000,"s":"a","b":true}',
    b'{"ts":1,"k":2,"x":1.5,"s":"a","b":true,"k":3}',
    b'{"ts":1,"k":2,"x":1.5,"s":"a","b":true,"z":1,"z":2}',
    b'{"ts":1,"k":2,"x":1.5,"s":null,"b":true}',
    b'{"ts":1,"x":1.5,"s":"a","b":true}',
    b'{"k":2,"x":1.5,"s":"a","b":true}',
    b'{"ts":1,"k":2,"x":1.5,"s":"a","b":true}{"ts":1}',
    b' {"ts":1,"k":2,"x":1.5,"s":"a","b":true}',
    b'{"ts":1,\n"k":2,"x":1.5,"s":"a","b":true}',
    b'{"ts":1,\r"k":2,"x":1.5,"s":"a","b":true}',
    b'\xef\xbb\xbf{"ts":1,"k":2,"x":1.5,"s":"a","b":true}',
    b'{"ts":1,"k":2,"x":1.5,"s":"a","b":true,"z":"\xff"}',
    b'{"ts":1,"k":2,"x":1.5,"s":"a","b":true,"z":' + b"[" * 1100 + b"]" * 1100 + b"}",
    b'{"ts":1,"k":2,"x":1.5,"s":"a","b":true,}',
    b'{"ts":1,"k":2,"x":1.5,"s":"\\ud800","b":true}',
    b'{"ts":1,"k":2,"x":1.5,"s":"\\u0000\\u00e9","b":false}',
    b'{"ts":1,"k":-0,"x":-0.0,"s":"a","b":false}',
    b'{"ts":1,"k":2,"x":1e308,"s":"a","b":true}',
    b'{"ts":1,"k":2,"x":1e309,"s":"a","b":true}',
    b"[1,2]",
    b"{}",
    b"",
    None,
]


def same(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):  # bit for bit: -0.0 is not 0.0 here
        return type(a) is type(b) and struct.pack("<d", a) == struct.pack("<d", b)
    return type(a) is type(b) and a == b
