"""The exactly-once fence knows the checkpoint, without Spark: run ids in checkpoint folders, owner records in a
real Parquet folder and a real Redis, refusals, fresh starts, and replays that are logged and counted."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from tests.connectors.sink_cases import SPEC
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.redis.keys import meta_key, owner_key, task_keys
from windjoin.connectors.redis.retention import advance_snapshot
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.result_table import table_from_records
from windjoin.operators.sink_owner import CheckpointId, OwnerRecordError
from windjoin.pipelines.job.checkpoint_identity import RUN_FILE, checkpoint_identity, predates_run_ids
from windjoin.pipelines.job.job_metrics import JobMetrics
from windjoin.pipelines.job.join_job import BatchOutcome, note_replay
from windjoin.pipelines.job.sink_fence import SinkOwnerError, fence_sinks

TASKS = ["a", "b"]


def table(task: str, batch_id: int, n: int = 2) -> Any:
    pairs = [{"R": {"ts": i, "k": i, "x": 0.5, "z": "r"}, "S": {"t": i + 1, "k": i, "d": True}} for i in range(n)]
    return table_from_records(SPEC, task, [{"task": task, **p} for p in pairs], batch_id, 7)


def batch(batch_id: int, n: int = 2) -> dict[str, Any]:
    return {task: table(task, batch_id, n) for task in TASKS}


def stored_rows(sink: ParquetSink | RedisSink, task: str) -> int:
    if isinstance(sink, RedisSink):
        return sink.count(task)
    return sink.read(task).num_rows if sink.committed_batches(task) else 0


@pytest.fixture(params=["parquet", "redis"])
def make_sink(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], ParquetSink | RedisSink]]:
    """Makes sinks over one Parquet folder or one Redis namespace (each call: another process's view of it)."""
    made: list[RedisSink] = []
    namespace = f"fence_{uuid.uuid4().hex}"

    def make() -> ParquetSink | RedisSink:
        if request.param == "parquet":
            return ParquetSink(tmp_path / "parquet")
        made.append(RedisSink(request.getfixturevalue("redis_url"), 10**12, namespace, trim=False))
        return made[-1]

    yield make
    for sink in made:
        for task in TASKS:
            sink.clear(task)
        sink.close()


def test_a_checkpoint_keeps_its_run_id_and_a_new_folder_gets_another(tmp_path: Path) -> None:
    first = checkpoint_identity(tmp_path / "a")
    assert first == checkpoint_identity(tmp_path / "a")
    assert first.path == str(tmp_path / "a")
    other = checkpoint_identity(tmp_path / "b")
    assert other.run_id != first.run_id
    (tmp_path / "a").rename(tmp_path / "moved")  # a moved checkpoint is the same checkpoint
    assert checkpoint_identity(tmp_path / "moved").run_id == first.run_id
    assert [p.name for p in (tmp_path / "moved").iterdir()] == [RUN_FILE]  # no temporary file left behind


def test_racing_first_starts_agree_on_one_run_id(tmp_path: Path) -> None:
    folders = [tmp_path / f"c{attempt}" for attempt in range(10)] * 4
    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda folder: (folder, checkpoint_identity(folder).run_id), folders))
    assert len(set(ids)) == 10


def test_a_damaged_run_record_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / RUN_FILE).write_text('{"run_id": "not-a-uuid"}')
    with pytest.raises(OwnerRecordError, match=rf"{tmp_path / RUN_FILE}: not a run record"):
        checkpoint_identity(tmp_path)


def test_an_empty_sink_is_claimed_silently(make_sink, tmp_path: Path) -> None:
    sink, me = make_sink(), checkpoint_identity(tmp_path / "ckpt")
    assert fence_sinks([sink], TASKS, me, fresh=False) == []
    assert [make_sink().owner(t) for t in TASKS] == [me, me]
    assert sink.write(0, batch(0)) == {"a": 2, "b": 2}
    for task in TASKS:  # results deleted by hand: nothing is left to skip, so another checkpoint may claim them
        sink.clear(task)
        sink.claim(task, me)
    other = checkpoint_identity(tmp_path / "other")
    assert fence_sinks([make_sink()], TASKS, other, fresh=False) == []
    assert [make_sink().owner(t) for t in TASKS] == [other, other]


def test_a_restart_on_the_same_checkpoint_keeps_the_results_and_stays_exactly_once(make_sink, tmp_path) -> None:
    me = checkpoint_identity(tmp_path / "ckpt")
    sink = make_sink()
    fence_sinks([sink], TASKS, me, fresh=False)
    sink.write(0, batch(0))
    sink.write(1, batch(1))
    again = make_sink()  # the restarted process
    for fresh in (False, True):  # --fresh-sinks never clears what this checkpoint wrote
        assert fence_sinks([again], TASKS, checkpoint_identity(tmp_path / "ckpt"), fresh) == []
    assert again.write(1, batch(1)) == {}  # Spark replays the batch it had not marked done: skipped
    assert again.write(2, batch(2, n=1)) == {"a": 1, "b": 1}
    assert [stored_rows(again, t) for t in TASKS] == [5, 5]


def test_another_checkpoint_is_refused_naming_the_sink_and_both_checkpoints(make_sink, tmp_path: Path) -> None:
    a, b = checkpoint_identity(tmp_path / "ckpt-a"), checkpoint_identity(tmp_path / "ckpt-b")
    sink = make_sink()
    fence_sinks([sink], TASKS, a, fresh=False)
    sink.write(3, batch(3))
    with pytest.raises(SinkOwnerError) as refused:
        fence_sinks([make_sink()], TASKS, b, fresh=False)
    message = str(refused.value)
    assert "\n" not in message
    for task in TASKS:
        assert sink.location(task) in message
    assert f"written by checkpoint {a.path} (run {a.run_id})" in message
    assert f"this job's checkpoint is {b.path} (run {b.run_id})" in message
    assert "--fresh-sinks" in message and f"or run on checkpoint {a.path} that wrote them" in message
    # nothing changed: the old results and owner stay
    assert [make_sink().owner(t) for t in TASKS] == [a, a]
    assert [stored_rows(make_sink(), t) for t in TASKS] == [2, 2]


def test_results_without_an_owner_are_refused_too(make_sink, tmp_path: Path) -> None:
    make_sink().write(5, batch(5))  # written before sinks recorded owners
    me = checkpoint_identity(tmp_path / "ckpt")
    with pytest.raises(SinkOwnerError, match="an unrecorded checkpoint .*--fresh-sinks") as refused:
        fence_sinks([make_sink()], TASKS, me, fresh=False)
    assert "or run on checkpoint" not in str(refused.value)
    assert make_sink().owner("a") is None


def test_a_checkpoint_from_before_run_ids_adopts_the_results_it_wrote(make_sink, tmp_path: Path) -> None:
    """An upgrade: the checkpoint committed batches before sinks recorded owners, so their results are its own."""
    make_sink().write(5, batch(5))
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "commits" / "5").write_text("v1")
    assert predates_run_ids(checkpoint)
    me = checkpoint_identity(checkpoint)
    adopted = fence_sinks([make_sink()], TASKS, me, fresh=False, adopt_unowned=True)
    assert len(adopted) == len(TASKS) and all("adopted" in line for line in adopted)
    assert make_sink().owner("a") == me and stored_rows(make_sink(), "a") == 2
    assert not predates_run_ids(checkpoint)  # the run id is recorded now
    assert not make_sink().write(5, batch(5))  # batch 5 again: a replay, skipped


def test_fresh_sinks_clear_the_results_and_commit_marks_and_claim_them(make_sink, tmp_path: Path) -> None:
    a, b = checkpoint_identity(tmp_path / "ckpt-a"), checkpoint_identity(tmp_path / "ckpt-b")
    sink = make_sink()
    fence_sinks([sink], TASKS, a, fresh=False)
    for batch_id in range(4):
        sink.write(batch_id, batch(batch_id))
    snapshot_stores_and_markers(sink, tmp_path)
    fresh = make_sink()
    cleared = fence_sinks([fresh], TASKS, b, fresh=True)
    assert cleared == [
        f"fresh sinks: cleared {fresh.location(t)} (written by checkpoint {a.describe()})" for t in TASKS
    ]
    assert [fresh.owner(t) for t in TASKS] == [b, b]
    assert not any(fresh.holds_results(t) for t in TASKS)  # results, commit marks, snapshots, feed: all gone
    assert fresh.write(0, batch(0, n=3)) == {"a": 3, "b": 3}  # the new run's batch 0 is written, not skipped
    assert [stored_rows(fresh, t) for t in TASKS] == [3, 3]
    assert fence_sinks([make_sink()], TASKS, b, fresh=False) == []  # and its restarts are accepted


def snapshot_stores_and_markers(sink: ParquetSink | RedisSink, tmp_path: Path) -> None:
    """What the snapshot committer leaves beside the results: manifests in Parquet, the marker in Redis."""
    if isinstance(sink, ParquetSink):
        SnapshotStore(sink.files.root).commit("a", 3, "periodic", 1)
        assert (Path(sink.task_dir("a")) / "_snapshots").is_dir()
    else:
        advance_snapshot(sink.client, "a", sink.namespace, 1, 3, None)
        assert sink.client.hget(meta_key("a", sink.namespace), "snapshot") == b"1"


def test_a_refusal_of_one_sink_leaves_every_sink_untouched(tmp_path: Path, redis_url: str) -> None:
    a, b = checkpoint_identity(tmp_path / "ckpt-a"), checkpoint_identity(tmp_path / "ckpt-b")
    parquet = ParquetSink(tmp_path / "parquet")
    fence_sinks([parquet], TASKS, a, fresh=False)
    parquet.write(0, batch(0))
    with RedisSink(redis_url, 10**12, f"fence_{uuid.uuid4().hex}") as redis_sink:
        with pytest.raises(SinkOwnerError, match=r"Parquet .*task=a, Parquet .*task=b written by checkpoint"):
            fence_sinks([redis_sink, parquet, object()], TASKS, b, fresh=False)
        assert redis_sink.owner("a") is None  # not claimed: the start was refused as a whole
        assert parquet.owner("a") == a


def test_owner_records_do_not_disturb_dataset_readers(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "parquet")
    fence_sinks([sink], TASKS, checkpoint_identity(tmp_path / "ckpt"), fresh=False)
    sink.write(0, batch(0))
    whole = ds.dataset(tmp_path / "parquet", format="parquet", partitioning="hive").to_table()
    assert whole.num_rows == 4 and sorted(set(whole.column("task").to_pylist())) == TASKS


def test_a_damaged_owner_record_names_where_it_is(tmp_path: Path, redis_url: str) -> None:
    parquet = ParquetSink(tmp_path)
    Path(parquet.task_dir("a")).mkdir(parents=True)
    (Path(parquet.task_dir("a")) / "_owner.json").write_text("{")
    with pytest.raises(OwnerRecordError, match=r"task=a/_owner.json: not an owner record"):
        parquet.owner("a")
    with RedisSink(redis_url, 10**12, f"fence_{uuid.uuid4().hex}") as redis_sink:
        redis_sink.client.hset(owner_key("a", redis_sink.namespace), "run_id", "x")
        with pytest.raises(OwnerRecordError, match=rf"Redis key {redis_sink.namespace}:{{a}}:owner: not an owner"):
            redis_sink.owner("a")
        redis_sink.clear("a")


def test_redis_clear_removes_every_key_of_the_task_and_only_those(redis_url: str) -> None:
    namespace = f"fence_{uuid.uuid4().hex}"
    with RedisSink(redis_url, 10**12, namespace) as sink:
        sink.claim("a", CheckpointId(str(uuid.uuid4()), "/x"))
        sink.write(0, batch(0))
        sink.stage(1, 3, {"a": batch(1)["a"]})  # staged, never committed (a failed attempt)
        sink.clear("a")
        assert sink.client.exists(*task_keys("a", namespace)) == 0
        assert list(sink.client.scan_iter(match=f"{namespace}:{{a}}:piece:*")) == []  # SCAN: the tests' admin
        assert sink.count("b") == 2  # another task's results stay
        sink.clear("b")


def test_a_replay_is_logged_and_counted_per_sink(make_sink, caplog: pytest.LogCaptureFixture) -> None:
    sink, metrics = make_sink(), JobMetrics()
    for attempt in range(2):  # the first write commits, the second is the replay after a restart
        outcome = BatchOutcome(4)
        with caplog.at_level(logging.WARNING, logger="windjoin.pipelines.job.join_job"):
            note_replay(outcome, sink, batch(4), sink.write(4, batch(4)))
        metrics.observe(outcome)
        assert outcome.replayed == ({sink.name: TASKS} if attempt else {})
    assert [r.getMessage() for r in caplog.records] == [
        f"batch 4: a replay, committed before to {sink.name} for a, b; skipped there"
    ]
    assert metrics.registry.get_sample_value("windjoin_job_replayed_batches_total", {"sink": sink.name}) == 1
