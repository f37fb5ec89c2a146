"""Redis memory bounded for every writer (issue 47): on a real redis-server with the project's ACL file and
function library, full at a 20 MiB `maxmemory`, the job's user calls the library's functions that are allowed past
maxmemory with arguments of a MiB each and keys of tasks Redis does not hold. Each call is refused, and the server's
resident memory grows by no more than the calls' own buffers (seen: +6 MiB; before: +88.6 MiB, every call accepted;
the audit saw 108.6 MiB used under a 20 MiB limit)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest
import redis

from tests.support.redis_acl import NS, PAIRS, acl_redis
from tests.support.result_tables import make_table
from windjoin.connectors.redis.client import redis_client
from windjoin.connectors.redis.sink import RedisFullError, RedisSink

MIB = 1 << 20
CALLS = 20  # per kind of call: ~100 MiB of arguments in all


def resident(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def fill(job: redis.Redis) -> None:
    """Redis at its maxmemory through the job's own keys: every plain write is refused from now on."""
    for i in range(10_000):
        try:
            job.hset(f"{NS}:{{padding}}:meta", f"f{i}", "x" * 65536)
        except redis.exceptions.OutOfMemoryError:
            return
    raise AssertionError("maxmemory never reached")


def attacks(i: int) -> list[tuple[str, list[str], list[str]]]:
    """Calls of the allow-oom functions (old and new argument shapes) with a MiB-sized argument, on task `t<i>`."""
    big, task = "1" + "0" * MIB, f"{NS}:{{t{i}}}:"
    return [
        ("windjoin_advance", [task + "meta"], [big, "1"]),
        ("windjoin_refuse", [task + "piece:1:0", task + "staged"], ["1", "1:" + big]),
        ("windjoin_refuse", [task + "meta"], [big]),
        ("windjoin_commit", [task + k for k in ("meta", "index", "pieces", "feed", "staged")], [big, "", "10"]),
        ("windjoin_drop", [task + k for k in ("meta", "index", "pieces")], [big, "", "", "", "1", "1"]),
    ]


def test_functions_past_maxmemory_refuse_unbounded_arguments(tmp_path: Path) -> None:
    with acl_redis(tmp_path, args=["--maxmemory", "20mb", "--maxmemory-policy", "noeviction"]) as (url, auths):
        pid = int((tmp_path / "redis.pid").read_text())
        with closing(redis_client(url, auths["job"])) as job:
            fill(job)
            before = resident(pid)
            accepted = []
            for i in range(CALLS):
                for function, keys, args in attacks(i):
                    try:
                        job.fcall(function, len(keys), *keys, *args)
                        accepted.append(function)
                    except redis.ResponseError as err:
                        assert "NOPERM" not in str(err), err  # refused for its arguments or memory, not the ACL
            grown = resident(pid) - before
        print(f"redis-server RSS at maxmemory {before / MIB:.1f} MiB, after the calls +{grown / MIB:.1f} MiB")
        assert accepted == []
        assert grown < 16 * MIB, grown / MIB  # the calls' own buffers (100 MiB of arguments went through)


def test_a_bad_argument_is_an_error_naming_it(tmp_path: Path) -> None:
    with acl_redis(tmp_path) as (url, auths), closing(redis_client(url, auths["job"])) as job:
        meta = f"{NS}:{{a}}:meta"
        job.hset(meta, "committed", 1)
        with pytest.raises(redis.ResponseError, match=r"windjoin: ARGV\[1\] \(snapshot id\) is not a number"):
            job.fcall("windjoin_advance", 1, meta, "9" * 17, "1")
        with pytest.raises(redis.ResponseError, match=r"windjoin: key 1 is longer than 1024 bytes"):
            job.fcall("windjoin_refuse", 1, f"{NS}:{{{'a' * 1100}}}:meta", "1")


def test_a_commit_redis_refuses_for_memory_leaves_the_batch_to_parquet(private_redis: str) -> None:
    """The commit adds index entries, so it is not let past maxmemory: when Redis refuses it, the sink leaves the
    batch to Parquet (`windjoin_leave`) as after a refused piece; without Parquet it is the error naming the bounds."""
    admin = redis_client(private_redis)
    sinks = {trim: RedisSink(private_redis, 10**6, f"leave{trim:d}", trim=trim) for trim in (False, True)}
    try:
        for sink in sinks.values():
            sink.write(0, {"a": make_table("a", 0, PAIRS)})
            sink.stage(1, 0, {"a": make_table("a", 1, PAIRS)})
        admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]))
        assert sinks[False].commit(1, {"a": [0]}, batch_max={"a": 9}) == ["a"]
        meta = admin.hgetall("leave0:{a}:meta")
        assert (meta[b"committed"], meta[b"since"], meta[b"full_batches"]) == (b"1", b"2", b"1")
        assert not admin.exists("leave0:{a}:piece:1:0") and sinks[False].count("a") == 1  # batch 0 alone
        with pytest.raises(RedisFullError, match=r"maxmemory is reached"):
            sinks[True].commit(1, {"a": [0]}, batch_max={"a": 9})
        assert sinks[True].last_committed("a") == 0
    finally:
        admin.config_set("maxmemory", 0)
        for sink in sinks.values():
            sink.clear("a")
            sink.close()
