"""A task's results page by page from the sinks a spec configures: what `windjoin.query_results` and
`windjoin query SPEC` read.

When Redis fails during the read and the spec also has Parquet, the rest is answered from Parquet alone (every
batch it committed, `parquet_tail`), from the same cursor, and `on_fallback` is told why: a reader of a job whose
Redis is down still gets every result, only slower.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis

from windjoin.connectors.results.result_query import ResultStore
from windjoin.operators.query.conditions import parse_condition
from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE
from windjoin.operators.spec import JoinSpec

log = logging.getLogger(__name__)


def result_pages(
    spec: JoinSpec,
    task: str,
    t_from: int,
    t_to: int,
    where: Sequence[str] = (),
    fields: Sequence[str] | None = None,
    page_size: int = 1000,
    namespace: str = DEFAULT_NAMESPACE,
    on_fallback: Callable[[str], None] = log.warning,
) -> Iterator[list[dict[str, Any]]]:
    """The results of `task` with result time in [t_from, t_to] in (result_time, batch_id, row) order, a page
    (list of rows) at a time. `where`: conditions in the query language; `fields`: the fields to keep.
    Raises ValueError when the spec has no queryable sink, QueryError for a bad condition or field, and Redis'
    or the OS's error when Redis fails and there is no Parquet to answer instead."""
    store = ResultStore.from_spec(spec, namespace)
    try:
        conditions = [parse_condition(text, store.fields(task)) for text in where]
        names = None if fields is None else list(fields)
        cursor = None
        while True:
            try:
                page = store.one_time(task, t_from, t_to, conditions, names, page_size, cursor)
            except (redis.RedisError, OSError) as err:
                if spec.sinks.parquet is None or store.client is None:
                    raise
                on_fallback(
                    f"Redis at {spec.sinks.redis.url if spec.sinks.redis else '?'} is unreachable ({err}); answering "
                    "from Parquet alone (every batch it committed)"
                )
                store.close()
                # the same cursor key: the cursor of the last page reads back in the new store
                store = ResultStore(
                    spec, None, namespace, spec.sinks.parquet.path, parquet_tail=True, cursors=store.cursors
                )
                continue
            yield page.rows
            if not page.next_cursor:
                return
            cursor = page.next_cursor
    finally:
        store.close()
