"""The generated ACLs on a real redis-server: each component's user does its job and is refused everything else."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
import redis

from tests.connectors.sink_cases import SPEC
from tests.support.redis_acl import NS, PAIRS, acl_redis
from tests.support.result_tables import make_table
from windjoin.connectors.redis.client import RedisAuth, RedisAuthError, redis_client
from windjoin.connectors.redis.control_decisions import DecisionStore
from windjoin.connectors.redis.feed import feed_info, read_feed
from windjoin.connectors.redis.functions import LIBRARY, LIBRARY_VERSION, MissingLibraryError, load_library
from windjoin.connectors.redis.keys import index_key, piece_key
from windjoin.connectors.redis.load_reports import LoadReports
from windjoin.connectors.redis.sink import RedisSink
from windjoin.connectors.results.redis_tier import read_all
from windjoin.operators.redis_acl import COMPONENTS, acl_file, acl_users, component_rules


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, RedisAuth]]]:
    with acl_redis(tmp_path_factory.mktemp("acl")) as server:
        yield server


def test_default_user_is_off(acl_server) -> None:
    url, _ = acl_server
    with pytest.raises(redis.AuthenticationError):
        redis_client(url).ping()


def test_wrong_password_is_refused(acl_server, tmp_path: Path) -> None:
    url, _ = acl_server
    (tmp_path / "pw").write_text("guess")
    with pytest.raises(redis.AuthenticationError):
        redis_client(url, RedisAuth("windjoin-job", str(tmp_path / "pw"))).ping()


def test_job_writes_results_and_load_reads_decisions_only(acl_server) -> None:
    url, auths = acl_server
    DecisionStore(url, NS, auth=auths["controller"]).record({"epoch": 1, "shed_ratio": "0.0"})
    sink = RedisSink(url, 10**9, NS, auth=auths["job"])
    assert sink.write(3, {"a": make_table("a", 3, PAIRS, emitted_at=1)}) == {"a": 1}
    assert sink.last_committed("a") == 3 and sink.count("a") == 1
    LoadReports(url, NS, auth=auths["job"]).publish(3, 1.0, 1.0, [{"slot": 0}])
    job_decisions = DecisionStore(url, NS, auth=auths["job"])
    assert job_decisions.latest() == {"epoch": "1", "shed_ratio": "0.0"}
    with pytest.raises(redis.exceptions.NoPermissionError):
        job_decisions.record({"epoch": 2, "shed_ratio": "1.0"})  # the job cannot steer itself
    job = sink.client
    with pytest.raises(redis.exceptions.NoPermissionError):
        job.xrange(f"{NS}:{{control}}:decisions")  # nor read the controller's history
    for refused in (lambda: job.set("other", 1), job.flushall, job.flushdb, lambda: job.keys("*")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            refused()
    with pytest.raises(redis.exceptions.NoPermissionError):
        job.config_get("*")
    with pytest.raises(redis.exceptions.NoPermissionError):
        job.script_flush()
    sink.clear("a")  # without SCAN: the pieces and staged sets name the piece hashes
    assert not sink.holds_results("a") and sink.last_committed("a") is None


def test_controller_writes_decisions_and_reads_load_only(acl_server) -> None:
    url, auths = acl_server
    LoadReports(url, NS, auth=auths["job"]).publish(4, 2.0, 1.0, [{"slot": 1}])
    reports = LoadReports(url, NS, auth=auths["controller"])
    assert [e.batch_id for e in reports.read()][-1] == 4
    with pytest.raises(redis.exceptions.NoPermissionError):
        reports.publish(5, 3.0, 1.0, [])  # a forged load report
    decisions = DecisionStore(url, NS, auth=auths["controller"])
    decisions.record({"epoch": 7, "shed_ratio": "0.25"})
    assert decisions.latest() == {"epoch": "7", "shed_ratio": "0.25"}
    assert [f["epoch"] for _, f in decisions.history()][-1] == "7"
    client = decisions.client
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.zadd(index_key("a", NS), {"forged": 1})
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.zrange(index_key("a", NS), 0, -1)
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.eval("return 1", 0)


def test_proxy_reads_results_and_cannot_write(acl_server) -> None:
    url, auths = acl_server
    RedisSink(url, 10**9, NS, auth=auths["job"]).write(8, {"b": make_table("b", 8, PAIRS, emitted_at=2)})
    proxy = redis_client(url, auths["proxy"])
    assert [row["batch_id"] for row in read_all(proxy, "b", NS, 0, 100)] == [8]
    assert feed_info(proxy, "b", NS).last_batch == 8
    assert [row["batch_id"] for row in read_feed(proxy, "b", NS, None, 10, None).to_pylist()] == [8]
    for refused in (
        lambda: proxy.zadd(index_key("b", NS), {"forged": 1}),
        lambda: proxy.delete(index_key("b", NS)),
        lambda: proxy.hset(piece_key("b", 8, 0, NS), "c0", b"forged"),
        lambda: proxy.hgetall(f"{NS}:{{control}}:decision"),
        lambda: proxy.get(f"{NS}:{{b}}:owner"),
        lambda: proxy.xadd(f"{NS}:{{control}}:load", {"batch_id": 1}),
        proxy.flushall,
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            refused()
    with pytest.raises(redis.exceptions.NoPermissionError):  # a writing function
        proxy.fcall("windjoin_advance", 1, f"{NS}:{{b}}:meta", 99, 99)
    with pytest.raises(redis.ResponseError, match="write flag"):  # nor through FCALL_RO
        proxy.fcall_ro("windjoin_advance", 1, f"{NS}:{{b}}:meta", 99, 99)
    assert RedisSink(url, 10**9, NS, auth=auths["job"]).count("b") == 1  # nothing the proxy tried changed it


def _refusals(client: redis.Redis) -> dict[str, object]:
    """What no component may do: run its own code, change the library, walk or move keys across the server, watch
    keys it cannot read, copy or inspect values outside its commands, stop a script."""
    index = index_key("b", NS)
    return {
        "EVAL": lambda: client.eval("return 1", 0),
        "EVAL_RO": lambda: client.eval_ro("return 1", 0),
        "EVALSHA": lambda: client.evalsha("e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0),
        "SCRIPT LOAD": lambda: client.script_load("return 1"),
        "SCRIPT KILL": client.script_kill,
        "FUNCTION LOAD": lambda: client.function_load(LIBRARY, replace=True),
        "FUNCTION FLUSH": client.function_flush,
        "FUNCTION DELETE": lambda: client.function_delete("windjoin"),
        "FUNCTION KILL": client.function_kill,
        "SCAN": lambda: client.scan(0),
        "KEYS": lambda: client.keys("*"),
        "RANDOMKEY": client.randomkey,
        "SELECT": lambda: client.execute_command("SELECT", 1),
        "MOVE": lambda: client.move(index, 1),
        "SWAPDB": lambda: client.swapdb(0, 1),
        "CLIENT TRACKING": lambda: client.execute_command("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", NS),
        "OBJECT": lambda: client.object("encoding", index),
        "DUMP": lambda: client.dump(index),
        "RESTORE": lambda: client.restore(f"{NS}:{{b}}:meta", 0, b"x", replace=True),
        "MIGRATE": lambda: client.execute_command("MIGRATE", "127.0.0.1", 1, index, 0, 100),
        "WAIT": lambda: client.wait(0, 1),
        "CONFIG SET": lambda: client.config_set("busy-reply-threshold", 1),
        "FLUSHALL": client.flushall,
        "SUBSCRIBE": lambda: client.execute_command("SUBSCRIBE", "x"),
    }


@pytest.mark.parametrize("component", COMPONENTS)
def test_no_component_runs_its_own_code_or_walks_the_server(acl_server, component) -> None:
    url, auths = acl_server
    sink = RedisSink(url, 10**9, NS, auth=auths["job"])
    sink.write(100, {"b": make_table("b", 100, PAIRS, emitted_at=3)})  # a replay after the first component
    held = sink.count("b")
    client = redis_client(url, auths[component])
    allowed = [name for name, command in _refusals(client).items() if not _refused(command)]
    assert allowed == []
    assert sink.count("b") == held and sink.last_committed("b") == 100


def _refused(command) -> bool:
    try:
        command()
    except redis.exceptions.NoPermissionError:
        return True
    return False


def test_the_admin_loads_the_library_and_reads_no_key(acl_server) -> None:
    url, auths = acl_server
    admin = redis_client(url, auths["admin"])
    load_library(admin)  # REPLACE: at every start of the Redis pod
    assert [lib[b"library_name"] for lib in map(_pairs, admin.function_list())] == [b"windjoin"]
    for refused in (lambda: admin.get(index_key("b", NS)), lambda: admin.keys("*"), lambda: admin.eval("return 1", 0)):
        with pytest.raises(redis.exceptions.NoPermissionError):
            refused()


def _pairs(flat: list) -> dict:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _held_version(client: redis.Redis) -> bytes:
    return client.fcall_ro("windjoin_version", 0)


def test_a_user_who_may_load_the_library_loads_it_when_missing_or_another_version(private_redis) -> None:
    """A Redis you run without ACL users: nothing to do by hand, before or after an upgrade."""
    admin = redis_client(private_redis)
    admin.function_flush()
    RedisSink(private_redis, 10**9, NS).write(1, {"a": make_table("a", 1, PAIRS)})
    assert _held_version(admin).decode() == LIBRARY_VERSION
    admin.function_load(LIBRARY.replace(LIBRARY_VERSION, "0" * 16), replace=True)  # another windjoin's
    RedisSink(private_redis, 10**9, NS).write(2, {"a": make_table("a", 2, PAIRS)})
    assert _held_version(admin).decode() == LIBRARY_VERSION


def test_a_user_who_may_not_load_it_is_told_what_is_held_and_what_to_do(tmp_path: Path) -> None:
    with acl_redis(tmp_path) as (url, auths), closing(redis_client(url, auths["admin"])) as admin:
        admin.function_load(LIBRARY.replace(LIBRARY_VERSION, "0" * 16), replace=True)  # another windjoin's
        said = f"library {'0' * 16}, this windjoin needs {LIBRARY_VERSION}: .*windjoin redis-functions"
        with pytest.raises(MissingLibraryError, match=said):
            RedisSink(url, 10**9, NS, auth=auths["job"]).write(1, {"a": make_table("a", 1, PAIRS)})


def test_rules_follow_the_namespace() -> None:
    rules = component_rules("proxy", "tenant.a")
    assert "~tenant.a:{*}:index" in rules and "~tenant.a:{*}:piece:*" in rules and "windjoin" not in rules
    with pytest.raises(ValueError, match="component"):
        component_rules("root")


def test_a_password_in_the_url_is_refused() -> None:
    with pytest.raises(RedisAuthError, match="password_file"):
        redis_client("redis://user:secret@127.0.0.1:1/0")


def test_credentials_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret\n")
    auth = RedisAuth.from_env({"WINDJOIN_REDIS_USERNAME": "u", "WINDJOIN_REDIS_PASSWORD_FILE": str(tmp_path / "pw")})
    assert auth == RedisAuth("u", str(tmp_path / "pw")) and auth.password() == "s3cret"
    with pytest.raises(RedisAuthError, match="WINDJOIN_REDIS_PASSWORD_X"):
        RedisAuth(password_env="WINDJOIN_REDIS_PASSWORD_X").password()
    with pytest.raises(RedisAuthError, match="redis.password_file"):
        RedisAuth(password_file=str(tmp_path / "missing")).password()


def test_the_spec_refuses_a_password_in_the_url() -> None:
    from windjoin.operators.spec import SpecError, parse_spec

    data = SPEC.model_dump(exclude={"base_dir"})
    with pytest.raises(SpecError, match="sinks.redis: url: holds credentials"):
        parse_spec({**data, "sinks": {"redis": {"url": "redis://job:pw@h:6379/0"}}})


def test_the_cli_writes_an_acl_file_for_your_own_redis(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from windjoin.pipelines.cli.main import cli

    (tmp_path / "job").write_text("j-pass\n")
    (tmp_path / "proxy").write_text("p-pass")
    args = ["redis-acl", "--password-file", f"job={tmp_path / 'job'}", "--password-file", f"proxy={tmp_path / 'proxy'}"]
    done = CliRunner().invoke(cli, [*args, "--namespace", "tenant"])
    assert done.exit_code == 0, done.output
    assert done.output == acl_file(
        acl_users(
            {"job": hashlib.sha256(b"j-pass").hexdigest(), "proxy": hashlib.sha256(b"p-pass").hexdigest()}, "tenant"
        )
    )
    assert "j-pass" not in done.output
    bad = CliRunner().invoke(cli, ["redis-acl", "--password-file", f"root={tmp_path / 'job'}"])
    assert bad.exit_code != 0 and "COMPONENT one of ['job', 'controller', 'proxy', 'admin']" in bad.output


def test_the_cli_prints_the_function_library(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from windjoin.pipelines.cli.main import cli

    done = CliRunner().invoke(cli, ["redis-functions"])
    assert done.exit_code == 0 and done.output == LIBRARY and done.output.startswith("#!lua name=windjoin\n")
