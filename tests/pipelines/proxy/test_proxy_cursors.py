"""Forged and garbled cursors through a real uvicorn server: every one gets an answer of the documented kinds (400
naming the cursor, 410, or the task's own rows), never a 5xx; a resume cursor no service returns (past its own
last batch, or a last batch never committed) is a 400, not a 503 to retry forever nor rows read on its say-so."""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

import httpx
import pytest

from tests.pipelines.proxy_helpers import AUTH, Results, Server, access, make_spec, new_namespace
from windjoin.operators.query.cursors import FEED_END, MAX_TIME
from windjoin.pipelines.proxy.app import create_app

BATCHES = 6  # batches 0..5 in both tiers
EXTREMES = [-(2**63), -2, -1, 0, 2, BATCHES - 1, BATCHES, MAX_TIME, FEED_END, 2**63]


def forge(parts: Any) -> str:
    """A cursor as the service encodes them (URL-safe base64 of JSON), made here with any content."""
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def tiers(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Results:
    path = tmp_path_factory.mktemp("cursors") / "parquet"
    results = Results(make_spec(redis_url, path), new_namespace(), redis_url, path)
    for b in range(BATCHES):
        results.write(5, t0=100 * b)
    return results


@pytest.fixture(scope="module")
def server(tiers: Results) -> Server:
    with Server(create_app(tiers.store(), access=access())) as server:
        yield server


def stream_status(client: httpx.Client, server: Server, cursor: str, task: str = "a") -> tuple[int, str]:
    """The status of a stream request (and its body when it is not a stream); the stream is closed at once."""
    request = client.build_request("GET", f"{server.url}/v1/tasks/{task}/stream", params={"cursor": cursor})
    response = client.send(request, stream=True)
    try:
        return response.status_code, "" if response.status_code == 200 else response.read().decode()
    finally:
        response.close()


def valid_resume(b: int, r: int, u: int) -> bool:
    """Could this service have returned the resume cursor ["p", task, b, r, u]? (u: a committed batch)"""
    return -1 <= b <= u and 0 <= u <= BATCHES - 1 and -1 <= r <= FEED_END


def test_forged_stream_cursors_are_400_or_served(server: Server) -> None:
    statuses = []
    with httpx.Client(timeout=30, headers=AUTH) as client:
        for b, r, u in itertools.product(EXTREMES, repeat=3):
            status, body = stream_status(client, server, forge(["p", "a", b, r, u]))
            statuses.append(status)
            if valid_resume(b, r, u):
                assert status in (200, 410), (b, r, u, status, body)
            else:
                assert status == 400 and body.startswith('{"detail":"cursor: '), (b, r, u, status, body)
        for b, r in itertools.product(EXTREMES, repeat=2):
            status, body = stream_status(client, server, forge(["f", "a", b, r]))
            in_range = -1 <= b <= MAX_TIME and -1 <= r <= FEED_END
            assert status in ((200, 410) if in_range else (400,)), (b, r, status, body)
    assert statuses.count(200) > 0 and statuses.count(400) > 0


BOTH, STREAM, RESULTS = ("stream", "results"), ("stream",), ("results",)


@pytest.mark.parametrize(
    ("cursor", "endpoints"),
    [
        (forge(["p", "b", 0, -1, 3]), BOTH),  # another task's
        (forge(["t", "a", 0, 0, 0]), STREAM),  # a one-time query's (valid for results)
        (forge(["f", "a", 0, 0]), RESULTS),  # a continuous query's (valid for a stream)
        (forge(["p", "a", 0, -1]), BOTH),  # a field short
        (forge(["p", "a", 0, -1, 3, 4]), BOTH),  # a field more
        (forge(["p", "a", 0, True, 3]), BOTH),  # not integers
        (forge(["p", "a", 0, 1.5, 3]), BOTH),
        (forge(["p", "a", "0", -1, 3]), BOTH),
        (forge(["p", "a", 0, -1, 2**64]), BOTH),  # beyond 64 bits
        (forge({"p": "a"}), BOTH),
        (forge(["p", "../a", 0, -1, 3]), BOTH),
        (base64.urlsafe_b64encode(b"\xff\xfe not json").decode(), BOTH),
        (forge(["p", "a", 0, -1, 3])[:-3], BOTH),  # truncated
        ("%%%%", BOTH),
        ("é" * 10, BOTH),
        ("x", BOTH),
    ],
)
def test_a_garbled_cursor_is_400_naming_it(server: Server, cursor: str, endpoints: tuple[str, ...]) -> None:
    with httpx.Client(timeout=30, headers=AUTH) as client:
        if "stream" in endpoints:
            status, body = stream_status(client, server, cursor)
            assert status == 400 and body.startswith('{"detail":"cursor: '), (status, body)
        if "results" in endpoints:
            page = client.get(f"{server.url}/v1/tasks/a/results", params={"from": 0, "to": 1000, "cursor": cursor})
            assert page.status_code == 400 and page.json()["detail"].startswith("cursor: "), page.text


def test_forged_one_time_cursors_read_only_the_tasks_rows(server: Server, tiers: Results) -> None:
    known = {(row["batch_id"], row["row"]) for row in tiers.rows["a"]}
    with httpx.Client(timeout=30, headers=AUTH) as client:
        for t, b, r in itertools.product([-(2**63), -1, 0, 250, MAX_TIME, 2**63], EXTREMES[1:-1], [0, 3, MAX_TIME]):
            params = {"from": 0, "to": 1000, "cursor": forge(["t", "a", t, b, r])}
            page = client.get(f"{server.url}/v1/tasks/a/results", params=params)
            assert page.status_code in (200, 400), page.text
            if page.status_code == 200:
                assert {(row["batch_id"], row["row"]) for row in page.json()["rows"]} <= known
            else:
                assert page.json()["detail"].startswith("cursor: ")


def test_a_resume_cursor_past_every_committed_batch_is_400_not_503(server: Server) -> None:
    with httpx.Client(timeout=30, headers=AUTH) as client:
        status, body = stream_status(client, server, forge(["p", "a", 0, -1, BATCHES + 100]))
        assert status == 400 and f"batch {BATCHES + 100} of task 'a' was never committed" in body, body
        status, _ = stream_status(client, server, forge(["p", "a", 0, -1, BATCHES - 1]))
        assert status == 200
