"""Snapshot policies on the driver: periodic (injected wall clock) and punctuation, on real Parquet files and a real
Redis; the adapter's punctuation rows; the batch sink's wiring from `build_sinks`."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
import redis

from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.kafka.range_reader import ARROW_SCHEMA
from windjoin.connectors.redis.keys import meta_key
from windjoin.connectors.redis.sink import RedisSink, clear_task
from windjoin.connectors.results import redis_tier
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.result_table import BATCH_ID, EMITTED_AT, table_from_records
from windjoin.operators.spec import JoinSpec, parse_spec
from windjoin.pipelines.job.adapter import PUNCTUATION, Adapter
from windjoin.pipelines.job.join_job import BatchSink
from windjoin.pipelines.job.sinks import build_sinks
from windjoin.pipelines.job.slot_output import SlotOutputs, write_slot
from windjoin.pipelines.job.snapshot_committer import SnapshotCommitter, snapshot_reason


def make_spec(tmp_path: Path, redis_url: str | None = None, tasks: tuple[str, ...] = ("a", "b"), **parquet) -> JoinSpec:
    sinks: dict = {"parquet": {"path": str(tmp_path / "parquet"), **parquet}}
    if redis_url is not None:
        sinks["redis"] = {"url": redis_url, "retain_ms": 1000}
    return parse_spec(
        {
            "window": {"kind": "time", "size_ms": 1000},
            "streams": {
                "R": {"fields": {"k": "int", "end": "bool"}, "topic": "r"},
                "S": {"fields": {"k": "int"}, "topic": "s"},
            },
            "tasks": [{"name": name, "join": ["R", "S"]} for name in tasks],
            "sinks": sinks,
        }
    )


def results(spec: JoinSpec, batch_id: int, times: list[int]) -> dict[str, pa.Table]:
    """Every task's result table of a batch: one pair per result time."""
    records = [{"R": {"ts": t, "k": 1, "end": False}, "S": {"ts": t - 1, "k": 1}} for t in times]
    return {task.name: table_from_records(spec, task.name, records, batch_id, 5) for task in spec.tasks}


class Clock:
    """A wall clock the test moves (seconds)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_reason() -> None:
    assert snapshot_reason(since_ms=0, now_ms=59_999, every_ms=60_000, punctuated=False) is None
    assert snapshot_reason(since_ms=0, now_ms=60_000, every_ms=60_000, punctuated=False) == "periodic"
    assert snapshot_reason(since_ms=0, now_ms=1, every_ms=60_000, punctuated=True) == "punctuation"


def test_periodic_follows_the_wall_clock_and_survives_replays_and_restarts(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    sink, store, clock = ParquetSink(tmp_path / "parquet"), SnapshotStore(tmp_path / "parquet"), Clock()
    committer = SnapshotCommitter(store, ["a", "b"], every_ms=10_000, clock=clock)
    closed = {}
    for batch in range(9):
        clock.now += 3  # a batch every 3 s: 10 s have passed at batch 3 (12 s) and again at batch 7 (24 s)
        sink.write(batch, results(spec, batch, [100 * batch + 1]))
        closed[batch] = [(s.task, s.id, s.first_batch, s.last_batch, s.reason) for s in committer.after_batch(batch)]
    assert closed[3] == [("a", 1, 0, 3, "periodic"), ("b", 1, 0, 3, "periodic")]
    assert closed[7] == [("a", 2, 4, 7, "periodic"), ("b", 2, 4, 7, "periodic")]
    assert all(not closed[b] for b in (0, 1, 2, 4, 5, 6, 8))
    assert store.get("a", 2).committed_at_ms == 1000_000 + 24_000
    clock.now += 60
    assert committer.after_batch(7) == []  # a replayed batch already inside a snapshot
    # A restart: the new committer measures from the manifests on disk, not from its own start.
    restarted = SnapshotCommitter(SnapshotStore(tmp_path / "parquet"), ["a", "b"], every_ms=10_000, clock=clock)
    assert [(s.task, s.first_batch, s.last_batch) for s in restarted.after_batch(8)] == [("a", 8, 8), ("b", 8, 8)]
    clock.now += 1
    sink.write(9, results(spec, 9, []))
    assert restarted.after_batch(9) == []  # 1 s since the last snapshot


def test_punctuation_closes_every_task_at_its_batch(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    sink, store = ParquetSink(tmp_path / "parquet"), SnapshotStore(tmp_path / "parquet")
    committer = SnapshotCommitter(store, ["a", "b"], every_ms=3_600_000, clock=Clock())
    for batch in range(3):
        sink.write(batch, results(spec, batch, [batch + 10]))
        assert committer.after_batch(batch, punctuations=0) == []
    sink.write(3, results(spec, 3, [50, 40]))
    closed = committer.after_batch(3, punctuations=2)
    assert [(s.task, s.id, s.first_batch, s.last_batch, s.rows, s.min_time, s.max_time, s.reason) for s in closed] == [
        ("a", 1, 0, 3, 5, 10, 50, "punctuation"),
        ("b", 1, 0, 3, 5, 10, 50, "punctuation"),
    ]
    assert committer.after_batch(3, punctuations=2) == []  # the replayed punctuation batch closes nothing new


def test_parquet_retention_after_each_snapshot(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    sink, store = ParquetSink(tmp_path / "parquet"), SnapshotStore(tmp_path / "parquet")
    committer = SnapshotCommitter(store, ["a"], every_ms=1, retain_ms=250, clock=Clock())
    for batch in range(6):
        sink.write(batch, results(spec, batch, [100 * batch]))
        committer.after_batch(batch, punctuations=1)
    # Latest result time 500: snapshots whose max result time < 250 (batches 0, 1, 2) are gone, with their files.
    assert [s.last_batch for s in store.list("a")] == [3, 4, 5]
    assert sink.committed_batches("a") == [3, 4, 5]
    assert sink.committed_batches("b") == list(range(6))  # a task without snapshots keeps everything


def _members(client: redis.Redis, task: str, namespace: str) -> list[tuple[int, int]]:
    """(batch_id, result time) of every result Redis holds for the task."""
    return sorted((r["batch_id"], r["result_time"]) for r in redis_tier.read_all(client, task, namespace, 0, 2**53))


def test_redis_keeps_results_until_a_snapshot_holds_them(tmp_path: Path, redis_url: str) -> None:
    namespace = f"snap{uuid.uuid4().hex[:8]}"
    spec = make_spec(tmp_path)
    parquet = ParquetSink(tmp_path / "parquet")
    store = SnapshotStore(tmp_path / "parquet")
    with RedisSink(redis_url, retain_ms=1000, namespace=namespace, trim=False) as rsink:
        clock = Clock()
        committer = SnapshotCommitter(store, ["a"], every_ms=10_000, redis=rsink, clock=clock)
        times = {0: [100, 5000], 1: [200], 2: [9000], 3: [300, 9500]}
        for batch in range(3):
            tables = {"a": results(spec, batch, times[batch])["a"]}
            parquet.write(batch, tables)
            rsink.write(batch, tables)
            assert committer.after_batch(batch) == []
        # Redis does not trim on its own: 100 and 200 are far behind 9000 - 1000 yet still there.
        assert _members(rsink.client, "a", namespace) == [(0, 100), (0, 5000), (1, 200), (2, 9000)]
        tables = {"a": results(spec, 3, times[3])["a"]}
        parquet.write(3, tables)
        rsink.write(3, tables)
        clock.now += 10
        [snapshot] = committer.after_batch(3)
        assert (snapshot.id, snapshot.first_batch, snapshot.last_batch) == (1, 0, 3)
        # Cutoff = Redis max time 9500 - 1000: the pieces of batches <= 3 wholly below 8500 left Redis (batch 3's
        # stays whole: it holds 9500); the Parquet snapshot holds all of them.
        assert _members(rsink.client, "a", namespace) == [(2, 9000), (3, 300), (3, 9500)]
        meta = rsink.client.hgetall(meta_key("a", namespace))
        assert (int(meta[b"snapshot"]), int(meta[b"snapshot_batch"])) == (1, 3)
        assert len(ParquetSink(tmp_path / "parquet").read("a")) == 6
        # A batch after the snapshot stays in Redis whatever its result time, until a snapshot holds it.
        tables = {"a": results(spec, 4, [50])["a"]}
        parquet.write(4, tables)
        rsink.write(4, tables)
        assert committer.after_batch(4) == []
        assert (4, 50) in _members(rsink.client, "a", namespace)
        meta = rsink.client.hgetall(meta_key("a", namespace))
        assert (int(meta[b"snapshot"]), int(meta[b"snapshot_batch"])) == (1, 3)


def test_snapshot_left_behind_by_a_crash_reaches_redis_on_the_next_batch(tmp_path: Path, redis_url: str) -> None:
    namespace = f"snap{uuid.uuid4().hex[:8]}"
    spec = make_spec(tmp_path)
    parquet, store = ParquetSink(tmp_path / "parquet"), SnapshotStore(tmp_path / "parquet")
    with RedisSink(redis_url, retain_ms=1000, namespace=namespace, trim=False) as rsink:
        for batch, times in enumerate([[10], [20], [5000]]):
            tables = {"a": results(spec, batch, times)["a"]}
            parquet.write(batch, tables)
            rsink.write(batch, tables)
        store.commit("a", 2, "periodic", 1)  # the manifest was written, then the driver died before Redis
        assert rsink.client.hget(meta_key("a", namespace), "snapshot") is None
        committer = SnapshotCommitter(store, ["a"], every_ms=10**9, redis=rsink, clock=Clock(5.0))
        assert committer.after_batch(2) == []  # the replayed batch: no new snapshot, but Redis catches up
        assert int(rsink.client.hget(meta_key("a", namespace), "snapshot_batch")) == 2
        assert _members(rsink.client, "a", namespace) == [(2, 5000)]


def _adapter(spec: JoinSpec) -> Adapter:
    return Adapter(spec, RoutingTable.round_robin(spec.partitions, spec.slots), slot_labels=(3, 1))


def _kafka_batch(records: list[tuple[str, dict]]) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_pydict(
        {
            "topic": [t for t, _ in records],
            "partition": [0] * n,
            "offset": list(range(n)),
            "key": [None] * n,
            "value": [orjson.dumps(v) for _, v in records],
            "timestamp": [1000] * n,
        },
        schema=ARROW_SCHEMA,
    )


def test_adapter_marks_punctuation_records(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, snapshots={"punctuation": {"stream": "R", "field": "end", "value": True}})
    spec = spec.model_copy(update={"slots": 2})
    records = [
        ("r", {"ts": 1, "k": 1, "end": False}),  # an ordinary R record
        ("r", {"ts": 2, "k": 1, "end": True}),  # the punctuation
        ("s", {"ts": 3, "k": 1}),  # S has no field `end`: never a punctuation
        ("r", {"ts": 4, "end": True}),  # a punctuation lacking a field is a bad record, dead-lettered
        ("r", {"ts": 5, "k": 1, "end": 1}),  # 1 is not true: a wrong type, not a punctuation
    ]
    out = _adapter(spec).adapt(_kafka_batch(records)).to_pydict()
    assert out["reason"] == [None, PUNCTUATION, None, "missing_field", "wrong_type"]
    assert out["part"][1] == -1 and out["R__k"][1] is None  # not routed to any join partition
    assert out["ts"][1] == 2 and out["stream"][1] == "R"
    plain = _adapter(make_spec(tmp_path)).adapt(_kafka_batch(records[:2])).to_pydict()
    assert plain["reason"] == [None, None]  # no punctuation configured: an ordinary record


def _spark_rows(spec: JoinSpec, sinks: list, batch: int, times: list[int], punctuations: list[int]) -> list[dict]:
    """What the stateful join hands foreachBatch, its slots having staged their results (slot 0 all of them)."""
    rows = []
    outputs = SlotOutputs(tuple(s for s in sinks if not isinstance(s, SnapshotCommitter)))
    for slot, n in enumerate(punctuations):
        pairs = {t.name: [results(spec, 0, times)[t.name].drop_columns([BATCH_ID, EMITTED_AT])] for t in spec.tasks}
        refused = pa.table({"reason": pa.array([], pa.string())})
        output = write_slot(outputs, spec, batch, slot, pairs if slot == 0 else {}, refused, 9_999)
        stats = {"rows": 1, "joined": 1, "dead": 0, "punctuations": n, "segments": 0, "window_tuples": 0, "seconds": 0}
        stats.update(output, slot_index=slot)
        rows.append({"slot": slot, "stats": orjson.dumps(stats)})
    return rows


class Collected:
    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def collect(self) -> list[dict]:
        return self.rows


def test_batch_sink_commits_sinks_then_snapshots(tmp_path: Path, redis_url: str) -> None:
    task = f"t{uuid.uuid4().hex[:8]}"  # build_sinks uses the default namespace: keep the keys apart
    spec = make_spec(
        tmp_path,
        redis_url,
        tasks=(task,),
        snapshots={"every_ms": 10_000, "punctuation": {"stream": "R", "field": "end", "value": True}},
    )
    clock = Clock()
    sinks = build_sinks(spec, clock=clock)
    assert [type(s).__name__ for s in sinks] == ["ParquetSink", "RedisSink", "SnapshotCommitter"]
    assert sinks[1].trim is False and sinks[1].feed_batches == 10_000
    outcomes = []
    batch_sink = BatchSink(spec, sinks, on_batch=outcomes.append)
    batch_sink(Collected(_spark_rows(spec, sinks, 0, [100, 9000], punctuations=[0, 0])), 0)
    batch_sink(Collected(_spark_rows(spec, sinks, 1, [9100], punctuations=[1, 1])), 1)
    assert [(o.punctuations, [(s.id, s.last_batch, s.reason) for s in o.snapshots]) for o in outcomes] == [
        (0, []),
        (2, [(1, 1, "punctuation")]),
    ]
    client = sinks[1].client
    try:
        # Snapshot 1 holds batches 0..1; Redis dropped what is older than 9100 - 1000 among them.
        assert int(client.hget(meta_key(task, "windjoin"), "snapshot")) == 1
        assert [m for m in _members(client, task, "windjoin") if m[1] >= 8100] == [(0, 9000), (1, 9100)]
        assert SnapshotStore(tmp_path / "parquet").batches(task, 1) == [0, 1]
    finally:
        clear_task(client, task, "windjoin")
        sinks[1].close()


def test_build_sinks_without_parquet_keeps_redis_trimming(redis_url: str) -> None:
    spec = parse_spec(
        {
            "window": {"kind": "time", "size_ms": 1000},
            "streams": {"R": {"fields": {}}, "S": {"fields": {}}},
            "tasks": [{"name": "t", "join": ["R", "S"]}],
            "sinks": {"redis": {"url": redis_url, "feed_batches": 7}},
        }
    )
    [sink] = build_sinks(spec)
    with sink:
        assert sink.trim is True and sink.feed_batches == 7


@pytest.mark.parametrize("every_ms", [0, -5, True])
def test_committer_refuses_a_bad_period(tmp_path: Path, every_ms: int) -> None:
    with pytest.raises(ValueError, match="every_ms"):
        SnapshotCommitter(SnapshotStore(tmp_path), ["a"], every_ms=every_ms)
