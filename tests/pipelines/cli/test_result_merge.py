"""Partitions' result lines merged into one order: by the file line of their later arrival, each partition's own
order kept among the lines of one arrival (checked against a plain sort of (line, partition order) pairs)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.pipelines.cli.result_merge import JoinedLines, merged_lines


def _part(results: list[tuple[int, bytes]]) -> JoinedLines:
    lines = np.array([at for at, _ in results], dtype=np.int64)
    lengths = np.array([len(text) for _, text in results], dtype=np.int64)
    return JoinedLines(lines, lengths, b"".join(text for _, text in results))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 6), st.binary(min_size=1, max_size=4)), max_size=8), max_size=4))
def test_lines_come_by_later_arrival_in_each_partitions_order(partitions):
    # a later arrival belongs to one partition: give partition i the arrivals i, i + n, ...
    n = max(1, len(partitions))
    parts = [sorted(((at * n + i, text) for at, text in p), key=lambda r: r[0]) for i, p in enumerate(partitions)]
    expected = [text for _, _, text in sorted((at, k, text) for p in parts for k, (at, text) in enumerate(p))]
    assert merged_lines([_part(p) for p in parts]) == b"".join(expected)
