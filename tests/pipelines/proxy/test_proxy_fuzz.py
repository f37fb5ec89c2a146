"""Fuzzing the query proxy from its own OpenAPI description (schemathesis), authenticated with a token that may read
every task: no input gives a 500, and every answer matches the documented responses. The store is real: Redis and
Parquet tiers holding results of both tasks.

The stream endpoint (a valid request opens a stream that does not end) is fuzzed through uvicorn, reading only
the status of each answer.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from tests.pipelines.proxy_helpers import AUTH, Results, Server, access, make_spec, new_namespace
from windjoin.pipelines.proxy.app import create_app


@pytest.fixture(scope="module")
def api_schema(redis_url: str, tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("fuzz") / "parquet"
    results = Results(make_spec(redis_url, path), new_namespace(), redis_url, path)
    for b in range(6):
        results.write(10, t0=100 * b)
        if b == 3:
            results.snapshot("a", cutoff_ms=300)
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(results.store(), access=access()))


def authenticated(case: Any, headers: dict[str, str] | None, mode: GenerationMode) -> dict[str, str]:
    """The case's headers with the token that reads every task, so that the fuzzing reaches the queries: for valid
    input, and for invalid input in the path or query. Invalid headers only (which includes a missing or malformed
    Authorization) go as generated: the proxy must refuse them (401)."""
    headers = {k: v for k, v in (headers or {}).items()}
    components = case.meta.components if case.meta is not None else {}
    elsewhere = any(info.mode.is_negative for loc, info in components.items() if loc.name != "HEADER")
    if mode is GenerationMode.POSITIVE or elsewhere:
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"} | AUTH
    return headers


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_gives_a_server_error(api_schema, mode: GenerationMode) -> None:
    schema = api_schema.exclude(path="/v1/tasks/{task}/stream")
    statuses: Counter[int] = Counter()

    @given(case=schema.as_strategy(mode), task=st.sampled_from(["a", "b", None]))
    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case, task: str | None) -> None:
        if task and mode is GenerationMode.POSITIVE and "task" in (case.path_parameters or {}):
            case.path_parameters["task"] = task  # most cases on the spec's tasks, so that queries reach the store
        case.headers = authenticated(case, case.headers, mode)
        response = case.call_and_validate(
            checks=[not_a_server_error, status_code_conformance, response_schema_conformance]
        )
        statuses[response.status_code] += 1

    check()
    # Valid-looking input reached the store (answers) and the query parser (400s); invalid input was refused.
    refused = sum(n for status, n in statuses.items() if 400 <= status < 500)
    if mode is GenerationMode.POSITIVE:
        assert statuses[200] > 0 and statuses[400] > 0, statuses
    else:
        assert refused == statuses.total(), statuses


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_stream_request_gives_a_server_error(api_schema, mode: GenerationMode) -> None:
    """The stream endpoint through uvicorn: only the status is read, then the connection is closed."""
    operation = api_schema["/v1/tasks/{task}/stream"]["GET"]
    statuses: Counter[int] = Counter()
    with Server(api_schema.app) as server, httpx.Client(timeout=30) as client:

        @given(case=operation.as_strategy(mode), task=st.sampled_from(["a", "b", None]))
        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case, task: str | None) -> None:
            if task and mode is GenerationMode.POSITIVE:
                case.path_parameters["task"] = task
            sent = case.as_transport_kwargs(base_url=server.url)
            headers = {k: v for k, v in (sent.get("headers") or {}).items() if k.lower() != "accept-encoding"}
            headers = authenticated(case, headers, mode)
            try:
                request = client.build_request("GET", sent["url"], params=sent.get("params"), headers=headers)
                response = client.send(request, stream=True)
            except (UnicodeEncodeError, httpx.InvalidURL, httpx.LocalProtocolError):
                return  # the client refuses to send it (not valid HTTP/1.1): nothing reaches the proxy
            response.close()
            assert response.status_code < 500, (case.as_curl_command(base_url=server.url), response.status_code)
            statuses[response.status_code] += 1

        check()
        # Every stream that was opened and dropped was let go (no subscriber leaks).
        deadline = time.monotonic() + 20
        while "windjoin_proxy_subscribers 0.0" not in client.get(f"{server.url}/metrics", headers=AUTH).text:
            assert time.monotonic() < deadline, "streams still registered after their clients left"
            time.sleep(0.1)
    if mode is GenerationMode.POSITIVE:
        assert statuses[200] > 0 and statuses[400] > 0, statuses
    else:
        assert statuses[200] < statuses.total(), statuses
