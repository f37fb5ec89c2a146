"""`windjoin plan`: Example 1 as text and JSON, overrides, and a refused STATS file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from windjoin.pipelines.cli import cli

EXAMPLE1 = Path(__file__).resolve().parents[2] / "examples" / "pmjoin_example1.yaml"


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
