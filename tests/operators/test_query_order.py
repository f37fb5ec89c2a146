"""The one-time-query order kept by `FirstKeys` (the scan of both tiers, bounded in rows and bytes), and the
cursors that carry positions in it, against sorted() and plain tuple comparison."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.operators.query.cursors import CursorCodec
from windjoin.operators.query.errors import BadQuery
from windjoin.operators.query.order import FirstKeys, after_mask, before_mask

keys = st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 3), st.integers(0, 3)), unique=True, max_size=40)


@settings(max_examples=50, deadline=None)
@given(
    keys,
    st.integers(1, 10),
    st.tuples(st.integers(-3, 3), st.integers(0, 3), st.integers(0, 3)),
    st.none() | st.integers(1, 60),
    st.randoms(use_true_random=False),
)
def test_first_n_and_masks_follow_tuple_order(offered: list, n: int, at: tuple, budget: int | None, rng) -> None:
    firsts = FirstKeys(n, budget)
    columns = np.array(offered, dtype=np.int64).reshape(-1, 3)
    sizes = {key: rng.randint(1, 20) for key in offered}
    half = rng.randint(0, len(offered))
    for unit, part in enumerate((columns[:half], columns[half:])):
        part_sizes = np.array([sizes[tuple(k)] for k in part.tolist()], dtype=np.int64)
        firsts.offer(part[:, 0], part[:, 1], part[:, 2], part_sizes, unit, np.arange(len(part)))
    # the longest prefix in key order within n rows and the bytes (the first row always)
    expected = sorted(offered)[:n]
    if budget is not None:
        total, kept = 0, []
        for key in expected:
            total += sizes[key]
            if total > budget and kept:
                break
            kept.append(key)
        assert firsts.cut == (len(kept) < len(expected))
        expected = kept
    assert [tuple(k) for k in firsts.keys.tolist()] == expected
    for (unit, position), key in zip(firsts.where.tolist(), firsts.keys.tolist(), strict=True):
        assert columns[position if unit == 0 else half + position].tolist() == key  # where each key's row is
    times, batches, rows = columns.T
    assert after_mask(times, batches, rows, at).tolist() == [k > at for k in offered]
    assert before_mask(times, batches, rows, at).tolist() == [k < at for k in offered]


def test_a_page_cursor_names_its_position_and_task_only() -> None:
    cursors = CursorCodec(b"k" * 32)
    cursor = cursors.page_cursor("a", (5, 2, 7))
    assert cursors.page_position(cursor, "a") == (5, 2, 7)
    assert cursors.decode(cursor, ("t",), "a") == ("t", [5, 2, 7])
    with pytest.raises(BadQuery, match="not a cursor of a one-time query of task 'b'"):
        cursors.page_position(cursor, "b")
    with pytest.raises(BadQuery, match="out of range"):
        cursors.page_position(cursors.page_cursor("a", (0, -1, 0)), "a")


def test_a_key_past_one_left_out_for_the_bytes_never_enters_later() -> None:
    """Hypothesis' find: the first unit's keys fill the bytes and (2, 2, 1) is left out; a later unit's (3, 0, 0)
    fits the bytes left, but it comes after the key left out, so taking it would skip that key's row."""
    firsts = FirstKeys(9, 45)
    first = np.array([(0, 3, 0), (-2, 0, 2), (2, 2, 1), (-2, 3, 3), (-2, 1, 0)], dtype=np.int64)
    firsts.offer(*first.T, np.array([13, 1, 18, 8, 14]), 0, np.arange(5))
    later = np.array([(3, 0, 0)], dtype=np.int64)
    firsts.offer(*later.T, np.array([6]), 1, np.arange(1))
    assert [tuple(k) for k in firsts.keys.tolist()] == [(-2, 0, 2), (-2, 1, 0), (-2, 3, 3), (0, 3, 0)]
    assert firsts.cut
    smaller = np.array([(-3, 0, 0)], dtype=np.int64)  # a smaller key still enters, pushing the last one out
    firsts.offer(*smaller.T, np.array([20]), 2, np.arange(1))
    assert [tuple(k) for k in firsts.keys.tolist()] == [(-3, 0, 0), (-2, 0, 2), (-2, 1, 0), (-2, 3, 3)] and firsts.cut
