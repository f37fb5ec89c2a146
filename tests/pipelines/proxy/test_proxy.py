"""The query proxy over a real store (real Redis, real Parquet files written by the sinks): one-time queries across
the Redis/Parquet boundary against an oracle, bad queries, health/readiness/metrics, OpenAPI, and continuous
queries through uvicorn on a free port (every result once, in order, across reconnects; slow consumers)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pipelines.proxy_helpers import AUTH, Results, Server, access, fetch_all, make_spec, new_namespace
from tests.support.proxy_metrics import metric, wait_subscribers
from windjoin.connectors.local.processes import free_port
from windjoin.connectors.results.result_query import MAX_LIMIT, ResultStore
from windjoin.pipelines.cli.query import sse_events
from windjoin.pipelines.proxy.app import create_app
from windjoin.pipelines.proxy.feed import FeedConfig

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
N_BATCHES, SNAPSHOT_AFTER, ROWS = 12, 7, 15


@pytest.fixture(scope="module")
def tiers(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Results:
    """Batches 0..11 of tasks a and b; snapshot 1 covers 0..7 and Redis dropped what it covers before time 600."""
    path = tmp_path_factory.mktemp("proxy") / "parquet"
    results = Results(make_spec(redis_url, path), new_namespace(), redis_url, path)
    for b in range(N_BATCHES):
        results.write(ROWS, t0=100 * b)  # result times of neighbouring batches overlap
        if b == SNAPSHOT_AFTER:
            for task in ("a", "b"):
                results.snapshot(task, cutoff_ms=600)
    return results


@pytest.fixture(scope="module")
def client(tiers: Results) -> TestClient:
    with TestClient(headers=AUTH, app=create_app(tiers.store(), access=access())) as client:
        yield client


def test_the_boundary_is_real(tiers: Results) -> None:
    """Redis no longer holds all results (the old part is only in Parquet), yet holds some covered ones."""
    from windjoin.connectors.results.redis_tier import read_all

    held = len(read_all(tiers.redis, "a", tiers.namespace, -(2**53), 2**53))
    assert 0 < held < len(tiers.rows["a"])
    in_redis_and_snapshot = len(read_all(tiers.redis, "a", tiers.namespace, 600, 900))
    assert in_redis_and_snapshot > 0  # both tiers hold batches of these times: duplicates would show


@SETTINGS
@given(
    task=st.sampled_from(["a", "b"]),
    t_from=st.integers(-50, 1300),
    width=st.integers(0, 1300),
    limit=st.integers(1, 40),
)
def test_one_time_query_across_tiers_equals_oracle(
    client: TestClient, tiers: Results, task: str, t_from: int, width: int, limit: int
) -> None:
    rows = fetch_all(client, task, {"from": t_from, "to": t_from + width, "limit": limit})
    assert rows == tiers.oracle(task, t_from, t_from + width)


@pytest.mark.parametrize(
    ("where", "keep"),
    [
        (["R.k=2"], lambda r: r["R"]["k"] == 2),
        (["R.z in p,q", "S.d=true"], lambda r: r["R"]["z"] in ("p", "q") and r["S"]["d"]),
        (
            ["R.k!=0", "result_time>=550", "S.k<3"],
            lambda r: r["R"]["k"] != 0 and r["result_time"] >= 550 and r["S"]["k"] < 3,
        ),
        (['R.z="r"', "batch_id>5"], lambda r: r["R"]["z"] == "r" and r["batch_id"] > 5),
        (["R.x<=0.5"], lambda r: r["R"]["x"] <= 0.5),
    ],
)
def test_selection(client: TestClient, tiers: Results, where: list[str], keep: Any) -> None:
    rows = fetch_all(client, "a", {"from": 0, "to": 2000, "where": where, "limit": 17})
    expected = [r for r in tiers.oracle("a", 0, 2000) if keep(r)]
    assert expected and rows == expected


def test_projection(client: TestClient, tiers: Results) -> None:
    rows = fetch_all(client, "a", {"from": 300, "to": 900, "fields": "R.k,S.t,result_time", "limit": 13})
    expected = [
        {"R": {"k": r["R"]["k"]}, "S": {"t": r["S"]["t"]}, "result_time": r["result_time"]}
        for r in tiers.oracle("a", 300, 900)
    ]
    assert rows == expected


def test_tasks_fields_snapshots(client: TestClient) -> None:
    assert client.get("/v1/tasks").json() == {"tasks": ["a", "b"]}
    fields = client.get("/v1/tasks/b/fields").json()["fields"]
    assert fields["S.t"] == "int" and fields["R.z"] == "string" and fields["S.d"] == "bool"
    assert fields["R.x"] == "float" and fields["result_time"] == "int"
    [snapshot] = client.get("/v1/tasks/a/snapshots").json()["snapshots"]
    assert (snapshot["id"], snapshot["first_batch"], snapshot["last_batch"]) == (1, 0, SNAPSHOT_AFTER)
    assert snapshot["rows"] == ROWS * (SNAPSHOT_AFTER + 1)


BAD = [
    ("/v1/tasks/nope/results?from=0&to=10", 404),
    ("/v1/tasks/nope/fields", 404),
    ("/v1/tasks/nope/snapshots", 404),
    ("/v1/tasks/nope/stream", 404),
    ("/v1/tasks/a/results?from=10&to=0", 400),
    ("/v1/tasks/a/results?from=0&to=10&where=R.nope=1", 400),
    ("/v1/tasks/a/results?from=0&to=10&where=R.k=abc", 400),
    ("/v1/tasks/a/results?from=0&to=10&where=R.k~1", 400),
    ("/v1/tasks/a/results?from=0&to=10&where=", 400),
    ("/v1/tasks/a/results?from=0&to=10&fields=R.k,nope", 400),
    ("/v1/tasks/a/results?from=0&to=10&fields=", 400),
    ("/v1/tasks/a/results?from=0&to=10&cursor=garbage", 400),
    ("/v1/tasks/a/results?from=0&to=10&cursor=%00%ff", 400),
    ("/v1/tasks/a/stream?where=R.nope=1", 400),
    ("/v1/tasks/a/stream?fields=nope", 400),
    ("/v1/tasks/a/stream?cursor=garbage", 400),
    # FastAPI's own validation: missing, mistyped, out-of-range parameters and malformed task names.
    ("/v1/tasks/a/results?from=0", 422),
    ("/v1/tasks/a/results?from=x&to=1", 422),
    (f"/v1/tasks/a/results?from=0&to=1&limit={MAX_LIMIT + 1}", 422),
    ("/v1/tasks/a/results?from=0&to=1&limit=0", 422),
    ("/v1/tasks/a/results?from=0&to=99999999999999999999999", 422),
    ("/v1/tasks/a%7D:meta/results?from=0&to=1", 422),  # `a}:meta`: would break out of the hash tag
    ("/v1/tasks/a*/fields", 422),
    ("/v1/tasks/a%20b/snapshots", 422),
    ("/v1/tasks/..%2F..%2Fetc/fields", 404),  # the router sees another path: no such route
]


@pytest.mark.parametrize(("url", "status"), BAD)
def test_bad_queries_get_4xx_with_a_message_and_touch_no_key(
    client: TestClient, tiers: Results, url: str, status: int
) -> None:
    keys_before = set(tiers.redis.keys("*"))
    response = client.get(url)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert detail and (status == 422 or isinstance(detail, str))
    assert set(tiers.redis.keys("*")) == keys_before


def test_health_readiness_and_metrics(client: TestClient, tiers: Results) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert set(ready.json()["checks"]) == {"redis", "parquet"}
    rows = len(fetch_all(client, "a", {"from": 0, "to": 2000, "limit": MAX_LIMIT}))
    client.get("/v1/tasks/nope/results?from=0&to=1")
    text = client.get("/metrics").text
    assert 'windjoin_proxy_queries_total{kind="results",status="200"}' in text
    assert 'windjoin_proxy_queries_total{kind="results",status="404"}' in text
    assert 'windjoin_proxy_query_seconds_bucket{kind="results",le="+Inf"}' in text
    served = metric(text, 'windjoin_proxy_rows_served_total{kind="results"}')
    assert served >= rows == len(tiers.rows["a"])


def test_not_ready_when_redis_is_down(tiers: Results) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    store = ResultStore(make_spec(dead, tiers.parquet_path), dead, tiers.namespace, str(tiers.parquet_path))
    with TestClient(headers=AUTH, app=create_app(store, access=access())) as client:
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["redis"] is False
        response = client.get("/v1/tasks/a/results?from=0&to=10")
        assert response.status_code == 503 and "detail" in response.json()


def test_openapi_documents_every_parameter_and_response(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    assert {
        "/v1/tasks",
        "/v1/tasks/{task}/fields",
        "/v1/tasks/{task}/results",
        "/v1/tasks/{task}/stream",
        "/v1/tasks/{task}/snapshots",
        "/healthz",
        "/readyz",
        "/metrics",
    } <= set(paths)
    for path, operations in paths.items():
        for method, op in operations.items():
            assert op.get("description") or op.get("summary"), (path, method)
            for parameter in op.get("parameters", []):
                assert parameter.get("description"), (path, parameter["name"])
            assert "200" in op["responses"]
    results = paths["/v1/tasks/{task}/results"]["get"]
    assert results["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("ResultPage")
    assert {"400", "404", "422"} <= set(results["responses"])


# Continuous queries, through uvicorn on a free port.


@pytest.fixture
def live(redis_url: str, tmp_path: Path) -> Results:
    """Fresh sinks (own namespace and folder) for tests that write while they query."""
    return Results(make_spec(redis_url, tmp_path / "parquet"), new_namespace(), redis_url, tmp_path / "parquet")


class Reader(threading.Thread):
    """Reads one SSE stream with httpx in a thread, keeping each event's id and rows, until it has `want` rows or the
    stream ends. `stall`: an event to wait for before reading anything, with a small receive buffer (a client that
    stops reading)."""

    def __init__(
        self,
        url: str,
        params: dict[str, Any],
        want: int,
        *,
        headers: dict[str, str] | None = None,
        stall: threading.Event | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.params, self.want, self.stall = url, params, want, stall
        self.headers = {**AUTH, **(headers or {})}
        self.events: list[tuple[str, list[dict[str, Any]]]] = []
        self.end: dict[str, Any] | None = None
        self.ready: str | None = None  # id of the "ready" event (the start cursor)
        self.error: BaseException | None = None

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [row for _, rows in self.events for row in rows]

    def run(self) -> None:
        options = [(socket.SOL_SOCKET, socket.SO_RCVBUF, 16_384)] if self.stall else []
        transport = httpx.HTTPTransport(socket_options=options)
        try:
            with (
                httpx.Client(transport=transport, timeout=httpx.Timeout(30, read=60)) as client,
                client.stream("GET", self.url, params=self.params, headers=self.headers) as response,
            ):
                assert response.status_code == 200, response.read()
                if self.stall is not None:
                    self.stall.wait(120)
                count = 0
                for event, event_id, data in sse_events(response.iter_lines()):
                    if event == "end":
                        self.end = orjson.loads(data)
                        return
                    if event == "ready":
                        self.ready = event_id
                        if self.want == 0:
                            return
                        continue
                    rows = orjson.loads(data)
                    self.events.append((event_id, rows))
                    count += len(rows)
                    if count >= self.want:
                        return
        except BaseException as err:  # re-raised by finish()
            self.error = err

    def finish(self, timeout: float = 90) -> Reader:
        self.join(timeout)
        assert not self.is_alive(), f"reader still running with {len(self.rows)} of {self.want} rows"
        if self.error:
            raise self.error
        return self


def stream_url(server: Server, task: str) -> str:
    return f"{server.url}/v1/tasks/{task}/stream"


def test_stream_delivers_every_new_result_once_in_order_across_a_reconnect(live: Results) -> None:
    live.write(ROWS, t0=0)  # before the subscription: not part of "now"
    with Server(create_app(live.store(), FeedConfig(block_ms=200), access=access())) as server:
        start = live.next_batch
        batches = [live.prepare(ROWS, t0=100 * b) for b in range(9)]
        total = 9 * ROWS
        first = Reader(stream_url(server, "a"), {"where": "R.k>=0"}, want=3 * ROWS + 4)  # leaves mid-stream
        first.start()
        wait_subscribers(server, 1)
        for batch in batches[:6]:
            live.commit(batch)
        first.finish()
        expected = live.since("a", start)
        seen = first.rows
        assert len(seen) >= 3 * ROWS + 4 and seen == expected[: len(seen)]
        # Resume with the last event id, as a browser does: the rest of the 6 batches, then 3 more, once each.
        second = Reader(
            stream_url(server, "a"),
            {"where": "R.k>=0"},
            want=total - len(seen),
            headers={"Last-Event-ID": first.events[-1][0]},
        )
        second.start()
        for batch in batches[6:]:
            live.commit(batch)
        second.finish()
        assert seen + second.rows == live.since("a", start)
        assert len(live.since("a", start)) == total


def test_stream_from_a_past_cursor_catches_up_then_follows_with_a_selection(live: Results) -> None:
    with Server(create_app(live.store(), FeedConfig(block_ms=200, page_rows=7), access=access())) as server:
        for b in range(4):
            live.write(ROWS, t0=100 * b)
        everything = Reader(stream_url(server, "b"), {"from": 0}, want=4 * ROWS)
        everything.start()
        everything.finish()
        assert everything.rows == live.since("b", 0)
        assert max(len(rows) for _, rows in everything.events) <= 7  # pages of page_rows
        middle = len(everything.events) // 2
        cursor = everything.events[middle][0]
        done = sum(len(rows) for _, rows in everything.events[: middle + 1])
        later = [live.prepare(ROWS, t0=100 * b) for b in range(4, 7)]
        rest = live.since("b", 0)[done:] + [r for batch in later for r in batch.rows["b"]]
        keep = [r for r in rest if r["R"]["k"] >= 2]
        selected = Reader(stream_url(server, "b"), {"cursor": cursor, "where": "R.k>=2"}, want=len(keep))
        selected.start()
        for batch in later:  # arrive while it catches up or after: through the task's shared reader
            live.commit(batch)
        selected.finish()
        assert selected.rows == keep


def test_a_slow_consumer_is_cut_off_and_resumes_while_a_fast_one_gets_everything(redis_url: str) -> None:
    live = Results(make_spec(redis_url, None), new_namespace(), redis_url, None)
    n_batches, rows, z_size = 100, 50, 4000  # ~20 MB of results: more than socket buffers hold
    batches = [live.prepare(rows, t0=100 * b, z_size=z_size) for b in range(n_batches)]
    total = n_batches * rows
    # A chunk per batch (page_rows = rows): the slow client's queue holds 16 x 200 kB, far less than is written.
    config = FeedConfig(queue_size=16, page_rows=rows, block_ms=100)
    written = threading.Event()
    with Server(create_app(live.store(), config, access=access())) as server:
        fast = Reader(stream_url(server, "a"), {}, want=total)
        slow = Reader(stream_url(server, "a"), {}, want=total, stall=written)
        fast.start()
        slow.start()
        wait_subscribers(server, 2)
        for batch in batches:
            live.commit(batch)
            time.sleep(0.005)
        written.set()  # the slow client starts reading only now
        fast.finish()
        slow.finish()
        expected = live.since("a", 0)
        assert fast.rows == expected and fast.end is None
        assert slow.end is not None and slow.end["error"] == "slow consumer", slow.end
        assert len(slow.rows) < total and slow.rows == expected[: len(slow.rows)]
        resumed = Reader(stream_url(server, "a"), {"cursor": slow.end["cursor"]}, want=total - len(slow.rows))
        resumed.start()
        resumed.finish()
        assert slow.rows + resumed.rows == expected
        metrics = httpx.get(f"{server.url}/metrics", headers=AUTH).text
        assert metric(metrics, "windjoin_proxy_slow_consumers_total") == 1


def test_a_parquet_only_proxy_serves_the_snapshots_and_refuses_streams(tiers: Results) -> None:
    spec = make_spec(None, tiers.parquet_path)
    store = ResultStore(spec, None, tiers.namespace, str(tiers.parquet_path))
    with TestClient(headers=AUTH, app=create_app(store, access=access())) as client:
        rows = fetch_all(client, "a", {"from": 0, "to": 5000, "limit": 50})
        assert rows == [r for r in tiers.oracle("a", 0, 5000) if r["batch_id"] <= SNAPSHOT_AFTER]
        assert client.get("/readyz").json() == {"ready": True, "checks": {"parquet": True}}
        response = client.get("/v1/tasks/a/stream")
        assert response.status_code == 404 and "sinks.redis" in response.json()["detail"]


def test_a_cursor_older_than_the_feed_is_gone(live: Results) -> None:
    from windjoin.connectors.redis.keys import feed_key

    for b in range(5):
        live.write(3, t0=100 * b)
    with Server(create_app(live.store(), FeedConfig(page_rows=3), access=access())) as server:
        reader = Reader(stream_url(server, "a"), {"from": 0}, want=3)  # one event: batch 0, id = the cursor after it
        reader.start()
        [(cursor, rows)] = reader.finish().events
        assert rows == live.since("a", 0)[:3]
        live.redis.xtrim(feed_key("a", live.namespace), maxlen=2, approximate=False)  # as MAXLEN would: keep 3, 4
        for params, want in (({"cursor": cursor}, live.since("a", 0)[3:]), ({"from": 0}, live.since("a", 0))):
            response = httpx.get(stream_url(server, "a"), params=params, headers=AUTH)
            assert response.status_code == 410 and "from Parquet" in response.json()["detail"], response.text
            # the 410's cursor reads the trimmed batches from Parquet, then the feed: every row once, in order
            resumed = Reader(stream_url(server, "a"), {"cursor": response.json()["cursor"]}, want=len(want))
            resumed.start()
            assert resumed.finish().rows == want
    with Server(create_app(live.store_without_parquet(), FeedConfig(page_rows=3), access=access())) as server:
        response = httpx.get(stream_url(server, "a"), params={"cursor": cursor}, headers=AUTH)
        assert response.status_code == 410 and "one-time query" in response.json()["detail"], response.text
        assert response.json()["cursor"] is None


def test_many_subscribers_of_a_task_share_one_feed_reader(live: Results) -> None:
    """Five idle streams of task a: Redis sees one blocked feed read (XREAD BLOCK), not five; then each stream
    gets the next batch."""
    with Server(create_app(live.store(), FeedConfig(block_ms=1000), access=access())) as server:
        batch = live.prepare(ROWS, t0=0)
        readers = [Reader(stream_url(server, "a"), {}, want=ROWS) for _ in range(5)]
        for reader in readers:
            reader.start()
        wait_subscribers(server, 5)
        time.sleep(1.5)  # blocked reads of earlier tests' servers (block_ms <= 1 s) are over by now
        samples = []
        for _ in range(10):
            samples.append(int(live.redis.info("clients")["blocked_clients"]))
            time.sleep(0.1)
        assert max(samples) == 1, samples
        live.commit(batch)
        for reader in readers:
            assert reader.finish().rows == batch.rows["a"]


def test_a_client_that_leaves_before_any_result_resumes_from_the_ready_event(live: Results) -> None:
    """A stream from now says where "now" is (event "ready", id = cursor): a browser reconnecting with that id as
    Last-Event-ID gets every result committed while it was away."""
    live.write(ROWS, t0=0)
    with Server(create_app(live.store(), FeedConfig(block_ms=200), access=access())) as server:
        first = Reader(stream_url(server, "a"), {}, want=0)
        first.start()
        assert first.finish().ready is not None and first.rows == []
        start = live.next_batch
        live.write(ROWS, t0=100)
        live.write(ROWS, t0=200)
        again = Reader(stream_url(server, "a"), {}, want=2 * ROWS, headers={"Last-Event-ID": first.ready})
        again.start()
        assert again.finish().rows == live.since("a", start)
