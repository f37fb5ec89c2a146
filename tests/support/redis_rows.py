"""A task's committed results in the Redis tier, whole, as rows (queries page with `result_query`)."""

from __future__ import annotations

from typing import Any

from windjoin.connectors.redis.sink import RedisSink
from windjoin.connectors.results.redis_tier import read_all


def redis_rows(sink: RedisSink, task: str, t_from: int, t_to: int) -> list[dict[str, Any]]:
    """Every committed result with result time in [t_from, t_to], ordered by (result time, batch id, row), as
    `{"task", <stream>: {...}, ... (one per joined stream), "batch_id", "emitted_at", "result_time"}`."""
    rows = read_all(sink.client, task, sink.namespace, t_from, t_to)
    return [{"task": task, **{k: v for k, v in row.items() if k != "row"}} for row in rows]
