"""benchmarks.flink_peer --quick: windjoin and Flink's interval, window (TUMBLE, HOP) and temporal joins count the
brute-force oracles' pairs.

The quick run's timestamps are coarse (multiples of 50 ms, windows of 200-300 ms), so many pairs sit exactly
at |R.ts - S.ts| = W or at equal timestamps: the test checks both systems agree with the oracle there too
(windjoin's |dts| <= W against Flink's inclusive BETWEEN).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.benchmark_runs import run_benchmark
from tests.first_use import SETUP_FLINK, installed
from tests.support.asof_oracle import oracle_asof
from tests.support.window_oracle import oracle_windowed
from windjoin.operators.testing.oracle import oracle_join

ROOT = Path(__file__).resolve().parent.parent
FLINK_PYTHON = ROOT / ".venv-flink" / "bin" / "python"


@pytest.fixture(scope="session")
def pyflink() -> Path:
    """PyFlink in .venv-flink, installed on first use so the test runs rather than skips. The script itself
    checks the pinned version (a second of pip metadata when installed), so a half-made venv is repaired."""
    installed(SETUP_FLINK)
    return FLINK_PYTHON


@pytest.mark.slow
def test_quick_run_pair_counts_equal_the_oracle(pyflink, tmp_path):
    out, data = tmp_path / "flink.json", tmp_path / "data"
    result, _ = run_benchmark("flink_peer", out, "--quick", "--data-dir", str(data), timeout=600)
    assert out.with_suffix(".png").exists()
    assert result["machine"]["cpu_model"] and len(result["load_before"]) == 3
    for name in ("equi", "band"):
        workload = result["workloads"][name]
        events = [orjson.loads(line) for line in (data / f"{name}.jsonl").open("rb")]
        assert len(events) == workload["events"]
        expected, late = oracle_join(workload["spec"], events)
        assert not late
        window = workload["spec"]["window"]["size_ms"]
        deltas = {abs(left["ts"] - right["ts"]) for _, left, right in expected}
        assert {0, window} <= deltas, "the quick workload should hold pairs at equal timestamps and at |dts| = W"
        systems = {"windjoin join_file", "windjoin kernel", "flink p1", "flink p2"}
        assert {key: workload["pairs"][key] for key in systems} == dict.fromkeys(systems, len(expected))
        for flink in workload["flink"].values():
            assert flink["tuples_per_s"] > 0 and flink["full"]["net_s"] > 0
        assert workload["windjoin"]["join_file"]["tuples_per_s"] > 0
    events = [orjson.loads(line) for line in (data / "equi.jsonl").open("rb")]
    for name, oracle in (("tumble", oracle_windowed), ("hop", oracle_windowed), ("asof", oracle_asof)):
        workload = result["workloads"][name]  # the equi file joined in windows, or as of each R tuple's time
        expected, late = oracle(workload["spec"], events)
        assert not late
        systems = {"reference", "windjoin join_file", "windjoin kernel", "flink p1", "flink p2"}
        assert {key: workload["pairs"][key] for key in systems} == dict.fromkeys(systems, sum(expected.values()))
