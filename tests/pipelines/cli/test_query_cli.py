"""`windjoin query` against a real proxy (uvicorn on a free port) over real Redis and Parquet tiers, and directly
against a spec's sinks: rows equal the oracle's, as JSON lines or a table; bad queries fail with the message."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
import yaml
from click.testing import CliRunner

from tests.pipelines.proxy_helpers import TOKEN, TOKENS_FILE, Results, Server, access, make_spec, new_namespace
from tests.support.damaged_chunks import crafted_chunk, damage
from tests.support.proxy_metrics import wait_subscribers
from windjoin.connectors.local import processes
from windjoin.connectors.local.processes import free_port
from windjoin.pipelines.cli.main import cli
from windjoin.pipelines.proxy.app import create_app
from windjoin.pipelines.proxy.feed import FeedConfig


@pytest.fixture(scope="module")
def tiers(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Results:
    path = tmp_path_factory.mktemp("query-cli") / "parquet"
    results = Results(make_spec(redis_url, path), new_namespace(), redis_url, path)
    for b in range(8):
        results.write(12, t0=100 * b)
        if b == 4:
            results.snapshot("a", cutoff_ms=450)
    return results


@pytest.fixture(scope="module")
def server(tiers: Results) -> Server:
    with Server(create_app(tiers.store(), FeedConfig(block_ms=200), access=access())) as server:
        yield server


def run(*args: Any) -> Any:
    return CliRunner().invoke(cli, ["query", *map(str, args)], catch_exceptions=False, env={"WINDJOIN_TOKEN": TOKEN})


def json_lines(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in text.splitlines() if line]


def test_results_as_json_lines_through_the_proxy(server: Server, tiers: Results) -> None:
    result = run("results", server.url, "a", "--from", 150, "--to", 720, "--page-size", 7, "--json")
    assert result.exit_code == 0, result.output
    assert json_lines(result.stdout) == tiers.oracle("a", 150, 720)
    assert f"{len(tiers.oracle('a', 150, 720))} rows" in result.stderr


def test_results_with_selection_projection_and_limit(server: Server, tiers: Results) -> None:
    args = ["--where", "R.k>=1", "--where", "S.d=false", "--fields", "R.k,result_time", "--limit", 9, "--json"]
    result = run("results", server.url, "b", "--from", 0, "--to", 10_000, "--page-size", 4, *args)
    assert result.exit_code == 0, result.output
    keep = [r for r in tiers.oracle("b", 0, 10_000) if r["R"]["k"] >= 1 and not r["S"]["d"]]
    assert json_lines(result.stdout) == [{"R": {"k": r["R"]["k"]}, "result_time": r["result_time"]} for r in keep][:9]


def test_results_as_a_table(server: Server, tiers: Results) -> None:
    result = run("results", server.url, "a", "--from", 0, "--to", 300, "--fields", "R.k,S.t,result_time")
    assert result.exit_code == 0, result.output
    header, rule, *lines = result.stdout.splitlines()
    assert header.split() == ["R.k", "S.t", "result_time"] and set(rule.replace(" ", "")) == {"-"}
    expected = tiers.oracle("a", 0, 300)
    assert [[int(v) for v in line.split()] for line in lines] == [
        [r["R"]["k"], r["S"]["t"], r["result_time"]] for r in expected
    ]


def test_results_straight_from_the_spec_sinks(tiers: Results, tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.yaml"
    spec = tiers.spec.model_dump(mode="json", exclude_none=True)
    spec_file.write_text(yaml.safe_dump(spec))
    args = ["--from", 0, "--to", 10_000, "--namespace", tiers.namespace, "--json"]
    result = run("results", spec_file, "a", *args)
    assert result.exit_code == 0, result.output
    assert json_lines(result.stdout) == tiers.oracle("a", 0, 10_000)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "--from", 0, "--to", 1], "404"),
        (["a", "--from", 5, "--to", 1], "400"),
        (["a", "--from", 0, "--to", 1, "--where", "R.k~1"], "not a condition"),
        (["a", "--from", 0, "--to", 1, "--fields", "R.nope"], "R.nope"),
    ],
)
def test_bad_queries_fail_with_the_proxy_message(server: Server, args: list[Any], message: str) -> None:
    result = run("results", server.url, *args)
    assert result.exit_code == 1 and message in result.stderr, result.output


def test_unreachable_proxy_is_an_error_not_a_traceback() -> None:
    result = run("results", f"http://127.0.0.1:{free_port()}", "a", "--from", 0, "--to", 1)
    assert result.exit_code == 1 and "Error" in result.stderr


def test_follow_prints_new_results_then_resumes_from_its_cursor(redis_url: str, tmp_path: Path) -> None:
    live = Results(make_spec(redis_url, None), new_namespace(), redis_url, None)
    live.write(5, t0=0)  # before: not followed
    batches = [live.prepare(10, t0=100 * b) for b in range(6)]
    with Server(create_app(live.store(), FeedConfig(block_ms=200), access=access())) as server:

        def produce() -> None:
            wait_subscribers(server, 1)
            for batch in batches[:3]:
                live.commit(batch)

        writer = threading.Thread(target=produce)
        writer.start()
        first = run("follow", server.url, "a", "--where", "R.k>=0", "--max-rows", 25, "--json")
        writer.join()
        assert first.exit_code == 0, first.output
        expected = [r for b in batches for r in b.rows["a"]]
        shown = json_lines(first.stdout)
        # stops at an event's end: 25 to 30 rows, as one event may carry several batches
        assert 25 <= len(shown) <= 30 and shown == expected[: len(shown)]
        for batch in batches[3:]:  # committed while nobody follows: the cursor finds them
            live.commit(batch)
        cursor = first.stderr.split("--cursor ")[-1].split()[0]
        second = run("follow", server.url, "a", "--cursor", cursor, "--max-rows", len(expected) - len(shown), "--json")
        assert second.exit_code == 0, second.output
        assert shown + json_lines(second.stdout) == expected


def test_windjoin_proxy_serves_a_spec(tiers: Results, tmp_path: Path) -> None:
    """The real `windjoin proxy` process: ready, and its answers are the oracle's; stopped by PID."""
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(tiers.spec.model_dump(mode="json", exclude_none=True)))
    port = free_port()
    tokens_file = tmp_path / "tokens.yaml"
    tokens_file.write_text(yaml.safe_dump(TOKENS_FILE))
    argv = [sys.executable, "-m", "windjoin.pipelines", "proxy", str(spec_file), "--port", str(port)]
    argv += ["--tokens-file", str(tokens_file)]
    pid = processes.spawn([*argv, "--namespace", tiers.namespace], tmp_path / "proxy.log")
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while not processes.port_open("127.0.0.1", port):
            assert processes.is_alive(pid) and time.monotonic() < deadline, processes.log_tail(tmp_path / "proxy.log")
            time.sleep(0.1)
        assert httpx.get(f"{url}/readyz").json() == {"ready": True, "checks": {"redis": True, "parquet": True}}
        result = run("results", url, "b", "--from", 0, "--to", 10_000, "--json")
        assert json_lines(result.stdout) == tiers.oracle("b", 0, 10_000)
    finally:
        processes.stop(pid)


def _spec_file(tiers: Results, path: Path, redis_url: str | None, parquet: bool = True) -> Path:
    spec = tiers.spec.model_dump(mode="json", exclude_none=True)
    if redis_url is None:
        spec["sinks"].pop("redis")
    else:
        spec["sinks"]["redis"]["url"] = redis_url
    if not parquet:
        spec["sinks"].pop("parquet")
    path.write_text(yaml.safe_dump(spec))
    return path


def test_results_by_spec_with_redis_unreachable_answer_from_parquet_with_a_warning(
    tiers: Results, tmp_path: Path
) -> None:
    """As after `windjoin services down && up` used to move Redis: the spec names a Redis that is gone. Parquet
    answers alone, every committed batch (those after the last snapshot too), with a one-line warning."""
    gone = f"redis://127.0.0.1:{free_port()}/0"
    spec_file = _spec_file(tiers, tmp_path / "spec.yaml", gone)
    result = run("results", spec_file, "a", "--from", 0, "--to", 10_000, "--namespace", tiers.namespace, "--json")
    assert result.exit_code == 0, result.output
    assert json_lines(result.stdout) == tiers.oracle("a", 0, 10_000)
    [warning] = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert f"Redis at {gone} is unreachable" in warning and "Parquet" in warning


def test_results_by_spec_with_only_an_unreachable_redis_fail_in_one_line(tiers: Results, tmp_path: Path) -> None:
    gone = f"redis://127.0.0.1:{free_port()}/0"
    spec_file = _spec_file(tiers, tmp_path / "spec.yaml", gone, parquet=False)
    result = CliRunner().invoke(cli, ["query", "results", str(spec_file), "a", "--from", "0", "--to", "1"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)  # a click error, not a traceback
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error:") and gone in line


def test_results_by_spec_with_redis_restarted_empty_answer_everything(
    redis_url: str, tiers: Results, tmp_path: Path
) -> None:
    """Redis answers but holds nothing of the namespace (restarted without persistence): Parquet answers for every
    committed batch."""
    spec_file = _spec_file(tiers, tmp_path / "spec.yaml", redis_url)
    empty = new_namespace()  # the same sinks seen by a Redis that lost everything
    args = ["--from", 0, "--to", 10_000, "--namespace", empty, "--json"]
    result = run("results", spec_file, "a", *args)
    assert result.exit_code == 0, result.output
    assert json_lines(result.stdout) == tiers.oracle("a", 0, 10_000)


def test_follow_resumes_from_parquet_when_redis_lost_what_it_had_not_read(redis_url: str, tmp_path: Path) -> None:
    """A subscriber stops after some rows; Redis loses everything and the job writes on; `windjoin query follow
    --cursor` gets 410 with a resume cursor, reads the lost batches from Parquet, then the feed: every row once."""
    from windjoin.connectors.redis.sink import clear_task

    live = Results(make_spec(redis_url, tmp_path / "parquet"), new_namespace(), redis_url, tmp_path / "parquet")
    for b in range(4):
        live.write(6, t0=100 * b)
    with Server(create_app(live.store(), FeedConfig(block_ms=200, page_rows=6), access=access())) as server:
        first = run("follow", server.url, "a", "--from", 0, "--max-rows", 6, "--json")
        assert first.exit_code == 0, first.output
        shown = json_lines(first.stdout)
        assert shown == live.since("a", 0)[:6]
        cursor = first.stderr.split("--cursor ")[-1].split()[0]
        for task in ("a", "b"):
            clear_task(live.redis, task, live.namespace)
        for b in range(4, 6):
            live.write(6, t0=100 * b)
        rest = live.since("a", 0)[6:]
        second = run("follow", server.url, "a", "--cursor", cursor, "--max-rows", len(rest), "--json")
        assert second.exit_code == 0, second.output
        assert json_lines(second.stdout) == rest
        assert "resuming from Parquet" in second.stderr


def test_results_by_spec_with_redis_failing_mid_read_go_on_from_parquet_at_the_same_cursor(
    tiers: Results, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis answers the first pages, then fails: Parquet alone answers the rest, from the last page's cursor (signed
    by the first store, read back by the Parquet-only one), every row once."""
    from windjoin.connectors.results.result_query import ResultStore

    one_time, calls = ResultStore.one_time, []

    def failing_after_two_pages(store: ResultStore, *args: Any, **kwargs: Any) -> Any:
        if store.client is not None:
            calls.append(args)
            if len(calls) > 2:
                raise redis.ConnectionError("Redis went away")
        return one_time(store, *args, **kwargs)

    monkeypatch.setattr(ResultStore, "one_time", failing_after_two_pages)
    spec_file = _spec_file(tiers, tmp_path / "spec.yaml", tiers.redis_url)
    args = ["--from", 0, "--to", 10_000, "--namespace", tiers.namespace, "--page-size", 7, "--json"]
    result = run("results", spec_file, "a", *args)
    assert result.exit_code == 0, result.output
    assert json_lines(result.stdout) == tiers.oracle("a", 0, 10_000)
    assert len(calls) == 3 and "Redis went away" in result.stderr


def test_follow_goes_past_a_damaged_piece_saying_so(redis_url: str) -> None:
    """The first batch's chunk holds 100 rows under an entry of 10: `windjoin query follow --from 0` says which
    batch is damaged, serves none of its rows, and goes on with the next batch."""
    live = Results(make_spec(redis_url, None), new_namespace(), redis_url, None)
    damage(live, 0, crafted_chunk(live, "a", 100))
    live.write(6, t0=100)
    with Server(create_app(live.store(), FeedConfig(block_ms=200), access=access())) as server:
        followed = run("follow", server.url, "a", "--from", 0, "--max-rows", 6, "--json")
    assert followed.exit_code == 0, followed.output
    assert json_lines(followed.stdout) == live.since("a", 1)
    assert "damaged: task 'a' batch 0" in followed.stderr and "resuming past it" in followed.stderr
