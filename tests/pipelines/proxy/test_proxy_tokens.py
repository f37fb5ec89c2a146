"""The tokens file while the proxy runs, through a real uvicorn server: a revoked token is refused and an added one
accepted without a restart, an expired token gets 401 saying so, a rewrite that does not parse keeps the last good
tokens (counted in /metrics); and the `expires` key's accepted and refused values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from tests.pipelines.proxy_helpers import (
    AUTH,
    B_AUTH,
    GENEROUS,
    TASKS,
    TOKEN,
    TOKENS_FILE,
    Results,
    Server,
    make_spec,
    new_namespace,
)
from windjoin.pipelines.cli.query import sse_events
from windjoin.pipelines.proxy.app import create_app
from windjoin.pipelines.proxy.config import Access
from windjoin.pipelines.proxy.feed import FeedConfig
from windjoin.pipelines.proxy.token_file import TokenFile
from windjoin.pipelines.proxy.tokens import TokenTable, token_hash

NEW_TOKEN = "wj-test-token-added-later"
NEW_AUTH = {"Authorization": f"Bearer {NEW_TOKEN}"}


@pytest.fixture(scope="module")
def tiers(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Results:
    path = tmp_path_factory.mktemp("tokens") / "parquet"
    results = Results(make_spec(redis_url, path), new_namespace(), redis_url, path)
    results.write(10, t0=0)
    return results


def write(path: Path, entries: list[dict[str, Any]]) -> None:
    path.write_text(yaml.safe_dump({"tokens": entries}))


def status(server: Server, headers: dict[str, str]) -> httpx.Response:
    return httpx.get(f"{server.url}/v1/tasks", headers=headers, timeout=30)


def test_revoked_and_added_tokens_take_effect_without_a_restart(tiers: Results, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    write(tokens, TOKENS_FILE["tokens"])
    with Server(create_app(tiers.store(), access=Access(TokenFile(tokens, TASKS, check_s=0), GENEROUS))) as server:
        assert status(server, AUTH).status_code == status(server, B_AUTH).status_code == 200
        assert status(server, NEW_AUTH).status_code == 401
        write(tokens, TOKENS_FILE["tokens"][:1])  # b-reader revoked
        refused = status(server, B_AUTH)
        assert refused.status_code == 401 and "valid bearer token" in refused.json()["detail"]
        assert status(server, AUTH).status_code == 200
        write(tokens, [*TOKENS_FILE["tokens"][:1], {"name": "new", "sha256": token_hash(NEW_TOKEN), "tasks": ["b"]}])
        assert status(server, NEW_AUTH).json() == {"tasks": ["b"]}
        metrics = httpx.get(f"{server.url}/metrics", headers=AUTH).text
        assert 'windjoin_proxy_token_reloads_total{outcome="reloaded"} 2.0' in metrics


def test_an_open_stream_ends_when_its_token_is_revoked(redis_url: str, tmp_path: Path) -> None:
    """Revocation reaches streams opened before it: the next results are not sent, the stream ends saying why,
    with the cursor of the last results the client got."""
    live = Results(make_spec(redis_url, tmp_path / "parquet"), new_namespace(), redis_url, tmp_path / "parquet")
    tokens = tmp_path / "tokens.yaml"
    write(tokens, TOKENS_FILE["tokens"])
    access = Access(TokenFile(tokens, TASKS, check_s=0), GENEROUS)
    with (
        Server(create_app(live.store(), FeedConfig(block_ms=200), access=access)) as server,
        httpx.Client(timeout=httpx.Timeout(30, read=60)) as client,
        client.stream("GET", f"{server.url}/v1/tasks/b/stream", headers=B_AUTH) as response,
    ):
        assert response.status_code == 200
        events = sse_events(response.iter_lines())
        assert next(events)[0] == "ready"  # subscribed: what is committed from now on reaches it
        live.write(5, t0=0)
        event, cursor, data = next(events)
        assert event == "results" and orjson.loads(data) == live.since("b", 0)
        write(tokens, TOKENS_FILE["tokens"][:1])  # b-reader revoked
        live.write(5, t0=100)
        event, _, data = next(events)
        assert event == "end" and orjson.loads(data) == {"error": "token revoked or expired", "cursor": cursor}
        metrics = httpx.get(f"{server.url}/metrics", headers=AUTH).text
        assert 'windjoin_proxy_refused_total{reason="withdrawn"} 1.0' in metrics


def test_a_broken_rewrite_keeps_the_last_good_tokens(tiers: Results, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    write(tokens, TOKENS_FILE["tokens"])
    with Server(create_app(tiers.store(), access=Access(TokenFile(tokens, TASKS, check_s=0), GENEROUS))) as server:
        for broken in ("tokens: [unclosed", "tokens: []", "{}", ""):
            tokens.write_text(broken)
            assert status(server, AUTH).status_code == 200, broken  # neither open nor closed: the last good table
            assert status(server, B_AUTH).status_code == 200, broken
            assert status(server, {}).status_code == 401, broken
        metrics = httpx.get(f"{server.url}/metrics", headers=AUTH).text
        assert 'windjoin_proxy_token_reloads_total{outcome="failed"} 4.0' in metrics  # a deleted file revokes all
        write(tokens, TOKENS_FILE["tokens"][1:])  # a good file again: it is served
        assert status(server, AUTH).status_code == 401 and status(server, B_AUTH).status_code == 200


def test_the_file_is_looked_at_no_more_often_than_check_s(tmp_path: Path) -> None:
    tokens, now = tmp_path / "tokens.yaml", [0.0]
    write(tokens, TOKENS_FILE["tokens"])
    followed = TokenFile(tokens, TASKS, check_s=5, clock=lambda: now[0])
    write(tokens, TOKENS_FILE["tokens"][1:])
    now[0] = 4.9
    assert followed.refresh() is None and followed.client(TOKEN) is not None
    now[0] = 5.0
    assert followed.refresh() == "reloaded" and followed.client(TOKEN) is None
    now[0] = 20.0
    assert followed.refresh() is None  # unchanged: not read again


def test_an_expired_token_gets_401_saying_so(tiers: Results, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    past = datetime.now(UTC) - timedelta(minutes=1)
    tester, reader = TOKENS_FILE["tokens"]
    tokens.write_text(
        yaml.safe_dump(
            {
                "tokens": [
                    {**tester, "expires": (datetime.now(UTC) + timedelta(days=1)).isoformat()},
                    {**reader, "expires": past.strftime("%Y-%m-%dT%H:%M:%SZ")},
                ]
            }
        )
    )
    with Server(create_app(tiers.store(), access=Access(TokenFile(tokens, TASKS), GENEROUS))) as server:
        assert status(server, AUTH).status_code == 200
        expired = status(server, B_AUTH)
        assert expired.status_code == 401 and expired.headers["WWW-Authenticate"] == "Bearer"
        assert expired.json()["detail"] == (
            f"Authorization: this bearer token expired at {past:%Y-%m-%dT%H:%M:%SZ}; ask for a new one"
        )
        metrics = httpx.get(f"{server.url}/metrics", headers=AUTH).text
        assert 'windjoin_proxy_refused_total{reason="expired"} 1.0' in metrics


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2027-01-31T00:00:00Z", datetime(2027, 1, 31, tzinfo=UTC)),  # YAML's own timestamp
        ("'2027-01-31T02:00:00+02:00'", datetime(2027, 1, 31, tzinfo=UTC)),  # a string, another zone
    ],
)
def test_expires_accepts_a_date_and_time_with_a_zone(text: str, expected: datetime) -> None:
    data = yaml.safe_load(f"tokens: [{{name: x, sha256: '{token_hash(TOKEN)}', tasks: '*', expires: {text}}}]")
    client = TokenTable.from_data(data, TASKS).client(TOKEN)
    assert client is not None and client.expires == expected
    assert not client.expired(expected - timedelta(microseconds=1)) and client.expired(expected)


@pytest.mark.parametrize("text", ["2027-01-31", "2027-01-31T00:00:00", "'tomorrow'", "1700000000", "null"])
def test_expires_refuses_anything_else_naming_the_key(text: str) -> None:
    data = yaml.safe_load(f"tokens: [{{name: x, sha256: '{'ab' * 32}', tasks: '*', expires: {text}}}]")
    with pytest.raises(ValueError, match=r"tokens\[0\]\.expires: .* \(accepted: an ISO-8601 date and time with a"):
        TokenTable.from_data(data, TASKS)
