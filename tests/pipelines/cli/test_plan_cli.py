"""`windjoin plan`: Example 1 as text and JSON, overrides, and a refused STATS file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from windjoin.pipelines.cli.main import cli

EXAMPLE1 = Path(__file__).resolve().parents[3] / "examples" / "pmjoin_example1.yaml"


def test_plan_prints_the_pmjoin_plan_of_example1():
    result = CliRunner().invoke(cli, ["plan", str(EXAMPLE1)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("communication cost: 0.0696 B/s")
    assert "unpartitioned (Algorithm 1): 54.0316" in result.output and "best centralized: 100.1" in result.output
    assert "substream {a}: 0.036 B/s" in result.output
    assert "S2 @ n2  shipped n2 -> n1: 0.03 B/s" in result.output


def test_plan_json_lists_substreams_with_their_plans_and_shipments():
    result = CliRunner().invoke(cli, ["plan", str(EXAMPLE1), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["cost_bytes_per_s"] == pytest.approx(0.0696)
    assert out["baselines_bytes_per_s"]["optimal_unpartitioned"] == pytest.approx(54.0316)
    plan = out["plan"]
    assert plan["op"] == "pmjoin" and [s["values"] for s in plan["substreams"]] == [["a"], ["b"], ["c"]]
    b = plan["substreams"][1]["plan"]
    assert (b["op"], b["node"]) == ("mjoin", "n2")
    inner = b["inputs"][0]
    assert inner["shipped"] == {"from": "n1", "to": "n2", "bytes_per_s": pytest.approx(0.002)}
    assert inner["inputs"][0]["streams"] == ["S3"] and inner["inputs"][0]["shipped"]["to"] == "n1"


def test_method_override_without_partitioning_gives_the_distributed_plan():
    result = CliRunner().invoke(cli, ["plan", str(EXAMPLE1), "--json", "--method", "none"])
    assert json.loads(result.output)["cost_bytes_per_s"] == pytest.approx(54.0316)


def test_bad_stats_file_exits_nonzero_naming_the_key(tmp_path):
    bad = tmp_path / "stats.yaml"
    bad.write_text(EXAMPLE1.read_text().replace("window: {time: 0.5}", "window: {time: -1}", 1))
    result = CliRunner().invoke(cli, ["plan", str(bad)])
    assert result.exit_code != 0
    assert "streams.S1.window.time: Input should be greater than 0" in result.output


def test_the_installed_command_runs():
    proc = subprocess.run(
        [sys.executable, "-m", "windjoin.pipelines", "plan", str(EXAMPLE1)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "communication cost: 0.0696" in proc.stdout


MULTI = """
streams:
  A: {node: x, rate: 50, window: {time: 0.05}, attributes: {k: {histogram: [{from: 1, to: 4, rate: 1}]}}}
  B:
    node: y
    rate: 40
    window: {time: 0.05}
    attributes:
      k: {substreams: {1: 0.05, 2: 0.05, 3: 0.05, 4: 0.85}}
      m: {substreams: {1: 0.85, 2: 0.05, 3: 0.05, 4: 0.05}}
  C: {node: z, rate: 60, window: {time: 0.05}, attributes: {m: {substreams: {1: 0.05, 2: 0.85, 3: 0.05, 4: 0.05}}}}
  D: {node: w, rate: 30, window: {time: 0.05}, attributes: {m: {substreams: {1: 0.05, 2: 0.05, 3: 0.85, 4: 0.05}}}}
  E: {node: w, rate: 5, window: {count: 10}}
joins:
  - equal: [A.k, B.k]
  - equal: [B.m, C.m, D.m]
  - equal: [D.id, E.id]
    selectivity: 0.01
planner:
  partitioning: {method: rate, partitions: 2}
"""


def test_multi_attribute_stats_plan_as_json(tmp_path):
    stats = tmp_path / "multi.yaml"
    stats.write_text(MULTI)
    result = CliRunner().invoke(cli, ["plan", str(stats), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["cost_bytes_per_s"] <= out["baselines_bytes_per_s"]["unpartitioned_heuristic"] + 1e-9

    def streams_of(node):
        if node["op"] == "pmjoin":
            return [s for child in node["inputs"] for s in streams_of(child)]
        if node["op"] in ("stream", "input") or "inputs" not in node:
            return node["streams"]
        return [s for child in node["inputs"] for s in streams_of(child)]

    assert sorted(streams_of(out["plan"])) == ["A", "B", "C", "D", "E"]
    text = CliRunner().invoke(cli, ["plan", str(stats)])
    assert text.exit_code == 0 and "communication cost:" in text.output
