"""Who gets in, through a real uvicorn server over real HTTP(S): bearer tokens (401), task scopes (403), per-token
request and stream limits (429 with Retry-After), the /metrics and docs switches, TLS with a test certificate, and
`windjoin proxy` refusing to start without a tokens file."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from click.testing import CliRunner

from tests.pipelines.proxy_helpers import (
    AUTH,
    B_AUTH,
    B_TOKEN,
    TOKEN,
    TOKENS_FILE,
    Results,
    Server,
    access,
    make_spec,
    new_namespace,
)
from windjoin.connectors.local import processes
from windjoin.connectors.local.processes import free_port
from windjoin.pipelines.cli.main import cli
from windjoin.pipelines.proxy.app import create_app
from windjoin.pipelines.proxy.config import Bounds, Limits

BAD = {"Authorization": "Bearer not-a-known-token"}


@pytest.fixture(scope="module")
def tiers(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Results:
    path = tmp_path_factory.mktemp("access") / "parquet"
    results = Results(make_spec(redis_url, path), new_namespace(), redis_url, path)
    for b in range(4):
        results.write(10, t0=100 * b)
    results.snapshot("a", cutoff_ms=None)
    results.snapshot("b", cutoff_ms=None)
    return results


@pytest.fixture(scope="module")
def server(tiers: Results) -> Any:
    with Server(create_app(tiers.store(), access=access())) as server:
        yield server


def get(server: Server, path: str, headers: dict[str, str] | None = None, **params: Any) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", params=params, headers=headers or {}, timeout=30)


@pytest.mark.parametrize(
    "path",
    ["/v1/tasks", "/v1/tasks/a/results?from=0&to=500", "/v1/tasks/a/stream", "/v1/tasks/a/fields", "/metrics"],
)
@pytest.mark.parametrize("headers", [None, BAD, {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer"}])
def test_no_or_a_bad_token_is_401(server: Server, path: str, headers: dict[str, str] | None) -> None:
    response = get(server, path, headers)
    assert response.status_code == 401, response.text
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert "bearer token" in response.json()["detail"]


@pytest.mark.parametrize(
    "path", ["/v1/tasks/a/results?from=0&to=500", "/v1/tasks/a/stream", "/v1/tasks/a/fields", "/v1/tasks/a/snapshots"]
)
def test_a_token_outside_its_tasks_is_403(server: Server, path: str) -> None:
    response = get(server, path, B_AUTH)
    assert response.status_code == 403, response.text
    assert "may not read task 'a'" in response.json()["detail"]


def test_a_good_token_reads_its_tasks(server: Server, tiers: Results) -> None:
    answer = get(server, "/v1/tasks/b/results", B_AUTH, **{"from": 0, "to": 500})
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == tiers.oracle("b", 0, 500)
    assert get(server, "/v1/tasks", B_AUTH).json() == {"tasks": ["b"]}  # only what it may read
    assert get(server, "/v1/tasks", AUTH).json() == {"tasks": ["a", "b"]}
    assert get(server, "/v1/tasks/a/results", AUTH, **{"from": 0, "to": 500}).json()["rows"] == tiers.oracle(
        "a", 0, 500
    )
    with (
        httpx.Client(timeout=30) as client,
        client.stream("GET", f"{server.url}/v1/tasks/b/stream", headers=B_AUTH) as stream,
    ):
        assert stream.status_code == 200
    assert get(server, "/healthz").status_code == 200  # probes need no token
    assert get(server, "/readyz").status_code == 200
    metrics = get(server, "/metrics", AUTH).text
    assert 'windjoin_proxy_refused_total{reason="scope"}' in metrics


def test_a_token_over_its_request_rate_gets_429_with_retry_after(tiers: Results) -> None:
    app = create_app(tiers.store(), access=access(Limits(rate=0.5, burst=3, streams=1)))
    with Server(app) as server:
        statuses = [get(server, "/v1/tasks/b/fields", B_AUTH).status_code for _ in range(3)]
        refused = get(server, "/v1/tasks/b/fields", B_AUTH)
        assert statuses == [200, 200, 200] and refused.status_code == 429, refused.text
        assert int(refused.headers["Retry-After"]) in (1, 2)
        assert "per second" in refused.json()["detail"]
        assert get(server, "/v1/tasks/a/fields", AUTH).status_code == 200  # the other token has its own bucket
        time.sleep(2.1)  # a token every 2 s
        assert get(server, "/v1/tasks/b/fields", B_AUTH).status_code == 200


def test_a_token_holding_its_streams_gets_429_until_one_closes(tiers: Results) -> None:
    app = create_app(tiers.store(), access=access(Limits(rate=1000, burst=1000, streams=2)))
    with Server(app) as server, httpx.Client(timeout=httpx.Timeout(30, read=60)) as client:
        url = f"{server.url}/v1/tasks/b/stream"
        first = client.send(client.build_request("GET", url, headers=B_AUTH), stream=True)
        second = client.send(client.build_request("GET", url, headers=B_AUTH), stream=True)
        assert first.status_code == second.status_code == 200
        third = get(server, "/v1/tasks/b/stream", B_AUTH)
        assert third.status_code == 429 and third.headers["Retry-After"] == "5", third.text
        assert "at most 2 continuous queries" in third.json()["detail"]
        with client.stream("GET", f"{server.url}/v1/tasks/a/stream", headers=AUTH) as other:
            assert other.status_code == 200  # another token's slots
        first.close()
        deadline = time.monotonic() + 20
        while True:  # the slot is freed once the server sees the client gone
            with client.stream("GET", url, headers=B_AUTH) as again:
                if again.status_code == 200:
                    break
            assert time.monotonic() < deadline, "a closed stream kept its slot"
            time.sleep(0.2)
        second.close()


def test_metrics_and_docs_switches(tiers: Results) -> None:
    with Server(create_app(tiers.store(), access=access(metrics="open", docs=False))) as server:
        assert get(server, "/metrics").status_code == 200
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert get(server, path, AUTH).status_code == 404
    with Server(create_app(tiers.store(), access=access(metrics="off"))) as server:
        assert get(server, "/metrics", AUTH).status_code == 404
        assert get(server, "/openapi.json").status_code == 200
        assert get(server, "/docs").status_code == 200


def test_a_proxy_bound_answers_400_naming_the_parameter(tiers: Results) -> None:
    with Server(create_app(tiers.store(), access=access(), bounds=Bounds(max_span_ms=1000, max_limit=50))) as server:
        wide = get(server, "/v1/tasks/a/results", AUTH, **{"from": 0, "to": 1001})
        assert wide.status_code == 400 and wide.json()["detail"].startswith("to: ") and "1000 ms" in wide.text
        big = get(server, "/v1/tasks/a/results", AUTH, **{"from": 0, "to": 1000, "limit": 51})
        assert big.status_code == 400 and big.json()["detail"].startswith("limit: ") and "50 rows" in big.text
        assert get(server, "/v1/tasks/a/results", AUTH, **{"from": 0, "to": 1000, "limit": 50}).status_code == 200


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (openssl CLI)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


def test_tls_handshake_and_the_query_client_over_https(
    tiers: Results, certificate: tuple[str, str], tmp_path: Path
) -> None:
    cert, _ = certificate
    with Server(create_app(tiers.store(), access=access()), tls=certificate) as server:
        assert server.url.startswith("https://")
        with httpx.Client(verify=ssl.create_default_context(cafile=cert)) as client:
            response = client.get(f"{server.url}/v1/tasks/b/results", params={"from": 0, "to": 500}, headers=B_AUTH)
            assert response.status_code == 200 and response.json()["rows"] == tiers.oracle("b", 0, 500)
            assert client.get(f"{server.url}/v1/tasks").status_code == 401  # TLS does not replace the token
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the certificate gets nothing
            httpx.get(f"{server.url}/healthz")
        with pytest.raises(httpx.HTTPError):  # nor does plain HTTP
            httpx.get(f"http://127.0.0.1:{server.port}/healthz")
        token_file = tmp_path / "token"
        token_file.write_text(B_TOKEN + "\n")
        result = CliRunner().invoke(
            cli,
            ["query", "results", server.url, "b", "--from", "0", "--to", "500", "--json", "--token-file", token_file],
            env={"WINDJOIN_CA_FILE": cert},
        )
        assert result.exit_code == 0, result.output
        assert len(result.stdout.splitlines()) == len(tiers.oracle("b", 0, 500))
        denied = CliRunner().invoke(
            cli,
            ["query", "results", server.url, "a", "--from", "0", "--to", "5", "--token-file", token_file],
            env={"WINDJOIN_CA_FILE": cert},
        )
        assert denied.exit_code == 1 and "403" in denied.output and "may not read task 'a'" in denied.output


def _spec_file(tiers: Results, tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(tiers.spec.model_dump(mode="json", exclude_none=True)))
    return path


def test_windjoin_proxy_refuses_to_start_without_tokens(tiers: Results, tmp_path: Path) -> None:
    spec = _spec_file(tiers, tmp_path)
    result = CliRunner().invoke(cli, ["proxy", str(spec)], env={"WINDJOIN_PROXY_TOKENS_FILE": ""})
    assert result.exit_code == 2 and "--insecure-no-auth" in result.output
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(yaml.safe_dump({"tokens": [{"name": "x", "sha256": "ab" * 32, "tasks": ["a", "nope"]}]}))
    result = CliRunner().invoke(cli, ["proxy", str(spec), "--tokens-file", str(tokens)])
    assert result.exit_code == 1 and "tokens[0].tasks: ['nope'] not among the spec's tasks" in result.output
    result = CliRunner().invoke(cli, ["proxy", str(spec), "--tokens-file", str(tokens), "--tls-cert-file", spec])
    assert result.exit_code == 2 and "go together" in result.output


def test_tokens_file_from_the_environment_serves(tiers: Results, tmp_path: Path) -> None:
    """`windjoin proxy` in its own process, tokens from WINDJOIN_PROXY_TOKENS_FILE (as the chart mounts them)."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(yaml.safe_dump(TOKENS_FILE))
    port = free_port()
    argv = [sys.executable, "-m", "windjoin.pipelines", "proxy", str(_spec_file(tiers, tmp_path)), "--port", str(port)]
    env = {**os.environ, "WINDJOIN_PROXY_TOKENS_FILE": str(tokens)}
    log = tmp_path / "proxy.log"
    pid = processes.spawn([*argv, "--namespace", tiers.namespace], log, env=env)
    try:
        deadline = time.monotonic() + 60
        while not processes.port_open("127.0.0.1", port):
            assert processes.is_alive(pid) and time.monotonic() < deadline, processes.log_tail(log)
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/v1/tasks/b/results?from=0&to=500"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers=B_AUTH).json()["rows"] == tiers.oracle("b", 0, 500)
    finally:
        processes.stop(pid)


def test_the_query_client_waits_out_a_429(tiers: Results) -> None:
    """Paging faster than the token's rate: the client sleeps for Retry-After and gets every row, once, in order."""
    app = create_app(tiers.store(), access=access(Limits(rate=2, burst=1, streams=1)))
    with Server(app) as server:
        result = CliRunner().invoke(
            cli,
            ["query", "results", server.url, "b", "--from", "0", "--to", "500", "--json", "--page-size", "10"],
            env={"WINDJOIN_TOKEN": B_TOKEN},
        )
    assert result.exit_code == 0, result.output
    assert "429" in result.stderr
    assert [orjson.loads(line) for line in result.stdout.splitlines()] == tiers.oracle("b", 0, 500)
