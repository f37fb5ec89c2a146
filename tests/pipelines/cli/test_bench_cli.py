"""`windjoin bench`: lists the checkout's benchmarks, refuses unknown names, runs one by name with its options."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from windjoin.pipelines.cli.main import cli

ROOT = Path(__file__).resolve().parents[3]


def test_lists_the_benchmarks_the_docs_run_and_no_helper():
    listed = CliRunner().invoke(cli, ["bench"]).output.split()
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    documented = {name for doc in docs for name in re.findall(r"-m benchmarks\.([a-z0-9_]+)", doc.read_text())}
    assert documented and documented <= set(listed)
    assert not {"machine", "params_cli", "teardown", "flink_job", "__init__"} & set(listed)


def test_an_unknown_name_is_refused_with_the_accepted_ones():
    result = CliRunner().invoke(cli, ["bench", "kernel"])
    assert result.exit_code == 2
    assert "'kernel' is not a benchmark; accepted:" in result.output and "kernels" in result.output


def test_runs_a_benchmark_by_name_with_its_options(tmp_path):
    out = tmp_path / "pmjoin.json"
    done = subprocess.run(
        [sys.executable, "-m", "windjoin.pipelines", "bench", "pmjoin", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # found beside the package, not in the working directory
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["machine"]["cores"]
