"""Blocks of a JSON Lines file's lines (found by numpy) hold exactly the lines, numbers and bytes that the
line-by-line reader gives, whatever the blank lines, carriage returns, missing last line break and read sizes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.connectors.formats.jsonl_blocks import read_blocks
from windjoin.connectors.formats.jsonl_file import read_lines

LINES = st.sampled_from([b'{"a": 1}', b'{"b": [1, 2]}', b"", b"   ", b"\t", b'{"c": 3}\r', b"x\r\r", b"\r", b" y "])


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(LINES, max_size=30),
    last_break=st.booleans(),
    per_block=st.sampled_from([1, 2, 3, 7, 1000]),
    read_bytes=st.sampled_from([1, 5, 64, 1 << 20]),
)
def test_blocks_hold_the_line_readers_lines(tmp_path_factory, lines, last_break, per_block, read_bytes):
    path = tmp_path_factory.mktemp("blocks") / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + (b"\n" if last_break else b""))
    blocks = list(read_blocks(path, per_block, None, read_bytes))
    got = [(int(b.line_no[i]), b.line(i)) for b in blocks for i in range(len(b))]
    assert got == list(read_lines(path))
    assert all(len(b) == per_block for b in blocks[:-1]) and all(1 <= len(b) <= per_block for b in blocks)
    for b in blocks:  # one line break between lines, as a JSON reader takes them
        assert b.data == b"\n".join(b.line(i) for i in range(len(b)))
        assert b.binary_array().to_pylist() == [b.line(i) for i in range(len(b))]


def test_progress_counts_every_byte(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"b": 2}\r\n' * 1000)

    class Bar:
        n = 0

        def update(self, k: int) -> None:
            self.n += k

    bar = Bar()
    assert sum(len(b) for b in read_blocks(path, 100, bar, 4096)) == 2000
    assert bar.n == path.stat().st_size
