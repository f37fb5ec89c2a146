"""Parquet results on an S3-compatible server (moto's server mode, `tests/s3_server.py`) through pyarrow's S3
filesystem: staging, the commit by copy and marker, a commit killed halfway, snapshots and retention, the proxy's
queries, and the URLs refused."""

from __future__ import annotations

import uuid

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest
from fastapi.testclient import TestClient

from tests.pipelines.proxy_helpers import AUTH, access, fetch_all, make_spec
from tests.support.result_tables import make_table
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.result_files import ObjectFiles, result_files
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.results.parquet_scan import Footers
from windjoin.connectors.results.result_query import ResultStore
from windjoin.operators.result_table import table_records
from windjoin.operators.sink_owner import CheckpointId, StaleBatchError
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.proxy.app import create_app


def pair(ts: int, k: int = 1) -> dict:
    return {"R": {"ts": ts, "k": k, "x": 0.5, "z": f"r{ts}"}, "S": {"t": ts, "k": k, "d": True}}


def stage_and_commit(sink: ParquetSink, batch: int, pieces: dict[int, list[int]]) -> list[str]:
    tables = {p: make_table("a", batch, [pair(ts) for ts in times]) for p, times in pieces.items()}
    for piece, table in tables.items():
        sink.stage(batch, piece, {"a": table})
    schema = make_table("a", batch, []).schema
    return sink.commit(batch, {"a": [p for p, t in tables.items() if t.num_rows]}, schemas={"a": schema})


def times_of(sink: ParquetSink) -> list[int]:
    return [row["R"]["ts"] for row in table_records(sink.read("a"))]


def test_results_round_trip_through_the_object_store(s3_bucket: str) -> None:
    url = f"{s3_bucket}/results"
    sink = ParquetSink(url)
    assert isinstance(sink.files, ObjectFiles) and sink.name == f"Parquet {url}"
    owner = CheckpointId(str(uuid.uuid4()), "/checkpoint")
    sink.claim("a", owner)
    assert sink.owner("a") == owner and not sink.holds_results("a")

    sink.stage(0, 1, {"a": make_table("a", 0, [pair(3)])})
    sink.stage(0, 0, {"a": make_table("a", 0, [pair(1), pair(2)])})
    assert sink.committed_batches("a") == []  # staged is not committed
    assert stage_and_commit(sink, 0, {0: [1, 2], 1: [3]}) == ["a"]
    assert times_of(sink) == [1, 2, 3] and sink.holds_results("a")
    assert stage_and_commit(sink, 0, {0: [1, 2], 1: [3]}) == []  # a replay commits nothing twice
    assert stage_and_commit(sink, 1, {}) == ["a"]  # an empty batch: one empty file
    assert [len(sink.batch_files("a", b)) for b in (0, 1)] == [2, 1]
    with pytest.raises(StaleBatchError):
        stage_and_commit(ParquetSink(url), 0, {0: [9]})

    # Other tools read the hive layout; the markers and hidden folders are not data.
    fs, root = pafs.FileSystem.from_uri(url)
    table = ds.dataset(root, filesystem=fs, format="parquet", partitioning="hive").to_table(columns=["task", "batch"])
    assert sorted(zip(table["task"].to_pylist(), table["batch"].to_pylist(), strict=True)) == [("a", 0)] * 3

    sink.clear("a")
    assert sink.committed_batches("a") == [] and not sink.holds_results("a") and sink.owner("a") is None


def test_a_commit_killed_halfway_is_invisible_and_its_replay_completes_it(s3_bucket: str) -> None:
    url = f"{s3_bucket}/results"
    sink = ParquetSink(url)
    assert stage_and_commit(sink, 0, {0: [1]}) == ["a"]
    for piece, times in ((0, [2]), (1, [3, 4])):
        sink.stage(1, piece, {"a": make_table("a", 1, [pair(ts) for ts in times])})
    # The driver died inside the commit: one piece copied into the batch folder, no marker written.
    pending, final = sink.pending_dir("a", 1), sink.batch_dir("a", 1)
    sink.files.fs.copy_file(f"{pending}/part-1.parquet", f"{final}/part-1.parquet")

    fresh = ParquetSink(url)  # the restarted job
    assert fresh.committed_batches("a") == [0] and times_of(fresh) == [1]
    assert stage_and_commit(fresh, 1, {0: [2], 1: [3, 4]}) == ["a"]  # the replay stages nothing new, commits
    assert times_of(fresh) == [1, 2, 3, 4]
    assert [name for name in fresh.files.names(fresh.task_dir("a")) if name.startswith(".")] == []

    # A copy left halfway under an older batch id (replayed and committed since) is removed by the next commit.
    stray = sink.batch_dir("a", 5)
    sink.files.fs.copy_file(f"{fresh.batch_dir('a', 1)}/part-0.parquet", f"{stray}/part-0.parquet")
    assert stage_and_commit(fresh, 6, {0: [7]}) == ["a"]
    assert "batch=5" not in fresh.files.names(fresh.task_dir("a")) and times_of(fresh) == [1, 2, 3, 4, 7]


def test_snapshots_retention_and_footers_on_the_object_store(s3_bucket: str) -> None:
    url = f"{s3_bucket}/results"
    sink, store = ParquetSink(url), SnapshotStore(url)
    for batch in range(4):
        stage_and_commit(sink, batch, {0: [1000 * batch + 1, 1000 * batch + 2]})
    assert store.commit("a", 1, "periodic", 10).first_batch == 0
    assert store.commit("a", 1, "periodic", 11) is None  # a replay: nothing new
    assert store.commit("a", 3, "periodic", 12).last_batch == 3
    assert [(s.id, s.min_time, s.max_time) for s in store.list("a")] == [(1, 1, 1002), (2, 2001, 3002)]

    footers = Footers(sink)
    [(piece, _, footer, _)] = footers.pieces("a", 0)
    assert (piece, footer.num_rows) == (0, 2)
    assert store.expire("a", retain_ms=1500) == [1]
    assert sink.committed_batches("a") == [2, 3]
    with pytest.raises(FileNotFoundError):
        footers.pieces("a", 0)  # left with its snapshot: a query reads again

    assert footers.pieces("a", 2)[0].metadata.num_rows == 2
    sink.clear("a")  # a new job writes batch 2 again, with other rows: read anew, never the kept footer
    stage_and_commit(sink, 2, {0: [1, 2, 3]})
    assert footers.pieces("a", 2)[0].metadata.num_rows == 3


def test_the_proxy_answers_from_the_object_store(s3_bucket: str) -> None:
    url = f"{s3_bucket}/results"
    sink = ParquetSink(url)
    for batch in range(3):
        stage_and_commit(sink, batch, {0: [100 * batch + 1], 1: [100 * batch + 2]})
    SnapshotStore(url).commit("a", 2, "periodic", 1)
    spec = make_spec(None, None).model_copy(update={"sinks": parse_spec({**_spec_dict(url)}).sinks})
    store = ResultStore(spec, None, "unused", url)
    with TestClient(headers=AUTH, app=create_app(store, access=access())) as client:
        rows = fetch_all(client, "a", {"from": 0, "to": 10_000, "limit": 2})
        assert [row["R"]["ts"] for row in rows] == [1, 2, 101, 102, 201, 202]
        assert client.get("/readyz").json() == {"ready": True, "checks": {"parquet": True}}


def _spec_dict(url: str) -> dict:
    return {
        "window": {"kind": "time", "size_ms": 1000},
        "streams": {"R": {"fields": {"k": "int"}}, "S": {"fields": {"k": "int"}}},
        "tasks": [{"name": "a", "join": ["R", "S"]}],
        "sinks": {"parquet": {"path": url}},
    }


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("s3://key:secret@bucket/results", "a URL with credentials is refused"),
        ("s3://bucket/results?access_key=AKIA&secret_key=x", r"credentials in the URL \(access_key, secret_key\)"),
    ],
)
def test_credentials_in_the_url_are_refused_naming_the_key(url: str, refused: str) -> None:
    with pytest.raises(ValueError, match=rf"sinks\.parquet\.path: {refused}") as caught:
        parse_spec(_spec_dict(url))
    assert "secret" not in str(caught.value).replace("secret_key", "")
    with pytest.raises(ValueError, match=refused):
        result_files(url)


def test_a_scheme_no_filesystem_knows_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"sinks\.parquet\.path: 'nosuch://bucket/x' is no location pyarrow can open"):
        result_files("nosuch://bucket/x")


@pytest.mark.parametrize(
    "url",
    [
        "abfs://c@acct.dfs.core.windows.net/r?sv=2022-11-02&ss=b&srt=co&sp=rwdl&se=2030-01-01T00:00:00Z&sig=abc%3D",
        "abfs://c@acct.dfs.core.windows.net/r?sig=abc%3D",
        "abfs://c@acct.dfs.core.windows.net/r?client_secret=xyz&client_id=app",
        "gs://bucket/r?client_secret=xyz",
    ],
)
def test_azure_sas_and_client_secrets_in_the_query_are_refused(url: str) -> None:
    """Issue 47: a SAS token or a client secret in the query passed the guard."""
    with pytest.raises(ValueError, match=r"sinks\.parquet\.path: credentials in the URL \("):
        parse_spec(_spec_dict(url))


def test_an_azure_container_in_the_url_is_not_taken_for_a_user() -> None:
    """Issue 47: `abfs://container@account...` was refused as a URL with credentials; a password after the
    container still is, and a user in any other scheme."""
    url = "abfs://results@acct.dfs.core.windows.net/windjoin"
    assert parse_spec(_spec_dict(url)).sinks.parquet.path == url
    for refused in ("abfs://results:key@acct.dfs.core.windows.net/w", "s3://user@bucket/w"):
        with pytest.raises(ValueError, match="a URL with credentials is refused"):
            parse_spec(_spec_dict(refused))
