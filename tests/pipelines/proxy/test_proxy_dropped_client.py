"""A stream client that goes away without closing (it stops reading: a laptop shut, a network gone), through a real
uvicorn server (issue 47): once the proxy's writes to it wait past the send timeout, its stream ends with one log
line naming it, not an "Exception in ASGI application" traceback, and its stream slot is free again."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from tests.pipelines.proxy_helpers import AUTH, Results, Server, access, make_spec, new_namespace
from windjoin.pipelines.proxy.app import create_app
from windjoin.pipelines.proxy.feed import FeedConfig


def test_a_client_that_stops_reading_is_one_log_line(
    redis_url: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    results = Results(make_spec(redis_url, None), new_namespace(), redis_url, None)
    app = create_app(results.store(), FeedConfig(block_ms=200), send_timeout_s=1.0, access=access())
    with caplog.at_level(logging.INFO), Server(app) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        head = f"GET /v1/tasks/a/stream HTTP/1.1\r\nHost: proxy\r\nAuthorization: {AUTH['Authorization']}\r\n\r\n"
        sock.sendall(head.encode())
        assert b"200 OK" in sock.recv(4096)  # then it reads nothing more
        deadline = time.monotonic() + 60
        while "went away" not in caplog.text and time.monotonic() < deadline:
            results.write(20, t0=0, z_size=100_000)  # 2 MB a batch: the socket's buffers fill
            time.sleep(0.3)
        sock.close()
        time.sleep(0.5)
    uvicorn_log = capfd.readouterr().err  # uvicorn's own loggers write there, not to caplog
    assert "Exception in ASGI application" not in uvicorn_log and "Traceback" not in uvicorn_log, uvicorn_log[-3000:]
    assert "Traceback" not in caplog.text, caplog.text[-3000:]
    gone = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(gone) == 1 and "/v1/tasks/a/stream" in gone[0].getMessage(), caplog.text[-3000:]
