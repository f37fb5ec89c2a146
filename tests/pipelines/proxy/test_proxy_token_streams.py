"""Tokens and cursor keys while streams are open, through a real uvicorn server (issue 47): a quiet stream (no new
results) ends within about two seconds when its token is revoked, rotated (same name, another digest), expires, or
the tokens file is deleted (which revokes every token, logged); a cursor signed with the previous cursor key is a
410 carrying the same position signed with the current key, so a client resumes where it was."""

from __future__ import annotations

import logging
import time
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
    TOKENS_FILE,
    Results,
    Server,
    make_spec,
    new_namespace,
)
from windjoin.connectors.results.result_query import ResultStore
from windjoin.pipelines.cli.query import sse_events
from windjoin.pipelines.proxy.app import create_app
from windjoin.pipelines.proxy.config import Access
from windjoin.pipelines.proxy.cursor_key import cursor_codec
from windjoin.pipelines.proxy.feed import FeedConfig
from windjoin.pipelines.proxy.token_file import TokenFile
from windjoin.pipelines.proxy.tokens import token_hash

WITHDRAWN = "token revoked or expired"


def write(path: Path, entries: list[dict[str, Any]]) -> None:
    path.write_text(yaml.safe_dump({"tokens": entries}))


@pytest.mark.parametrize("how", ["revoked", "rotated", "expired", "deleted"])
def test_a_quiet_stream_ends_soon_after_its_token_stops_admitting_it(
    redis_url: str, tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    live = Results(make_spec(redis_url, None), new_namespace(), redis_url, None)
    tester, reader = TOKENS_FILE["tokens"]
    expires, expires_s = datetime.now(UTC) + timedelta(seconds=3), time.monotonic() + 3
    tokens = tmp_path / "tokens.yaml"
    write(tokens, [tester, {**reader, "expires": expires.isoformat()} if how == "expired" else reader])
    access = Access(TokenFile(tokens, TASKS, check_s=0), GENEROUS)
    with (
        caplog.at_level(logging.INFO, logger="windjoin.proxy"),
        Server(create_app(live.store(), FeedConfig(block_ms=200), access=access)) as server,
        httpx.Client(timeout=httpx.Timeout(10, read=10)) as client,
        client.stream("GET", f"{server.url}/v1/tasks/b/stream", headers=B_AUTH) as response,
    ):
        assert response.status_code == 200
        events = sse_events(response.iter_lines())
        kind, cursor, _ = next(events)
        assert kind == "ready"
        if how == "revoked":
            write(tokens, [tester])
        elif how == "rotated":
            write(tokens, [tester, {**reader, "sha256": token_hash("wj-the-reader-s-new-token")}])
        elif how == "deleted":
            tokens.unlink()
        changed = time.monotonic() if how != "expired" else expires_s
        kind, _, data = next(events)  # no results come: the stream ends on its own
        took = time.monotonic() - changed
        assert kind == "end" and orjson.loads(data) == {"error": WITHDRAWN, "cursor": cursor}
        assert took < 5.0, took  # ~1 s (the token file is read every second); without the check it never ended
        if how == "deleted":
            assert httpx.get(f"{server.url}/v1/tasks", headers=AUTH).status_code == 401  # every token
            assert f"tokens file {tokens} is gone: every token is revoked" in caplog.text
    print(f"{how}: the stream ended {took:.2f} s after")


def test_a_cursor_of_the_previous_key_is_410_with_the_same_cursor_signed_anew(redis_url: str, tmp_path: Path) -> None:
    results = Results(make_spec(redis_url, None), new_namespace(), redis_url, None)
    results.write(20, t0=0)
    results.write(20, t0=100)
    old, new, other = (tmp_path / name for name in ("old.key", "new.key", "other.key"))
    for i, path in enumerate((old, new, other)):
        path.write_text(f"{i}" * 64)
    before = ResultStore(results.spec, redis_url, results.namespace, None, cursors=cursor_codec(old))
    page_cursor = before.one_time("a", 0, 1000, limit=7).next_cursor
    _, feed_cursor = before.follow("a", from_ms=0, count=5)
    rotated = ResultStore(results.spec, redis_url, results.namespace, None, cursors=cursor_codec(new, (old,)))
    with Server(create_app(rotated, access=Access(None, GENEROUS))) as server, httpx.Client(timeout=30) as client:
        url = f"{server.url}/v1/tasks/a"
        gone = client.get(f"{url}/results", params={"from": 0, "to": 1000, "limit": 7, "cursor": page_cursor})
        assert gone.status_code == 410 and "previous cursor key" in gone.json()["detail"], gone.text
        page = client.get(f"{url}/results", params={"from": 0, "to": 1000, "limit": 7, "cursor": gone.json()["cursor"]})
        assert page.status_code == 200 and page.json()["rows"] == results.oracle("a", 0, 1000)[7:14]
        stream = client.get(f"{url}/stream", params={"cursor": feed_cursor})
        assert stream.status_code == 410 and "previous cursor key" in stream.json()["detail"], stream.text
        with client.stream("GET", f"{url}/stream", params={"cursor": stream.json()["cursor"]}) as response:
            events = (e for e in sse_events(response.iter_lines()) if e[0] != "ready")
            kind, _, data = next(events)
            assert kind == "results" and orjson.loads(data) == results.since("a", 0)[5:]
        stranger = ResultStore(results.spec, redis_url, results.namespace, None, cursors=cursor_codec(other))
        unknown = stranger.one_time("a", 0, 1000, limit=7).next_cursor
        refused = client.get(f"{url}/results", params={"from": 0, "to": 1000, "cursor": unknown})
        assert refused.status_code == 400 and refused.json()["detail"].startswith("cursor: "), refused.text
