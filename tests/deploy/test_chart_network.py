"""The chart's NetworkPolicies, offline: every egress rule names its destinations (no rule with ports and no `to:`),
nothing is open to 0.0.0.0/0 by default, the API server is reached only at networkPolicy.apiServerCIDRs, DNS only
at the cluster DNS pods, and a render without the destinations the chart cannot know fails naming the key."""

from __future__ import annotations

import pytest
import yaml

from tests.support.chart import CHART, REQUIRED_VALUES, VALUE_SETS, refusal, render, run_helm

ANYWHERE = {"0.0.0.0/0", "::/0"}
KUBE_DNS = [
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
]


def _values(name: str) -> dict:
    return yaml.safe_load(VALUE_SETS[name].read_text())


def _policies(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}


def _component(policy: dict) -> str | None:
    return policy["podSelector"]["matchLabels"].get("app.kubernetes.io/component")


def _selector(component: str) -> dict:
    return {
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "windjoin",
                "app.kubernetes.io/instance": "wj",
                "app.kubernetes.io/component": component,
            }
        }
    }


def _allowed_peers(values: dict) -> dict[str, list[dict]]:
    """Every destination a windjoin pod may be allowed to reach with these values, by what it is."""
    kafka, redis = values.get("kafka", {}), values.get("redis", {})
    if kafka.get("strimzi", {}).get("enabled"):
        kafka_peers = [{"podSelector": {"matchLabels": {"strimzi.io/cluster": "wj-windjoin-kafka"}}}]
    else:
        kafka_peers = kafka["networkPeers"]
    redis_peers = redis["networkPeers"] if redis.get("bundled") is False else [_selector("redis")]
    return {
        "dns": KUBE_DNS,
        "api": [{"ipBlock": {"cidr": c}} for c in values.get("networkPolicy", {}).get("apiServerCIDRs", [])],
        "kafka": kafka_peers,
        "redis": redis_peers,
        "objectStore": values.get("storage", {}).get("objectStore", {}).get("networkPeers", []),
        "spark": [_selector("driver"), _selector("executor")],
    }


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_egress_rule_names_its_destinations_and_none_is_anywhere(helm, name):
    values = _values(name)
    allowed = _allowed_peers(values)
    known = [p for peers in allowed.values() for p in peers]
    policies = _policies(render(helm, name))
    assert policies, name
    for policy_name, policy in policies.items():
        for rule in policy.get("egress", []):
            assert rule.get("to"), f"{name}: {policy_name} has an egress rule without `to:` {rule}"
            for peer in rule["to"]:
                assert peer.get("ipBlock", {}).get("cidr") not in ANYWHERE, f"{name}: {policy_name} {peer}"
                assert peer in known, f"{name}: {policy_name} reaches {peer}, not a destination the values name"
        for rule in policy.get("ingress", []):
            for peer in rule.get("from", []):
                assert peer.get("ipBlock", {}).get("cidr") not in ANYWHERE, f"{name}: {policy_name} {peer}"


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_the_api_server_is_reached_only_at_the_configured_cidrs(helm, name):
    values = _values(name)
    api = _allowed_peers(values)["api"]
    policies = _policies(render(helm, name))
    api_ports = [{"protocol": "TCP", "port": p} for p in (443, 6443)]
    reaching = {}
    for policy in policies.values():
        for rule in policy.get("egress", []):
            if any(peer in api for peer in rule["to"]):
                assert rule["to"] == api and rule["ports"] == api_ports, rule
                reaching[_component(policy)] = rule
    local = values.get("join", {}).get("sparkMaster", "k8s://").startswith("local")
    controller = values.get("controller", {})
    election = controller.get("enabled") and controller.get("leaderElection", {}).get("enabled", True)
    expected = ({"driver"} if not local else set()) | ({"controller"} if election else set())
    assert set(reaching) == expected, name


def test_dns_is_the_cluster_dns_pods_only(helm):
    dns = _policies(render(helm, "default"))["wj-windjoin-dns"]
    assert dns["egress"] == [
        {"to": KUBE_DNS, "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    ]


def test_kafka_and_redis_default_to_the_releases_pods_or_the_given_peers(helm):
    policies = _policies(render(helm, "default"))
    kafka = _values("default")["kafka"]["networkPeers"]
    for component in ("driver", "executor"):
        egress = policies[f"wj-windjoin-{component}"]["egress"]
        assert {"to": [_selector("redis")], "ports": [{"protocol": "TCP", "port": 6379}]} in egress
        assert {"to": kafka, "ports": [{"protocol": "TCP", "port": 9092}]} in egress
    strimzi = _policies(render(helm, "strimzi"))["wj-windjoin-driver"]["egress"]
    assert {
        "to": [{"podSelector": {"matchLabels": {"strimzi.io/cluster": "wj-windjoin-kafka"}}}],
        "ports": [{"protocol": "TCP", "port": 9092}],
    } in strimzi
    store = _policies(render(helm, "autoscaling"))["wj-windjoin-proxy"]["egress"]
    assert {"to": [{"ipBlock": {"cidr": "52.216.0.0/15"}}], "ports": [{"protocol": "TCP", "port": 443}]} in store


MISSING = [
    # (values beyond the chart's defaults, the key the failure must name)
    ([], "kafka.networkPeers is required"),
    (
        ["--set-json", 'kafka.networkPeers=[{"ipBlock":{"cidr":"10.20.0.0/16"}}]'],
        "networkPolicy.apiServerCIDRs is required",
    ),
    (
        ["-f", str(REQUIRED_VALUES), "--set", "redis.bundled=false", "--set", "redis.url=redis://r.example:6379/0"],
        "redis.networkPeers is required",
    ),
    (
        ["-f", str(REQUIRED_VALUES), "--set", "storage.type=objectStore"]
        + ["--set", "storage.objectStore.checkpointUrl=s3a://b/c", "--set", "storage.objectStore.parquetUrl=s3://b/p"],
        "storage.objectStore.networkPeers is required",
    ),
]


@pytest.mark.parametrize(("args", "message"), MISSING, ids=[m.split()[0] for _, m in MISSING])
def test_a_destination_the_chart_cannot_know_is_required(helm, args, message):
    done = run_helm(helm, "template", "wj", str(CHART), *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    done = run_helm(helm, "template", "wj", str(CHART), *args, "--set", "networkPolicy.enabled=false")
    assert done.returncode == 0, done.stderr  # without NetworkPolicies nothing is asked


def test_a_malformed_api_server_cidr_is_refused_naming_the_key(helm):
    stderr = refusal(helm, REQUIRED_VALUES, "--set-json", 'networkPolicy.apiServerCIDRs=["10.0.0.1"]')
    assert "/networkPolicy/apiServerCIDRs/0" in stderr, stderr


@pytest.mark.parametrize("peers", ["[]", "[{}]"])
def test_prometheus_from_cannot_open_the_metrics_ports_to_every_source(helm, peers):
    """`prometheusFrom: []` rendered `from: []`, which admits every source (issue 47); an empty peer is as open."""
    stderr = refusal(helm, REQUIRED_VALUES, "--set-json", f"networkPolicy.prometheusFrom={peers}")
    assert "/networkPolicy/prometheusFrom" in stderr, stderr
