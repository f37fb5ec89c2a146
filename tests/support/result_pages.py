"""One-time queries of the result tiers as the tests check them: the record of a pair written, what a query
must answer, what it did answer, and every page of a paged query."""

from __future__ import annotations

from typing import Any

from tests.connectors.tiers import Tiers
from tests.support.result_tables import canonical, result_time
from windjoin.connectors.results.result_query import ResultStore


def record(task: str, batch: int, row: int, pair: dict, emitted_at: int) -> tuple[int, int, int, str, dict, int]:
    """(result time, batch, row, task, pair, emitted_at) of a pair written."""
    return (result_time(pair), batch, row, task, pair, emitted_at)


def expected(tiers: Tiers, task: str, t_from: int, t_to: int) -> list[tuple[int, int, int, bytes]]:
    """What a one-time query over [t_from, t_to] must answer: the pairs written, in (result time, batch, row)
    order."""
    rows = [w for w in tiers.written if w[3] == task and t_from <= w[0] <= t_to]
    return [(rt, b, r, canonical(p)) for rt, b, r, _, p, _ in sorted(rows, key=lambda w: w[:3])]


def got(rows: list[dict[str, Any]]) -> list[tuple[int, int, int, bytes]]:
    return [(r["result_time"], r["batch_id"], r["row"], canonical({"R": r["R"], "S": r["S"]})) for r in rows]


def all_pages(store: ResultStore, task: str, t_from: int, t_to: int, limit: int, **kw: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor = None
    for _ in range(10_000):
        page = store.one_time(task, t_from, t_to, kw.get("where"), kw.get("fields"), limit, cursor)
        assert len(page.rows) <= limit
        rows += page.rows
        if page.next_cursor is None:
            return rows
        assert len(page.rows) == limit
        cursor = page.next_cursor
    raise AssertionError("paging did not end")
