"""Forged and garbled cursors through a real uvicorn server: every one gets an answer of the documented kinds (400
naming the cursor, 410, or the task's own rows), never a 5xx. Cursors are signed: one whose MAC does not verify
(a position, batch, kind or task changed, no MAC, another key's) is a 400 whatever it names. Behind the MAC, a
cursor signed with the proxy's own key but naming what no service returns (past its own last batch, or a last batch
never committed) is a 400 too, not a 503 to retry forever nor rows read on its say-so."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.pipelines.proxy_helpers import AUTH, Results, Server, access, make_spec, new_namespace
from windjoin.operators.query.cursors import FEED_END, MAX_TIME, CursorCodec
from windjoin.pipelines.proxy.app import create_app

BATCHES = 6  # batches 0..5 in both tiers
EXTREMES = [-(2**63), -2, -1, 0, 2, BATCHES - 1, BATCHES, MAX_TIME, FEED_END, 2**63]
KEY = b"the proxy's cursor key, 32 bytes or more"
OTHER_KEY = b"another proxy's cursor key, 32 bytes or more"


def compact(content: Any) -> str:
    return json.dumps(content, separators=(",", ":"))


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def mac(task: str, body: bytes, key: bytes = KEY) -> bytes:
    """The documented MAC: the first 16 bytes of HMAC-SHA-256 over the domain, the task, NUL and the JSON."""
    return hmac.new(key, b"windjoin cursor v1\0" + task.encode() + b"\0" + body, hashlib.sha256).digest()[:16]


def forge(task: str, content: Any, key: bytes = KEY) -> str:
    """A cursor as the service encodes them (URL-safe base64 of the JSON and its MAC), made here with any content
    and any key: with the proxy's key, what only the proxy could make."""
    body = content if isinstance(content, bytes) else compact(content).encode()
    return b64(body + mac(task, body, key))


def retouch(token: str, edit: Callable[[list[Any]], list[Any]]) -> str:
    """`token` with its JSON edited and its MAC kept: what a client can do without the key."""
    raw = unb64(token)
    return b64(compact(edit(json.loads(raw[:-16]))).encode() + raw[-16:])


def test_the_forger_here_makes_the_services_cursors() -> None:
    assert forge("a", ["p", 3, -1, 5]) == CursorCodec(KEY).resume_cursor("a", (3, -1), 5)
    assert forge("b", ["t", 7, 0, 1]) == CursorCodec(KEY).page_cursor("b", (7, 0, 1))


@pytest.fixture(scope="module")
def tiers(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Results:
    path = tmp_path_factory.mktemp("cursors") / "parquet"
    results = Results(make_spec(redis_url, path), new_namespace(), redis_url, path, cursors=CursorCodec(KEY))
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
            status, body = stream_status(client, server, forge("a", ["p", b, r, u]))
            statuses.append(status)
            if valid_resume(b, r, u):
                assert status in (200, 410), (b, r, u, status, body)
            else:
                assert status == 400 and body.startswith('{"detail":"cursor: '), (b, r, u, status, body)
        for b, r in itertools.product(EXTREMES, repeat=2):
            status, body = stream_status(client, server, forge("a", ["f", b, r]))
            in_range = -1 <= b <= MAX_TIME and -1 <= r <= FEED_END
            assert status in ((200, 410) if in_range else (400,)), (b, r, status, body)
    assert statuses.count(200) > 0 and statuses.count(400) > 0


BOTH, STREAM, RESULTS = ("stream", "results"), ("stream",), ("results",)


@pytest.mark.parametrize(
    ("cursor", "endpoints"),
    [
        (forge("b", ["p", 0, -1, 3]), BOTH),  # another task's
        (forge("../a", ["p", 0, -1, 3]), BOTH),
        (forge("a", ["t", 0, 0, 0]), STREAM),  # a one-time query's (valid for results)
        (forge("a", ["f", 0, 0]), RESULTS),  # a continuous query's (valid for a stream)
        (forge("a", ["p", 0, -1]), BOTH),  # a field short
        (forge("a", ["p", 0, -1, 3, 4]), BOTH),  # a field more
        (forge("a", ["p", 0, True, 3]), BOTH),  # not integers
        (forge("a", ["p", 0, 1.5, 3]), BOTH),
        (forge("a", ["p", "0", -1, 3]), BOTH),
        (forge("a", ["p", 0, -1, 2**64]), BOTH),  # beyond 64 bits
        (forge("a", {"p": "a"}), BOTH),
        (forge("a", []), BOTH),
        (forge("a", [["p"], 0, -1, 3]), BOTH),
        (forge("a", b"\xff\xfe not json"), BOTH),
        (base64.urlsafe_b64encode(b"\xff\xfe not json").decode(), BOTH),
        (forge("a", ["p", 0, -1, 3])[:-3], BOTH),  # truncated
        (forge("a", ["p", 0, -1, 3]) + "A" * 200, BOTH),  # too long
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
            params = {"from": 0, "to": 1000, "cursor": forge("a", ["t", t, b, r])}
            page = client.get(f"{server.url}/v1/tasks/a/results", params=params)
            assert page.status_code in (200, 400), page.text
            if page.status_code == 200:
                assert {(row["batch_id"], row["row"]) for row in page.json()["rows"]} <= known
            else:
                assert page.json()["detail"].startswith("cursor: ")


def test_a_resume_cursor_past_every_committed_batch_is_400_not_503(server: Server) -> None:
    with httpx.Client(timeout=30, headers=AUTH) as client:
        status, body = stream_status(client, server, forge("a", ["p", 0, -1, BATCHES + 100]))
        assert status == 400 and f"batch {BATCHES + 100} of task 'a' was never committed" in body, body
        status, _ = stream_status(client, server, forge("a", ["p", 0, -1, BATCHES - 1]))
        assert status == 200


# -- cursors the service returned, then tampered with: 400 whatever they name ----------------------------------


def first_event_id(client: httpx.Client, server: Server, params: dict[str, Any]) -> str:
    """The id (cursor) of a stream's first event."""
    with client.stream("GET", f"{server.url}/v1/tasks/a/stream", params=params) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("id: "):
                return line.removeprefix("id: ")
    raise AssertionError("no event")


def unsigned(token: str) -> str:
    """The cursor's JSON alone, re-encoded without its MAC (as cursors were before they were signed)."""
    return b64(unb64(token)[:-16])


def old_format(token: str, task: str = "a") -> str:
    """The cursor as cursors were before they were signed: base64 of [kind, task, *ints]."""
    kind, *ints = json.loads(unb64(token)[:-16])
    return b64(compact([kind, task, *ints]).encode())


def flip_mac_bit(token: str) -> str:
    raw = bytearray(unb64(token))
    raw[-1] ^= 1
    return b64(bytes(raw))


def next_batch(parts: list[Any]) -> list[Any]:
    """The position one batch on (the batch is the one-time cursor's second integer, the feed cursor's first)."""
    at = 2 if parts[0] == "t" else 1
    return [*parts[:at], parts[at] + 1, *parts[at + 1 :]]


def other_kind(parts: list[Any]) -> list[Any]:
    """The same position as another kind of cursor: a feed cursor as a resume cursor and back, a one-time query's
    position (result_time, batch_id, row) as a feed cursor's."""
    kind, *ints = parts
    if kind == "f":
        return ["p", *ints, BATCHES - 1]
    return ["f", *(ints[:2] if kind == "p" else ints[1:])]


TAMPERINGS: dict[str, Callable[[str], str]] = {
    "changed batch": lambda token: retouch(token, next_batch),
    "changed row or bound": lambda token: retouch(token, lambda p: [*p[:-1], p[-1] + 1]),
    "changed kind": lambda token: retouch(token, other_kind),
    "re-encoded without MAC": unsigned,
    "the unsigned format": old_format,
    "a MAC bit flipped": flip_mac_bit,
    "MAC cut short": lambda token: b64(unb64(token)[:-1]),
    "MAC of another key": lambda token: forge("a", json.loads(unb64(token)[:-16]), OTHER_KEY),
}


@pytest.mark.parametrize("how", sorted(TAMPERINGS))
def test_a_tampered_cursor_is_400_for_one_time_and_continuous_queries(server: Server, how: str) -> None:
    tamper = TAMPERINGS[how]
    results = f"{server.url}/v1/tasks/a/results"
    with httpx.Client(timeout=30, headers=AUTH) as client:
        page = client.get(results, params={"from": 0, "to": 1000, "limit": 3}).json()
        one_time = page["next_cursor"]
        feed = first_event_id(client, server, {"from": 0})  # a feed cursor, as the service returned it
        resume = forge("a", ["p", 0, 2, BATCHES - 1])  # what a 410 returns: the proxy's own key
        for cursor in (one_time, tamper(one_time)):
            answer = client.get(results, params={"from": 0, "to": 1000, "limit": 3, "cursor": cursor})
            if cursor == one_time:
                assert answer.status_code == 200 and answer.json()["rows"], answer.text
            else:
                assert answer.status_code == 400, (how, answer.text)
                assert answer.json()["detail"].startswith("cursor: not a cursor of a one-time query of task 'a'")
        for cursor in (feed, resume):
            assert stream_status(client, server, cursor)[0] == 200
            status, body = stream_status(client, server, tamper(cursor))
            assert status == 400 and body.startswith('{"detail":"cursor: not a cursor of a continuous query'), (
                how,
                status,
                body,
            )


def test_a_cursor_of_one_task_is_400_on_another(server: Server) -> None:
    with httpx.Client(timeout=30, headers=AUTH) as client:
        page = client.get(f"{server.url}/v1/tasks/a/results", params={"from": 0, "to": 1000, "limit": 3}).json()
        answer = client.get(
            f"{server.url}/v1/tasks/b/results", params={"from": 0, "to": 1000, "cursor": page["next_cursor"]}
        )
        assert answer.status_code == 400 and "task 'b'" in answer.json()["detail"], answer.text
        feed = first_event_id(client, server, {"from": 0})
        status, body = stream_status(client, server, feed, task="b")
        assert status == 400 and "task 'b'" in body, body
