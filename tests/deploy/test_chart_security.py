"""The chart's security, offline: every Secret a pod references resolves, no credential is in a ConfigMap or a
container argument, the bundled Redis gets the same ACL users as `operators.redis_acl` (its init script run here,
its file loaded by a real redis-server), Spark authenticates and encrypts, NetworkPolicies deny by default."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import pytest
import redis
import yaml

from tests.support.chart import CHART, VALUE_SETS, refusal, render, run_helm
from tests.support.redis_acl import PAIRS
from tests.support.result_tables import make_table
from windjoin.connectors.local import processes
from windjoin.connectors.local.services import redis_binary
from windjoin.connectors.redis.client import RedisAuth, redis_client
from windjoin.connectors.redis.functions import BUSY_REPLY_MS, LIBRARY
from windjoin.connectors.redis.sink import RedisSink
from windjoin.connectors.results.redis_tier import read_all
from windjoin.operators.redis_acl import COMPONENTS, component_rules
from windjoin.operators.spec import parse_spec

WORKLOADS = {"Deployment", "StatefulSet"}


def _values(name: str) -> dict:
    path = VALUE_SETS[name]
    return {} if path is None else yaml.safe_load(path.read_text())


def _pods(docs: list[dict]) -> list[tuple[str, dict]]:
    """(name, pod spec) of every workload, the executor pod template included."""
    pods = [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in docs if d["kind"] in WORKLOADS]
    spec_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-spec"))
    if "executor-pod-template.yaml" in spec_map["data"]:
        pods.append(("executor", yaml.safe_load(spec_map["data"]["executor-pod-template.yaml"])["spec"]))
    return pods


def _containers(pod: dict) -> list[dict]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _user_secrets(values: dict) -> set[str]:
    """Secrets the values name as the user's own (they exist before install)."""
    found = set()

    def walk(node: object, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "existingSecrets":  # the Redis users': {user: name}
                    found.update(name for name in v.values() if name)
                else:
                    walk(v, k)
        elif (
            isinstance(node, str)
            and node
            and key
            in {
                "existingSecret",
                "caSecret",
                "passwordSecret",
                "secretName",
                "credentialsSecret",
                "secret",  # storage.objectStore.credentialsFile's, monitoring.proxyToken's
            }
        ):
            found.add(node)

    walk(values)
    return found


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_secret_reference_resolves(helm, name):
    docs = render(helm, name)
    rendered = {
        d["metadata"]["name"]: {**d.get("data", {}), **d.get("stringData", {})} for d in docs if d["kind"] == "Secret"
    }
    values = _values(name)
    own = _user_secrets(values)
    if not (values.get("proxy", {}).get("auth", {}).get("tokens")):
        own.add("wj-windjoin-proxy-tokens")  # the proxy's tokens: yours unless the values list them
    refs = []
    for pod_name, pod in _pods(docs):
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                keys = [item["key"] for item in volume["secret"].get("items", [])]
                refs.append((pod_name, volume["secret"]["secretName"], keys))
        for container in _containers(pod):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    refs.append((pod_name, ref["name"], [ref["key"]]))
            for source in container.get("envFrom", []):
                if "secretRef" in source:
                    refs.append((pod_name, source["secretRef"]["name"], []))
    assert refs
    for pod_name, secret, keys in refs:
        if secret in own:
            continue
        assert secret in rendered, f"{name}: {pod_name} references Secret {secret}, neither rendered nor yours"
        missing = [k for k in keys if k not in rendered[secret]]
        assert not missing, f"{name}: {pod_name} needs keys {missing} of Secret {secret}"


def _secret_values(docs: list[dict]) -> list[str]:
    out = []
    for d in docs:
        if d["kind"] == "Secret":
            out += [base64.b64decode(v).decode() for v in d.get("data", {}).values()]
            out += [line for v in d.get("stringData", {}).values() for line in v.splitlines() if "sha256" in line]
    return [v for v in out if v]


# A password given inline (not a file path), a URL with a password, librdkafka's or Spark's secret settings.
CREDENTIAL_TEXT = re.compile(
    r"\bpassword\s*[=:]\s*(?![\s/])|rediss?://[^/\s@]*:[^/\s@]*@|sasl\.password|spark\.authenticate\.secret="
    r"|\btoken\s*[=:]\s*(?![\s/])",
    re.IGNORECASE,
)


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_no_credential_in_a_configmap_or_an_argument(helm, name):
    docs = render(helm, name)
    secrets = _secret_values(docs)
    assert secrets or name != "default", "the default values create the Redis and Spark secrets"
    texts = []
    for d in docs:
        if d["kind"] == "ConfigMap":
            texts += [f"ConfigMap {d['metadata']['name']}: {v}" for v in d["data"].values()]
    for pod_name, pod in _pods(docs):
        for container in _containers(pod):
            where = f"{pod_name}/{container['name']}"
            texts += [f"{where} arg: {a}" for a in [*container.get("command", []), *container.get("args", [])]]
            texts += [f"{where} env: {e['name']}={e['value']}" for e in container.get("env", []) if "value" in e]
    for text in texts:
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"{name}: a Secret's value in {text[:200]}"
        assert not CREDENTIAL_TEXT.search(text), f"{name}: {text[:300]}"


def test_the_spec_names_credential_files_only(helm):  # noqa: F811
    docs = render(helm, "secure")
    spec_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-spec"))
    spec = parse_spec(yaml.safe_load(spec_map["data"]["spec.yaml"]))
    assert spec.kafka.security_protocol == "SASL_SSL" and spec.kafka.sasl_mechanism == "SCRAM-SHA-512"
    assert spec.kafka.password_file == "/var/run/secrets/windjoin/kafka/password"
    assert spec.kafka.ca_file == "/var/run/secrets/windjoin/kafka-ca/ca.crt"
    assert spec.sinks.redis.username is None and spec.sinks.redis.password_file is None  # per component: env
    pods = dict(_pods(docs))
    for pod_name, component in (
        ("wj-windjoin-driver", "job"),
        ("executor", "job"),
        ("wj-windjoin-controller", "controller"),
        ("wj-windjoin-proxy", "proxy"),
    ):
        [container] = pods[pod_name]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        auth = RedisAuth.from_env({k: v for k, v in env.items() if v})
        assert auth == RedisAuth(
            f"windjoin-{component}",
            f"/var/run/secrets/windjoin/redis/{component}",
            ca_file="/var/run/secrets/windjoin/redis-ca/ca.crt",
        )
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pods[pod_name]["volumes"]}
        redis_volume = volumes[mounts["/var/run/secrets/windjoin/redis"]]["secret"]
        assert redis_volume["secretName"] == f"windjoin-redis-{component}"  # its own Secret only
        assert redis_volume["items"] == [{"key": "password", "path": component}]
        kafka_mounted = "/var/run/secrets/windjoin/kafka" in mounts
        assert kafka_mounted == (component != "proxy")
    proxy = pods["wj-windjoin-proxy"]["containers"][0]
    assert "--tokens-file=/var/run/secrets/windjoin/proxy-tokens/tokens.yaml" in proxy["args"]
    assert "--tls-cert-file=/var/run/secrets/windjoin/proxy-tls/tls.crt" in proxy["args"]
    assert proxy["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    tokens = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "wj-windjoin-proxy-tokens")
    assert yaml.safe_load(tokens["stringData"]["tokens.yaml"]) == _values("secure")["proxy"]["auth"]


def test_spark_authenticates_and_encrypts_with_a_secret_file(helm):  # noqa: F811
    for name in ("default", "secure"):
        docs = render(helm, name)
        pods = dict(_pods(docs))
        args = pods["wj-windjoin-driver"]["containers"][0]["args"]
        conf = dict(a.removeprefix("--spark-conf=").split("=", 1) for a in args if a.startswith("--spark-conf="))
        assert conf["spark.authenticate"] == "true" and conf["spark.network.crypto.enabled"] == "true"
        assert conf["spark.ui.killEnabled"] == "false"
        path = conf["spark.authenticate.secret.file"]
        for pod_name in ("wj-windjoin-driver", "executor"):
            pod = pods[pod_name]
            mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
            volume = next(v for v in pod["volumes"] if v["name"] == mounts[str(Path(path).parent)])
            assert volume["secret"]["items"] == [{"key": "secret", "path": Path(path).name}]
    stderr = refusal(helm, VALUE_SETS["default"], "--set", "join.sparkConf.spark\\.authenticate\\.secret=x")
    assert "join.sparkConf.spark.authenticate.secret: a credential" in stderr


CURSOR_KEY_DIR = "/var/run/secrets/windjoin/proxy-cursor-key"


@pytest.mark.parametrize(("name", "existing"), [*((name, None) for name in sorted(VALUE_SETS)), ("default", "mine")])
def test_the_proxy_signs_cursors_with_a_key_file_from_a_secret(helm, name, existing):
    """Every replica reads the same cursor key from a Secret (yours, or one the chart makes: 48 random letters and
    digits, kept across upgrades by `lookup`), mounted read-only and named by the file option: never a value in an
    argument or a ConfigMap (test_no_credential_in_a_configmap_or_an_argument checks the value itself)."""
    docs = render(helm, name, *(["--set", f"proxy.cursorKey.existingSecret={existing}"] if existing else []))
    pod = dict(_pods(docs))["wj-windjoin-proxy"]
    [container] = pod["containers"]
    assert f"--cursor-key-file={CURSOR_KEY_DIR}/key" in container["args"]
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == CURSOR_KEY_DIR]
    assert mount["readOnly"] is True
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = existing or "wj-windjoin-proxy-cursor-key"
    assert volume["secret"] == {"secretName": secret, "defaultMode": 0o440, "items": [{"key": "key", "path": "key"}]}
    made = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "wj-windjoin-proxy-cursor-key"]
    if existing:
        assert made == []
    else:
        [made_secret] = made
        key = base64.b64decode(made_secret["data"]["key"]).decode()
        assert re.fullmatch(r"[A-Za-z0-9]{48}", key), key
    other_pods = [p for n, p in _pods(docs) if n != "wj-windjoin-proxy"]
    assert all(secret not in _secret_names(p) for p in other_pods)


def test_a_rotated_cursor_key_keeps_the_previous_one_verifying(helm):
    """previousKey mounts the Secret's `previous` beside `key` and names it to the proxy (a rotation's overlap:
    old cursors get 410 with a way to resume); without a Secret of one's own it is refused, naming the key."""
    docs = render(
        helm, "default", "--set", "proxy.cursorKey.existingSecret=mine", "--set", "proxy.cursorKey.previousKey=true"
    )
    pod = dict(_pods(docs))["wj-windjoin-proxy"]
    [container] = pod["containers"]
    assert f"--previous-cursor-key-file={CURSOR_KEY_DIR}/previous" in container["args"]
    [volume] = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "mine"]
    assert volume["secret"]["items"] == [{"key": "key", "path": "key"}, {"key": "previous", "path": "previous"}]
    stderr = refusal(helm, VALUE_SETS["default"], "--set", "proxy.cursorKey.previousKey=true")
    assert "proxy.cursorKey.previousKey: needs proxy.cursorKey.existingSecret" in stderr


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_read_only_root_file_systems_and_a_read_only_proxy_data_volume(helm, name):
    docs = render(helm, name)
    for pod_name, pod in _pods(docs):
        for container in _containers(pod):
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, f"{pod_name}/{container['name']}"
            if "redis" not in pod_name:
                assert any(m["mountPath"] == "/tmp" for m in container.get("volumeMounts", [])), pod_name
    proxy = dict(_pods(docs))["wj-windjoin-proxy"]["containers"][0]
    data = [m for m in proxy["volumeMounts"] if m["mountPath"] == "/data"]
    assert all(m.get("readOnly") for m in data)


def test_network_policies_deny_by_default_and_allow_the_needed_flows(helm):  # noqa: F811
    docs = render(helm, "controller")
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    deny = policies["wj-windjoin-default-deny"]
    assert deny["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "windjoin",
        "app.kubernetes.io/instance": "wj",
    }
    assert set(deny["policyTypes"]) == {"Ingress", "Egress"} and "ingress" not in deny and "egress" not in deny
    workloads = {
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        for d in docs
        if d["kind"] in WORKLOADS
    }
    covered = {p["podSelector"]["matchLabels"].get("app.kubernetes.io/component") for p in policies.values()}
    assert workloads | {"executor"} <= covered
    redis_in = policies["wj-windjoin-redis"]["ingress"]
    assert [r["ports"] for r in redis_in] == [[{"protocol": "TCP", "port": 6379}]]
    assert sorted(p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in redis_in[0]["from"]) == [
        "controller",
        "driver",
        "executor",
        "proxy",
    ]
    assert "egress" not in policies["wj-windjoin-redis"]  # Redis reaches nobody
    proxy_egress = policies["wj-windjoin-proxy"]["egress"]
    assert [p["port"] for rule in proxy_egress for p in rule["ports"]] == [6379]  # the proxy reaches Redis only
    driver_in = policies["wj-windjoin-driver"]["ingress"]
    assert {p["port"] for p in driver_in[0]["ports"]} == {7078, 7079}
    assert driver_in[1]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    secure = {d["metadata"]["name"]: d["spec"] for d in render(helm, "secure") if d["kind"] == "NetworkPolicy"}
    assert secure["wj-windjoin-proxy"]["ingress"][0]["from"] == _values("secure")["proxy"]["allowFrom"]
    assert "wj-windjoin-redis" not in secure  # an external Redis: reached at its own peers and port
    assert {"to": _values("secure")["redis"]["networkPeers"], "ports": [{"protocol": "TCP", "port": 6380}]} in secure[
        "wj-windjoin-proxy"
    ]["egress"]


def test_bad_security_values_are_refused(helm):  # noqa: F811
    done = run_helm(helm, "template", "wj", str(CHART), "--set", "kafka.security.protocol=SASL_SSL")
    assert done.returncode != 0 and "/kafka/security" in done.stderr, done.stderr
    done = run_helm(helm, "template", "wj", str(CHART), "--set", "kafka.security.protocol=TLS")
    assert done.returncode != 0 and "/kafka/security/protocol" in done.stderr, done.stderr
    done = run_helm(helm, "template", "wj", str(CHART), "--set", "proxy.auth.tokens[0].name=a")
    assert done.returncode != 0 and "/proxy/auth/tokens/0" in done.stderr, done.stderr


def _secret_names(pod: dict) -> set[str]:
    """Every Secret a pod spec references: volumes (projected ones too) and environment."""
    names = set()
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            names.add(volume["secret"]["secretName"])
        for source in volume.get("projected", {}).get("sources", []):
            if "secret" in source:
                names.add(source["secret"]["name"])
    for container in _containers(pod):
        for env in container.get("env", []):
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                names.add(ref["name"])
        names.update(e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e)
    return names


@pytest.mark.parametrize("name", ["default", "secure"])
def test_each_pod_mounts_only_its_own_redis_secret(helm, name):  # noqa: F811
    """A pod that could mount another component's Redis Secret could act as that component (the job steering
    itself as the controller, the proxy writing results): one Secret per user, each only where it belongs."""
    docs = render(helm, name)
    values = _values(name).get("redis", {}).get("auth", {}).get("existingSecrets", {})
    secret_of = {user: values.get(user) or f"wj-windjoin-redis-{user}" for user in ("job", "controller", "proxy")}
    secret_of["admin"] = "wj-windjoin-redis-admin"
    owner = {v: k for k, v in secret_of.items()}
    expected = {
        "wj-windjoin-driver": {"job"},
        "executor": {"job"},
        "wj-windjoin-controller": {"controller"},
        "wj-windjoin-proxy": {"proxy"},
        "wj-windjoin-redis": {"job", "controller", "proxy", "admin"},  # its ACL file's digests; admin loads
    }
    pods = dict(_pods(docs))
    assert {p for p in expected if p in pods} == set(pods)
    for pod_name, pod in pods.items():
        mounted = {owner[s] for s in _secret_names(pod) if s in owner}
        assert mounted == expected[pod_name], pod_name
    created = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    assert ("wj-windjoin-redis-admin" in created) == ("wj-windjoin-redis" in pods)  # only a bundled Redis has one
    if "wj-windjoin-redis" in pods:
        [redis_container] = pods["wj-windjoin-redis"]["containers"]
        admin_volume = next(v for v in pods["wj-windjoin-redis"]["volumes"] if v["name"] == "redis-admin")
        assert admin_volume["secret"]["secretName"] == "wj-windjoin-redis-admin"  # Redis itself: admin only
        assert {m["name"] for m in redis_container["volumeMounts"]} & {"redis-auth"} == set()


def test_the_bundled_redis_sets_its_busy_reply_threshold(helm):  # noqa: F811
    for extra in ((), ("--set", "redis.persistence.enabled=false")):
        docs = render(helm, "default", *extra)
        pod = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "wj-windjoin-redis")
        args = pod["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--busy-reply-threshold") + 1] == str(BUSY_REPLY_MS)


def test_the_charts_function_library_is_the_packages() -> None:
    """helm/windjoin/files/redis-functions.lua is a copy of `connectors.redis.functions.LIBRARY` (the chart cannot read
    the package): write it again from there when the library changes."""
    assert (CHART / "files" / "redis-functions.lua").read_text() == LIBRARY


def test_the_bundled_redis_loads_the_acl_users_and_the_function_library(helm, tmp_path):  # noqa: F811
    """The Redis pod's init script, run here with sh on the chart's own Secrets, writes an ACL file a real
    redis-server loads: the same rules as `operators.redis_acl`, each user logging in with its password; its
    postStart hook, run here too, loads the function library as admin, so the job can commit and the proxy read."""
    docs = render(helm, "default")
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "wj-windjoin-redis")
    pod = statefulset["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    [container] = pod["containers"]
    users = (*COMPONENTS, "admin")
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    passwords = {u: base64.b64decode(secrets[f"wj-windjoin-redis-{u}"]["data"]["password"]).decode() for u in users}
    assert len(set(passwords.values())) == 4
    auth_dir, acl_dir, admin_dir, lib_dir = (tmp_path / n for n in ("redis-auth", "acl", "redis-admin", "lib"))
    for folder in (auth_dir, acl_dir, admin_dir, lib_dir):
        folder.mkdir()
    for user, password in passwords.items():
        (auth_dir / user).write_text(password)
    (admin_dir / "password").write_text(passwords["admin"])
    functions = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "wj-windjoin-redis-functions"
    )
    (lib_dir / "windjoin.lua").write_text(functions["data"]["windjoin.lua"])
    assert functions["data"]["windjoin.lua"] == LIBRARY
    script = init["command"][2].replace("/etc/redis-auth", str(auth_dir)).replace("/acl/", f"{acl_dir}/")
    subprocess.run(["sh", "-ec", script], check=True, timeout=30)
    lines = (acl_dir / "users.acl").read_text().splitlines()
    assert lines[0] == "user default off resetkeys resetchannels -@all"
    for user, line in zip(users, lines[1:], strict=True):
        assert line.split(" resetkeys resetchannels ")[1] == component_rules(user)
    port = processes.free_port()
    argv = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    pid = processes.spawn([*argv, "--aclfile", str(acl_dir / "users.acl"), "--dir", str(tmp_path)], tmp_path / "log")
    try:
        url = f"redis://127.0.0.1:{port}/0"
        job = RedisSink(url, 10**9, auth=RedisAuth("windjoin-job", str(auth_dir / "job")))
        post_start = container["lifecycle"]["postStart"]["exec"]["command"]
        hook = post_start[2].replace("/etc/redis-admin", str(admin_dir)).replace("/etc/redis-functions", str(lib_dir))
        hook = hook.replace("redis-cli ", f"redis-cli -p {port} ")
        subprocess.run(["sh", "-ec", hook], check=True, timeout=60)
        for component in COMPONENTS:
            client = redis_client(url, RedisAuth(f"windjoin-{component}", str(auth_dir / component)))
            assert client.ping()  # logged in as its user (the default user is off)
            client.close()
        assert job.write(1, {"a": make_table("a", 1, PAIRS)}) == {"a": 1}  # FCALL of the loaded library
        proxy = redis_client(url, RedisAuth("windjoin-proxy", str(auth_dir / "proxy")))
        assert [row["batch_id"] for row in read_all(proxy, "a", "windjoin", 0, 100)] == [1]
        with pytest.raises(redis.AuthenticationError):
            redis_client(url, RedisAuth()).ping()
        with pytest.raises(redis.exceptions.NoPermissionError):  # admin replaces the library, never removes it
            redis_client(url, RedisAuth("windjoin-admin", str(admin_dir / "password"))).function_flush()
    finally:
        processes.stop(pid)
