"""The benchmarks' load generator: `windjoin generate` in its own process, and what its report says of its pacing.

Paced load is encoded before its schedule starts (`--preencode`): beside a saturated Spark on 2 cores the generator
that encoded as it went fell 5-25 s behind its schedule, and its delays measured itself. A paced phase whose
generator still fell behind (`LAG_LIMIT_S` at the 99th percentile of its 50-ms slices) is void: `verdict` says so.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.teardown import stop_process, track

LAG_LIMIT_S = 0.2
__all__ = ["generate_cmd", "generator_lags", "run_generator", "schedule_start_ms", "stop_process", "verdict"]


def generate_cmd(spec_path: Path, bootstrap: str, params: Any, rate: float, seconds: float, pace: bool) -> list[str]:
    """`windjoin generate`: `rate` events/s over both streams (half each), b-model keys (`params.keys`,
    `params.skew`); paced load is encoded in advance."""
    return [
        sys.executable,
        "-m",
        "windjoin.pipelines.cli.produce",
        "generate",
        str(spec_path),
        "--rate",
        f"{rate / 2:.3f}",
        "--duration",
        f"{seconds:.3f}",
        "--keys",
        str(params.keys),
        "--skew",
        str(params.skew),
        *(["--pace", "--preencode"] if pace else ["--no-pace"]),
        "--bootstrap",
        bootstrap,
        "--topic-partitions",
        str(params.topic_partitions),
        "--no-progress",
    ]


def run_generator(cmd: list[str], log: Path) -> subprocess.Popen:
    """Start the generator, its output appended to `log`; `teardown.tear_down` stops it if it is still running."""
    with open(log, "ab") as out:
        return track(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT))


def schedule_start_ms(log: Path, proc: subprocess.Popen, timeout_s: float = 600.0) -> int:
    """When a pre-encoded schedule's time 0 is (epoch ms), as the generator announces it once encoded."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"schedule time 0 at (\d+) ms", log.read_text() if log.exists() else "")
        if found:
            return int(found.group(1))
        if proc.poll() is not None:
            raise RuntimeError(f"the generator ended ({proc.returncode}) before its schedule started, see {log}")
        time.sleep(0.1)
    raise TimeoutError(f"the generator did not start its schedule within {timeout_s:g} s, see {log}")


def generator_lags(log: Path) -> tuple[float, dict[str, float]]:
    """The generator's start-up lag (s) and its steady lag behind schedule (mean, p99 when reported, max)."""
    text = log.read_text() if log.exists() else ""
    first = re.search(r"first batch acknowledged ([\d.]+) s after it was due", text)
    steady = re.search(r"behind schedule by mean ([\d.-]+) s, (?:p99 ([\d.-]+) s, )?max ([\d.-]+) s", text)
    lags: dict[str, float] = {}
    if steady:
        lags = {"mean_s": float(steady.group(1)), "max_s": float(steady.group(3))}
        if steady.group(2) is not None:
            lags["p99_s"] = float(steady.group(2))
    return (float(first.group(1)) if first else 0.0), lags


def verdict(lags: dict[str, float]) -> dict[str, Any]:
    """Whether a paced phase measured the job: its generator kept its schedule within `LAG_LIMIT_S` (p99)."""
    p99 = lags.get("p99_s", lags.get("max_s"))
    if p99 is None:
        return {"void": True, "why": "no pacing report from the generator"}
    if p99 > LAG_LIMIT_S:
        return {"void": True, "why": f"the generator ran behind its schedule by p99 {p99:.2f} s > {LAG_LIMIT_S} s"}
    return {"void": False, "why": f"generator lag p99 {p99:.3f} s <= {LAG_LIMIT_S} s"}
