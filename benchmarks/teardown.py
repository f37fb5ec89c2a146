"""The end of a benchmark run: stop what it started, whatever happened, so the next run starts clean."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

_CHILDREN: list[subprocess.Popen] = []  # processes a benchmark started (generators): stopped by tear_down


def track(proc: subprocess.Popen) -> subprocess.Popen:
    """Remember a process this run started, so that `tear_down` stops it if it is still running."""
    _CHILDREN[:] = [p for p in _CHILDREN if p.poll() is None]
    _CHILDREN.append(proc)
    return proc


def stop_process(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Terminate a process we started, by its PID (kill it after `grace_s`), and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop_children(grace_s: float = 10.0) -> None:
    """Stop every tracked process still running."""
    while _CHILDREN:
        stop_process(_CHILDREN.pop(), grace_s)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that a benchmark stopped by `kill` runs its `finally` (tear_down) too."""
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(128 + signal.SIGTERM))


def tear_down(spark: Any, state_dir: Path, scratch: Path | None) -> None:
    """Stop tracked child processes, every streaming query and the session, the embedded services, and remove
    `scratch` (if any). Each step runs even if an earlier one failed."""
    from windjoin.connectors.local import services

    try:
        stop_children()
        if spark is not None:
            for query in spark.streams.active:
                query.stop()
            spark.stop()
    finally:
        services.down(state_dir)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
