"""Redis full (maxmemory reached, noeviction) under both result tiers, on a private redis-server: the batch Redis
refuses is left to Parquet as after a Redis loss (counted in the meta hash, warned), the snapshot committer's
recovery snapshot empties Redis of what Parquet holds, the next batches fit again, one-time queries answer every
result throughout, and a subscriber whose cursor needs the refused batch gets 410 and resumes from Parquet.
Without Parquet, a refused batch is an error naming maxmemory and max_bytes."""

from __future__ import annotations

import os
from typing import Any

import pytest
import redis

from tests.connectors.sink_cases import SPEC
from tests.connectors.tiers import Tiers, TiersLayout
from tests.support.redis_loss import Job, follow_all
from tests.support.result_pages import all_pages, expected, got, record
from tests.support.result_tables import make_table
from windjoin.connectors.redis.client import redis_client
from windjoin.connectors.redis.keys import meta_key
from windjoin.connectors.redis.sink import RedisFullError, RedisSink
from windjoin.operators.query.cursors import FEED_END


def pairs(*times: int, rows: int = 1) -> list[dict[str, Any]]:
    """`rows` results at each time, each with 1 kB of incompressible text."""
    return [
        {"R": {"ts": t, "k": 1, "x": 0.5, "z": os.urandom(500).hex()}, "S": {"t": t, "k": 1, "d": True}}
        for t in times
        for _ in range(rows)
    ]


def fill(client: redis.Redis) -> None:
    """Redis at its maxmemory: any write that may grow it is refused from now."""
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]))


def test_a_batch_redis_refuses_is_left_to_parquet(private_redis: str, caplog: pytest.LogCaptureFixture) -> None:
    admin = redis_client(private_redis)
    assert admin.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}  # as services start it
    tiers = Tiers(private_redis, TiersLayout(SPEC, ("a", "b"), make_table, record), retain_ms=10**6)
    job = Job(tiers)
    try:
        for b in range(3):  # 300 kB each
            job.batch(pairs(100 * b, 100 * b + 1, rows=150))
        with tiers.store() as store:
            _, cursor = store.follow("a", from_ms=0, count=1)  # a subscriber after row 0 of batch 0
            fill(admin)
            with caplog.at_level("WARNING"):
                refused = job.batch(pairs(300, 301, rows=150))  # batch 3: refused, the job goes on
            assert "Redis is full (maxmemory): batch 3 is left to Parquet" in caplog.text
            meta = admin.hgetall(meta_key("a", tiers.namespace))
            assert (int(meta[b"committed"]), int(meta[b"since"]), int(meta[b"full_batches"])) == (refused, 4, 1)
            # the recovery snapshot holds batches 0..3 and Redis gave up all of them: memory for the next ones
            [snapshot] = tiers.snapshots.list("a")
            assert (snapshot.reason, snapshot.last_batch) == ("recovery", 3)
            assert int(meta[b"snapshot"]) == snapshot.id and tiers.redis.count("a") == 0
            assert got(all_pages(store, "a", 0, 1000, 100)) == expected(tiers, "a", 0, 1000)
            job.batch(pairs(400, 401, rows=150))
            assert tiers.redis.count("a") == 300  # batch 4 fits again
            for b in range(5, 8):  # Redis full again at times (it holds about one batch): nothing lost or stalled
                job.batch(pairs(100 * b, 100 * b + 1, rows=150))
            full = int(admin.hget(meta_key("a", tiers.namespace), "full_batches"))
            print(f"batches Redis refused: {full} of 8")
            assert got(all_pages(store, "a", 0, 1000, 250)) == expected(tiers, "a", 0, 1000)
            seen, gone = follow_all(store, cursor, count=100)  # 410, then the refused batches from Parquet
            assert 1 <= gone <= full
            assert seen == [(b, r) for b in range(8) for r in range(300) if (b, r) > (0, 0)]
            assert store.follow("a", after=store.cursors.feed_cursor("a", (7, FEED_END)))[0] == []
    finally:
        admin.config_set("maxmemory", 0)
        tiers.close()


def test_without_parquet_a_refused_batch_is_an_error_naming_the_bounds(private_redis: str) -> None:
    admin = redis_client(private_redis)
    sink = RedisSink(private_redis, 10**6, "full", max_bytes=1 << 20)
    sink.write(0, {"a": make_table("a", 0, pairs(1))})
    fill(admin)
    try:
        with pytest.raises(RedisFullError, match=r"maxmemory is reached .* sinks.redis.max_bytes \(1048576\)"):
            sink.write(1, {"a": make_table("a", 1, pairs(2))})
        assert sink.last_committed("a") == 0 and list(admin.scan_iter(match="full:{a}:piece:1:*")) == []
    finally:
        admin.config_set("maxmemory", 0)
        sink.clear("a")
        sink.close()
