"""Rate limits against a forged X-Forwarded-For, through `windjoin proxy` in its own process (its uvicorn settings
are what is tested): requests of one token share one bucket whatever address they claim; without authentication
a client on loopback cannot pick a fresh bucket per request; a forwarded address counts only from a configured
trusted proxy, and then the rightmost hop it did not add."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner

from tests.pipelines.proxy_helpers import B_AUTH, TOKENS_FILE, ProxyProcess, make_spec
from windjoin.pipelines.cli.main import cli

SLOW = ["--rate-limit", "0.01", "--rate-burst", "3"]  # 3 requests, then 429 for the rest of the test


def statuses(proxy: ProxyProcess, forwarded: list[str], headers: dict[str, str] | None = None) -> list[int]:
    """The status of one /v1/tasks request per X-Forwarded-For value, in order."""
    with httpx.Client(timeout=30) as client:
        return [
            client.get(f"{proxy.url}/v1/tasks", headers={**(headers or {}), "X-Forwarded-For": value}).status_code
            for value in forwarded
        ]


@pytest.fixture(scope="module")
def parquet_path(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("forwarded") / "parquet"


def test_forged_addresses_of_one_token_share_its_bucket(redis_url: str, parquet_path: Path, tmp_path: Path) -> None:
    with ProxyProcess(make_spec(redis_url, parquet_path), tmp_path, SLOW) as proxy:
        forged = [f"203.0.113.{i}" for i in range(6)]
        assert statuses(proxy, forged, B_AUTH) == [200, 200, 200, 429, 429, 429]


def test_without_auth_a_forged_header_from_loopback_is_not_believed(
    redis_url: str, parquet_path: Path, tmp_path: Path
) -> None:
    """uvicorn's default believes X-Forwarded-For from 127.0.0.1; the proxy trusts no one unless told."""
    with ProxyProcess(make_spec(redis_url, parquet_path), tmp_path, SLOW, auth=False) as proxy:
        forged = [f"203.0.113.{i}" for i in range(6)]
        assert statuses(proxy, forged) == [200, 200, 200, 429, 429, 429]


def test_a_trusted_proxy_forwards_the_rightmost_untrusted_hop(
    redis_url: str, parquet_path: Path, tmp_path: Path
) -> None:
    args = [*SLOW, "--forwarded-allow-ips", "127.0.0.1, 10.9.0.0/16"]
    with ProxyProcess(make_spec(redis_url, parquet_path), tmp_path, args, auth=False) as proxy:
        # the client wrote the leftmost values; the trusted proxies appended 198.51.100.7, then 10.9.0.1
        forged = [f"203.0.113.{i}, 198.51.100.7, 10.9.0.1" for i in range(4)]
        assert statuses(proxy, forged) == [200, 200, 200, 429]  # one client: 198.51.100.7
        assert statuses(proxy, ["198.51.100.8"]) == [200]  # another client, its own bucket


@pytest.mark.parametrize("value", ["nope", "127.0.0.1,10.0.0.0/33", "*"])
def test_a_bad_trusted_proxy_list_names_the_option(
    redis_url: str, parquet_path: Path, tmp_path: Path, value: str
) -> None:
    tokens, spec = tmp_path / "tokens.yaml", tmp_path / "spec.yaml"
    tokens.write_text(yaml.safe_dump(TOKENS_FILE))
    spec.write_text(yaml.safe_dump(make_spec(redis_url, parquet_path).model_dump(mode="json", exclude_none=True)))
    result = CliRunner().invoke(cli, ["proxy", str(spec), "--tokens-file", str(tokens), "--forwarded-allow-ips", value])
    assert result.exit_code == 1, result.output
    assert "--forwarded-allow-ips: " in result.output and "(accepted: IP addresses or CIDR networks" in result.output
