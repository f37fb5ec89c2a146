"""Facts about the machine a benchmark ran on, and its memory read bandwidth measured in the same run."""

from __future__ import annotations

import os
import platform
import time
from datetime import UTC, datetime

import numpy as np


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_read_bandwidth_gbs(gib: float = 1.0, repeats: int = 3) -> float:
    """Best of a few sums over a large float64 array: the single-core streaming read rate, GB/s."""
    data = np.ones(int(gib * 2**30) // 8)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return data.nbytes / best / 1e9


def machine_facts() -> dict[str, object]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cores_used": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
    }


def pin_to_one_core() -> None:
    """Run on a single core, so rates are per core."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
