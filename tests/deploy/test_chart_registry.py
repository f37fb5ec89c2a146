"""The chart's schema registry (kafka.schemaRegistry), offline: the spec names the registry and the mounted files, only
the job's driver and executors mount its Secrets and may reach it, and a render without where it is fails naming
the key."""

from __future__ import annotations

import pytest
import yaml

from tests.support.chart import CHART, REQUIRED_VALUES, render, run_helm
from windjoin.operators.spec import parse_spec

PEERS = [{"ipBlock": {"cidr": "10.40.0.7/32"}}]
REGISTRY = [
    "--set",
    "kafka.schemaRegistry.url=https://registry.example:8081",
    "--set",
    "kafka.schemaRegistry.username=windjoin",
    "--set",
    "kafka.schemaRegistry.passwordSecret=registry-pw",
    "--set",
    "kafka.schemaRegistry.caSecret=registry-ca",
    "--set-json",
    f"kafka.schemaRegistry.networkPeers={PEERS}".replace("'", '"'),
    "--set",
    "controller.enabled=true",
]


def _pods(docs: list[dict]) -> dict[str, dict]:
    """Pod specs by component: the workloads' and the executors' pod template in the spec ConfigMap."""
    pods = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            labels = doc["spec"]["template"]["metadata"]["labels"]
            pods[labels["app.kubernetes.io/component"]] = doc["spec"]["template"]["spec"]
        elif doc["kind"] == "ConfigMap" and "executor-pod-template.yaml" in doc.get("data", {}):
            pods["executor"] = yaml.safe_load(doc["data"]["executor-pod-template.yaml"])["spec"]
    return pods


def _secrets(pod: dict) -> set[str]:
    return {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}


def test_the_spec_names_the_registry_and_the_mounted_files(helm):
    docs = render(helm, "default", *REGISTRY)
    [config] = [d for d in docs if d["kind"] == "ConfigMap" and "spec.yaml" in d.get("data", {})]
    spec = yaml.safe_load(config["data"]["spec.yaml"])
    assert spec["schema_registry"] == {
        "url": "https://registry.example:8081",
        "username": "windjoin",
        "password_file": "/var/run/secrets/windjoin/schema-registry/password",
        "ca_file": "/var/run/secrets/windjoin/schema-registry-ca/ca.crt",
    }
    parse_spec(spec)  # the job accepts it
    pods = _pods(docs)
    for component in ("driver", "executor"):
        mounts = {m["mountPath"] for m in pods[component]["containers"][0]["volumeMounts"]}
        assert {"/var/run/secrets/windjoin/schema-registry", "/var/run/secrets/windjoin/schema-registry-ca"} <= mounts
        assert {"registry-pw", "registry-ca"} <= _secrets(pods[component]), component
    for component in ("controller", "proxy", "redis"):
        assert not {"registry-pw", "registry-ca"} & _secrets(pods[component]), component


def test_only_the_driver_and_executors_may_reach_the_registry(helm):
    docs = render(helm, "default", *REGISTRY)
    reach = {}
    for doc in docs:
        if doc["kind"] == "NetworkPolicy":
            component = doc["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component")
            rules = doc["spec"].get("egress", [])
            reach[component] = any(
                r.get("to") == PEERS and r["ports"] == [{"protocol": "TCP", "port": 8081}] for r in rules
            )
    assert reach == {None: False, "driver": True, "executor": True, "proxy": False, "controller": False, "redis": False}


def test_without_the_registry_nothing_of_it_is_rendered(helm):
    text = "\n".join(yaml.safe_dump(d) for d in render(helm, "default"))
    assert "schema_registry" not in text and "schema-registry" not in text


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--set", "kafka.schemaRegistry.url=https://registry:8081"], "kafka.schemaRegistry.networkPeers is required"),
        (["--set", "kafka.schemaRegistry.url=https://u:p@registry:8081"], "/kafka/schemaRegistry/url"),
        (
            ["--set", "kafka.schemaRegistry.url=https://registry:8081", "--set", "kafka.schemaRegistry.username=u"],
            "/kafka/schemaRegistry/passwordSecret",
        ),
    ],
)
def test_a_registry_without_what_it_needs_is_refused_naming_the_key(helm, extra, said):
    done = run_helm(helm, "template", "wj", str(CHART), "-f", str(REQUIRED_VALUES), *extra)
    assert done.returncode != 0 and said in done.stderr, done.stderr
