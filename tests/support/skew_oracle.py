"""The brute-force oracle for large keyed equi-joins, run key by key, and its pairs as sorted int rows to compare
with the Parquet results."""

from __future__ import annotations

import numpy as np

from windjoin.operators.testing.oracle import oracle_join


def oracle_by_key(spec: dict, events: list[dict]) -> list[tuple]:
    """The brute-force oracle, run key by key (an equi-join on k pairs no tuples of different keys; the oracle's
    nested loops over all 36k events would take minutes). Event times rise, so none is late."""
    by_key: dict[int, list[dict]] = {}
    for e in events:
        by_key.setdefault(e["k"], []).append(e)
    expected = []
    for group in by_key.values():
        pairs, late = oracle_join(spec, group)
        assert not late
        expected.extend(pairs)
    return expected


FIELDS = (("R", ("ts", "k", "x")), ("S", ("ts", "k", "a")))


def oracle_rows(pairs: list[tuple]) -> np.ndarray:
    """The oracle's (task, R, S) pairs as rows R.ts, R.k, R.x, S.ts, S.k, S.a."""
    return np.array([(r["ts"], r["k"], r["x"], s["ts"], s["k"], s["a"]) for _, r, s in pairs], dtype=np.int64)


def sorted_rows(rows: np.ndarray) -> np.ndarray:
    """Rows in lexicographic order: two multisets of pairs are equal iff their sorted rows are."""
    return rows[np.lexsort(rows.T[::-1])]
