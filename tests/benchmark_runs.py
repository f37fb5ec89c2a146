"""Running a benchmark the way a user does, for the benchmarks' smoke tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(name: str, out: Path, *args: str, timeout: float = 300) -> tuple[dict[str, Any], str]:
    """`python -m benchmarks.NAME ARGS --out OUT` from the checkout; fails with the tail of its output unless it
    exits 0. Returns the results file it wrote and what it printed. Past `timeout` the benchmark gets SIGTERM, so
    that it stops its broker, Redis and generators (a SIGKILL would leave them running), then SIGKILL."""
    with subprocess.Popen(
        [sys.executable, "-m", f"benchmarks.{name}", *args, "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                stdout, stderr = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
            tail = stdout[-3000:] + stderr[-3000:]
            raise AssertionError(f"benchmark {name} still running after {timeout:g} s:\n{tail}") from None
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    return json.loads(Path(out).read_text()), stdout
