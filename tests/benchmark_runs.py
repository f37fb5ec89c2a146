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
    exits 0. Returns the results file it wrote and what it printed."""
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(Path(out).read_text()), proc.stdout
