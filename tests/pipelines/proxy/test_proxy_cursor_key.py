"""The cursor key of `windjoin proxy`, each proxy in its own process: with the same `--cursor-key-file`, a cursor one
proxy returned works on another (a restart, another replica), one-time and continuous; a proxy with another key, or
none (a random key, logged once), refuses it with a 400; a key file of the wrong size, or missing, is a
configuration error naming the option."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner

from tests.pipelines.proxy_helpers import AUTH, TOKENS_FILE, ProxyProcess, Results, make_spec, new_namespace
from windjoin.operators.query.cursors import CursorCodec
from windjoin.pipelines.cli.main import cli
from windjoin.pipelines.proxy.cursor_key import cursor_codec, read_cursor_key

NO_KEY_WARNING = "no --cursor-key-file: cursors are signed with a random key made at start"


@pytest.fixture(scope="module")
def tiers(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Results:
    path = tmp_path_factory.mktemp("cursor-key") / "parquet"
    results = Results(make_spec(redis_url, path), new_namespace(), redis_url, path)
    for b in range(4):
        results.write(6, t0=100 * b)
    return results


def proxy(tiers: Results, folder: Path, key_file: Path | None) -> ProxyProcess:
    folder.mkdir()
    args = ["--namespace", tiers.namespace]
    return ProxyProcess(tiers.spec, folder, [*args, "--cursor-key-file", str(key_file)] if key_file else args)


def page(client: httpx.Client, proxy: ProxyProcess, cursor: str | None = None) -> httpx.Response:
    params = {"from": 0, "to": 10_000, "limit": 5, **({"cursor": cursor} if cursor else {})}
    return client.get(f"{proxy.url}/v1/tasks/a/results", params=params)


def stream_from(client: httpx.Client, proxy: ProxyProcess, params: dict[str, str | int]) -> tuple[int, str | None]:
    """The status of a stream and, when it is one, the id (cursor) of its first event."""
    with client.stream("GET", f"{proxy.url}/v1/tasks/a/stream", params=params) as response:
        if response.status_code != 200:
            response.read()
            return response.status_code, response.text
        for line in response.iter_lines():
            if line.startswith("id: "):
                return 200, line.removeprefix("id: ")
    raise AssertionError("a stream without events")


def test_cursors_work_across_proxies_with_the_same_key_file_only(tiers: Results, tmp_path: Path) -> None:
    key, other_key = tmp_path / "cursor-key", tmp_path / "other-cursor-key"
    key.write_text("k" * 47 + "\n")  # as a Secret the chart makes: 48 characters (a trailing newline ignored)
    other_key.write_text("o" * 48)
    expected = tiers.oracle("a", 0, 10_000)
    with httpx.Client(headers=AUTH, timeout=60) as client:
        with proxy(tiers, tmp_path / "first", key) as first:
            answer = page(client, first).json()
            assert answer["rows"] == expected[:5]
            one_time = answer["next_cursor"]
            status, feed = stream_from(client, first, {"from": 0})
            assert status == 200 and feed
        with proxy(tiers, tmp_path / "restarted", key) as restarted:  # the same key: a restart, or a replica
            rows, cursor = [], one_time
            while cursor:
                answer = page(client, restarted, cursor)
                assert answer.status_code == 200, answer.text
                rows += answer.json()["rows"]
                cursor = answer.json()["next_cursor"]
            assert rows == expected[5:]
            assert stream_from(client, restarted, {"cursor": feed})[0] == 200
            assert stream_from(client, restarted, {"cursor": feed + "A"})[0] == 400  # still checked
        for name, key_file in (("another-key", other_key), ("no-key", None)):
            with proxy(tiers, tmp_path / name, key_file) as other:
                answer = page(client, other, one_time)
                assert answer.status_code == 400 and answer.json()["detail"].startswith("cursor: "), answer.text
                status, body = stream_from(client, other, {"cursor": feed})
                assert status == 400 and "cursor: not a cursor of a continuous query" in str(body), body
                assert page(client, other).status_code == 200  # its own cursors work
    logs = {name: (tmp_path / name / "proxy.log").read_text() for name in ("first", "another-key", "no-key")}
    assert logs["no-key"].count(NO_KEY_WARNING) == 1, logs["no-key"]
    assert NO_KEY_WARNING not in logs["first"] and NO_KEY_WARNING not in logs["another-key"]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "a key of 0 bytes"),
        (b"k" * 31, "a key of 31 bytes"),
        (b"  " + b"k" * 31 + b"\n\n", "a key of 31 bytes"),  # surrounding whitespace is not key
        (b"k" * 5000, "a key of 5000 bytes"),
        (b"k" * 100_000, "a key of 8192 bytes or more"),
        (None, "cannot be read"),
    ],
)
def test_a_bad_key_file_is_a_configuration_error_naming_the_option(
    tiers: Results, tmp_path: Path, content: bytes | None, problem: str
) -> None:
    tokens, spec, key = tmp_path / "tokens.yaml", tmp_path / "spec.yaml", tmp_path / "cursor-key"
    tokens.write_text(yaml.safe_dump(TOKENS_FILE))
    spec.write_text(yaml.safe_dump(tiers.spec.model_dump(mode="json", exclude_none=True)))
    if content is not None:
        key.write_bytes(content)
    result = CliRunner().invoke(cli, ["proxy", str(spec), "--tokens-file", str(tokens), "--cursor-key-file", str(key)])
    assert result.exit_code == 1, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"Error: --cursor-key-file {key}: ") and problem in line, line
    if content is not None:
        assert "(accepted: 32 to 4096 bytes" in line
    env = {"WINDJOIN_PROXY_CURSOR_KEY_FILE": str(key)}  # the same from the environment
    result = CliRunner().invoke(cli, ["proxy", str(spec), "--tokens-file", str(tokens)], env=env)
    assert result.exit_code == 1 and f"Error: --cursor-key-file {key}: " in result.output, result.output


def test_a_key_file_signs_as_its_key_and_none_gives_a_random_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = tmp_path / "cursor-key"
    key.write_bytes(b"k" * 32 + b"\r\n")
    assert read_cursor_key(key) == b"k" * 32
    assert cursor_codec(key).page_cursor("a", (1, 2, 3)) == CursorCodec(b"k" * 32).page_cursor("a", (1, 2, 3))
    with caplog.at_level("WARNING", logger="windjoin.proxy"):
        first, second = cursor_codec(None), cursor_codec(None)
    assert first.page_cursor("a", (1, 2, 3)) != second.page_cursor("a", (1, 2, 3))
    assert [r.getMessage().startswith(NO_KEY_WARNING) for r in caplog.records] == [True, True]  # once per proxy
    assert "k" * 32 not in repr(cursor_codec(key))
