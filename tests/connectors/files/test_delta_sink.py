"""The Delta Lake results sink on real tables: one version per batch, a replay commits nothing twice, an older batch
is refused, a batch staged but not committed is invisible, the owner fence, tasks of different streams in one
table, the spec's key, an S3-compatible store; read back by DuckDB over the log (`tests/support/delta_reader`) and
by polars."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path

import polars as pl
import pytest
from deltalake import DeltaTable

from tests.support.delta_reader import read_log, read_rows
from tests.support.result_tables import make_table
from windjoin.connectors.files.delta_sink import DeltaSink, spec_table_schema, storage_options
from windjoin.operators.sink_owner import CheckpointId, StaleBatchError
from windjoin.operators.spec import SpecError, parse_spec
from windjoin.pipelines.job.sink_fence import SinkOwnerError, fence_sinks
from windjoin.pipelines.job.sinks import build_sinks

BASE = {
    "window": {"kind": "time", "size_ms": 1000},
    "streams": {
        "R": {"timestamp": "ts", "fields": {"k": "int", "x": "float", "z": "string"}, "topic": "r"},
        "S": {"timestamp": "t", "fields": {"k": "int", "d": "bool"}, "topic": "s"},
    },
    "tasks": [{"name": "a", "join": ["R", "S"]}, {"name": "b", "join": ["S", "R"]}],
    "checkpoint": "/tmp/unused-checkpoint",
}
SPEC = parse_spec(BASE)


def pair(ts: int, k: int = 1) -> dict:
    return {"R": {"ts": ts, "k": k, "x": 0.5, "z": f"r{ts}"}, "S": {"t": ts + 1, "k": k, "d": ts % 2 == 0}}


def new_sink(path: str | Path, spec=SPEC) -> DeltaSink:
    return DeltaSink(str(path), spec_table_schema(spec), [t.name for t in spec.tasks])


def claimed(path: str | Path, run: CheckpointId, spec=SPEC) -> DeltaSink:
    sink = new_sink(path, spec)
    fence_sinks([sink], [t.name for t in spec.tasks], run, fresh=False)
    return sink


def checkpoint() -> CheckpointId:
    return CheckpointId(str(uuid.uuid4()), f"/checkpoints/{uuid.uuid4().hex[:6]}")


def stage_and_commit(sink: DeltaSink, batch: int, pieces: dict[int, list[int]], task: str = "a") -> list[str]:
    for piece, times in pieces.items():
        if times:
            sink.stage(batch, piece, {task: make_table(task, batch, [pair(ts) for ts in times])})
    return sink.commit(batch, {task: [p for p, times in pieces.items() if times]})


def times_of(path: Path, task: str = "a") -> list[int]:
    rows = read_rows(path, ["R", "batch_id"]).to_pylist()
    return sorted(row["R"]["ts"] for row in rows if row["task"] == task)


def test_each_batch_is_one_version_with_the_run_and_batch_as_its_transaction(tmp_path: Path) -> None:
    run = checkpoint()
    sink = claimed(tmp_path / "t", run)
    first = DeltaTable(str(tmp_path / "t")).version()
    assert stage_and_commit(sink, 0, {0: [1, 2], 1: [3]}) == ["a"]
    assert stage_and_commit(sink, 1, {0: [], 1: []}) == ["a"]  # no results: still one version
    assert stage_and_commit(sink, 2, {1: [4]}) == ["a"]
    log = read_log(tmp_path / "t")
    assert log.version == first + 3
    assert [log.adds_per_version[first + v] for v in (1, 2, 3)] == [2, 0, 1]
    assert log.transactions == {run.run_id: 2}
    assert DeltaTable(str(tmp_path / "t")).transaction_version(run.run_id) == 2
    assert times_of(tmp_path / "t") == [1, 2, 3, 4]
    # polars, through delta-rs' log, reads the same rows, with the task partition column
    frame = pl.read_delta(str(tmp_path / "t"))
    assert sorted(frame.filter(pl.col("task") == "a")["R"].struct.field("ts").to_list()) == [1, 2, 3, 4]


def test_a_replay_commits_nothing_twice(tmp_path: Path) -> None:
    sink = claimed(tmp_path / "t", checkpoint())
    stage_and_commit(sink, 0, {0: [1], 1: [2]})
    version = read_log(tmp_path / "t").version
    assert stage_and_commit(sink, 0, {0: [1], 1: [2]}) == []  # the same sink replays
    restarted = claimed(tmp_path / "t", CheckpointId(sink.run_id(), "/elsewhere"))  # a restart: a new process
    assert stage_and_commit(restarted, 0, {0: [1], 1: [2]}) == []
    assert read_log(tmp_path / "t").version == version
    assert times_of(tmp_path / "t") == [1, 2]


def test_an_older_batch_is_refused(tmp_path: Path) -> None:
    sink = claimed(tmp_path / "t", checkpoint())
    stage_and_commit(sink, 3, {0: [1]})
    with pytest.raises(StaleBatchError, match="below the last committed batch 3"):
        stage_and_commit(sink, 2, {0: [5]})
    with pytest.raises(StaleBatchError):
        stage_and_commit(claimed(tmp_path / "t", CheckpointId(sink.run_id(), "/x")), 1, {0: [5]})
    assert times_of(tmp_path / "t") == [1]


def test_pieces_staged_without_a_commit_are_invisible_and_the_replay_commits_them(tmp_path: Path) -> None:
    run = checkpoint()
    sink = claimed(tmp_path / "t", run)
    stage_and_commit(sink, 0, {0: [1]})
    sink.stage(1, 0, {"a": make_table("a", 1, [pair(10)])})
    sink.stage(1, 1, {"a": make_table("a", 1, [pair(11)])})  # killed here, before the driver's commit
    assert times_of(tmp_path / "t") == [1]
    assert pl.read_delta(str(tmp_path / "t")).height == 1
    restarted = claimed(tmp_path / "t", CheckpointId(run.run_id, run.path))
    assert stage_and_commit(restarted, 1, {0: [10], 1: [11]}) == ["a"]  # the pieces there are kept
    assert times_of(tmp_path / "t") == [1, 10, 11]


def test_a_missing_piece_fails_the_commit_and_commits_nothing(tmp_path: Path) -> None:
    sink = claimed(tmp_path / "t", checkpoint())
    sink.stage(0, 0, {"a": make_table("a", 0, [pair(1)])})
    version = read_log(tmp_path / "t").version
    with pytest.raises(RuntimeError, match="cannot be committed"):
        sink.commit(0, {"a": [0, 1]})
    assert read_log(tmp_path / "t").version == version


def test_a_sink_without_a_fence_refuses_to_write(tmp_path: Path) -> None:
    sink = new_sink(tmp_path / "t")
    with pytest.raises(RuntimeError, match="fences the sinks"):
        sink.stage(0, 0, {"a": make_table("a", 0, [pair(1)])})


def test_the_fence_refuses_another_checkpoint_and_fresh_clears_its_rows(tmp_path: Path) -> None:
    old = claimed(tmp_path / "t", checkpoint())
    stage_and_commit(old, 0, {0: [1, 2]})
    cleared_at = read_log(tmp_path / "t").version
    new_run = checkpoint()
    with pytest.raises(SinkOwnerError, match=r"Delta .* \(task=a\) written by checkpoint"):
        fence_sinks([new_sink(tmp_path / "t")], ["a", "b"], new_run, fresh=False)
    sink = new_sink(tmp_path / "t")
    lines = fence_sinks([sink], ["a", "b"], new_run, fresh=True)
    assert len(lines) == 1 and "cleared Delta" in lines[0]
    assert times_of(tmp_path / "t") == []
    stage_and_commit(sink, 0, {0: [7]})  # the new run's batch 0: not taken for the old run's replay
    assert times_of(tmp_path / "t") == [7]
    # time travel still reads the old run's rows
    assert pl.read_delta(str(tmp_path / "t"), version=cleared_at).height == 2
    assert sink.owner("a") == new_run


def test_tasks_of_different_streams_share_one_table_with_nulls_where_a_task_joins_no_stream(tmp_path: Path) -> None:
    spec = parse_spec(
        {
            **BASE,
            "streams": {**BASE["streams"], "T": {"fields": {"k": "int"}, "topic": "t"}},
            "tasks": [{"name": "a", "join": ["R", "S"]}, {"name": "c", "join": ["T", "S"]}],
        }
    )
    schema = spec_table_schema(spec)
    assert schema.names == ["R", "S", "T", "batch_id", "emitted_at"]
    sink = claimed(tmp_path / "t", checkpoint(), spec)
    from windjoin.operators.result_table import table_from_records

    c = table_from_records(spec, "c", [{"task": "c", "T": {"ts": 5, "k": 1}, "S": {"t": 6, "k": 1, "d": True}}], 0, 7)
    sink.stage(0, 0, {"a": make_table("a", 0, [pair(1)]), "c": c})
    assert sorted(sink.commit(0, {"a": [0], "c": [0]})) == ["a", "c"]
    rows = {row["task"]: row for row in read_rows(tmp_path / "t", ["R", "S", "T"]).to_pylist()}
    assert rows["a"]["T"] is None and rows["a"]["R"]["ts"] == 1
    assert rows["c"]["R"] is None and rows["c"]["T"] == {"ts": 5, "k": 1}
    assert pl.read_delta(str(tmp_path / "t")).filter(pl.col("task") == "c").height == 1


def test_a_spec_that_adds_a_stream_adds_its_column(tmp_path: Path) -> None:
    run = checkpoint()
    stage_and_commit(claimed(tmp_path / "t", run), 0, {0: [1]})
    spec = parse_spec(
        {
            **BASE,
            "streams": {**BASE["streams"], "T": {"fields": {"k": "int"}, "topic": "t"}},
            "tasks": [*BASE["tasks"], {"name": "c", "join": ["T", "R"]}],
        }
    )
    sink = claimed(tmp_path / "t", CheckpointId(run.run_id, run.path), spec)
    assert "T" in DeltaTable(str(tmp_path / "t")).schema().to_arrow().names
    stage_and_commit(sink, 1, {0: [2]})
    assert pl.read_delta(str(tmp_path / "t")).height == 2


def test_a_table_typing_a_column_otherwise_is_refused_naming_the_key(tmp_path: Path) -> None:
    stage_and_commit(claimed(tmp_path / "t", checkpoint()), 0, {0: [1]})
    other = {**BASE, "streams": {**BASE["streams"], "R": {"timestamp": "ts", "fields": {"k": "string"}, "topic": "r"}}}
    with pytest.raises(ValueError, match="sinks.delta.path: column 'R' .* write to a new table path"):
        new_sink(tmp_path / "t", parse_spec(other)).owner("a")


def test_the_sink_pickles_without_its_table(tmp_path: Path) -> None:
    sink = claimed(tmp_path / "t", checkpoint())
    stage_and_commit(sink, 0, {0: [1]})
    copy = pickle.loads(pickle.dumps(sink))
    assert copy._table is None and copy.run_id() == sink.run_id()
    copy.stage(1, 0, {"a": make_table("a", 1, [pair(2)])})  # as an executor does
    assert sink.commit(1, {"a": [0]}) == ["a"]


def test_the_spec_key_and_its_errors(tmp_path: Path) -> None:
    spec = parse_spec({**BASE, "sinks": {"delta": {"path": str(tmp_path / "t")}}})
    [sink] = build_sinks(spec)
    assert isinstance(sink, DeltaSink) and sink.tasks == ["a", "b"]
    for bad, message in (
        ({"path": ""}, "sinks.delta.path"),
        ({"path": "s3://bucket/x?region=eu"}, "sinks.delta.path: .*query options"),
        ({"path": "s3://user:pw@bucket/x"}, "sinks.delta.path: .*credentials"),
        ({"path": "/t", "retain": 1}, "sinks.delta.retain"),
    ):
        with pytest.raises(SpecError, match=message):
            parse_spec({**BASE, "sinks": {"delta": bad}})


def test_storage_options_allow_http_only_for_an_http_s3_endpoint() -> None:
    assert storage_options("/local/table", {"AWS_ENDPOINT_URL": "http://x"}) is None
    assert storage_options("s3://b/t", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}) == {"AWS_ALLOW_HTTP": "true"}
    assert storage_options("s3://b/t", {"AWS_ENDPOINT_URL": "https://s3.example"}) is None
    assert storage_options("s3://b/t", {}) is None


def test_the_table_on_an_s3_compatible_store(s3_bucket: str) -> None:
    url = f"{s3_bucket}/results/table"
    run = checkpoint()
    sink = claimed(url, run)
    assert stage_and_commit(sink, 0, {0: [1, 2], 1: [3]}) == ["a"]
    assert stage_and_commit(sink, 0, {0: [1, 2], 1: [3]}) == []
    sink.stage(1, 0, {"a": make_table("a", 1, [pair(9)])})  # staged, not committed: invisible
    options = {"AWS_ALLOW_HTTP": "true"}
    table = DeltaTable(url, storage_options=options)
    assert table.transaction_version(run.run_id) == 0
    frame = pl.read_delta(url, storage_options=options)
    assert sorted(frame["R"].struct.field("ts").to_list()) == [1, 2, 3]
    restarted = claimed(url, CheckpointId(run.run_id, run.path))
    assert stage_and_commit(restarted, 1, {0: [9]}) == ["a"]
    assert pl.read_delta(url, storage_options=options).height == 4
    with pytest.raises(SinkOwnerError):
        fence_sinks([new_sink(url)], ["a"], checkpoint(), fresh=False)
