"""The one-time-query order kept by `FirstRows` (the Redis read) and `FirstKeys` (the Parquet scan), and the
cursors that carry positions in it, against sorted() and plain tuple comparison."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.operators.query.cursors import decode_cursor, page_cursor, page_position
from windjoin.operators.query.errors import BadQuery
from windjoin.operators.query.order import FirstKeys, FirstRows, after_mask, before_mask

keys = st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 3), st.integers(0, 3)), unique=True, max_size=40)


@settings(max_examples=50, deadline=None)
@given(keys, st.integers(1, 10), st.tuples(st.integers(-3, 3), st.integers(0, 3), st.integers(0, 3)))
def test_first_n_and_masks_follow_tuple_order(offered: list, n: int, at: tuple) -> None:
    first = FirstRows(n)
    for key in offered:
        first.push(key, {"key": key})
    assert [row["key"] for row in first.rows()] == sorted(offered)[:n]
    assert first.dropped == (len(offered) > n)
    firsts = FirstKeys(n)
    columns = np.array(offered, dtype=np.int64).reshape(-1, 3)
    half = len(offered) // 2
    for file, part in enumerate((columns[:half], columns[half:])):
        firsts.offer(part[:, 0], part[:, 1], part[:, 2], file, 0, np.arange(len(part)))
    assert [tuple(k) for k in firsts.keys.tolist()] == sorted(offered)[:n]
    times, batches, rows = columns.T
    assert after_mask(times, batches, rows, at).tolist() == [k > at for k in offered]
    assert before_mask(times, batches, rows, at).tolist() == [k < at for k in offered]


def test_a_page_cursor_names_its_position_and_task_only() -> None:
    cursor = page_cursor("a", (5, 2, 7))
    assert page_position(cursor, "a") == (5, 2, 7)
    assert decode_cursor(cursor, "t", "a", 3) == [5, 2, 7]
    with pytest.raises(BadQuery, match="not a cursor of a one-time query of task 'b'"):
        page_position(cursor, "b")
    with pytest.raises(BadQuery, match="out of range"):
        page_position(page_cursor("a", (0, -1, 0)), "a")
