"""`windjoin run` as a test's child: started in its own session, frozen, thawed and killed as a whole.

The whole job is the session, not just the process group the CLI leads: PySpark's worker daemon moves itself
into a process group of its own (`os.setpgid(0, 0)` in pyspark/daemon.py), so `killpg` of the CLI's group
alone leaves the Python workers running until they notice the JVM is gone. Every signal here goes to the
group and then to every other process of the session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO


def windjoin_cli() -> list[str]:
    """The `windjoin` command of this interpreter's environment."""
    script = Path(sys.executable).with_name("windjoin")
    return [str(script)] if script.exists() else [sys.executable, "-m", "windjoin.pipelines"]


def start_run(spec_path: Path, bootstrap: str, log: IO[bytes], *extra: str) -> subprocess.Popen:
    """`windjoin run SPEC --bootstrap ...` in a new session (so its process group and session id are its PID)."""
    return subprocess.Popen(
        [*windjoin_cli(), "run", str(spec_path), "--bootstrap", bootstrap, *extra],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stat(pid: int | str, task: str | None = None) -> list[str] | None:
    """The fields of /proc/PID/stat (or of one thread's) after the command name, or None if it is gone."""
    path = Path(f"/proc/{pid}/stat") if task is None else Path(f"/proc/{pid}/task/{task}/stat")
    try:
        stat = path.read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def session_members(sid: int) -> list[int]:
    """PIDs of the live (not zombie) processes of session `sid`, whatever their process group."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(entry.name)  # state, ppid, pgrp, session, ...
            if fields is not None and fields[0] != "Z" and int(fields[3]) == sid:
                members.append(int(entry.name))
    return members


def signal_job(proc: subprocess.Popen, sig: signal.Signals) -> None:
    """Send `sig` to the job's process group, then to every other process of its session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    for pid in session_members(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_job(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGKILL the whole job (driver, JVM, Python workers) and wait until none of it is left."""
    signal_job(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while session_members(proc.pid) and time.monotonic() < deadline:
        signal_job(proc, signal.SIGKILL)  # a child forked while the job was being killed
        time.sleep(0.05)
    left = session_members(proc.pid)
    assert not left, f"processes {left} of job {proc.pid} survived SIGKILL"


def _all_stopped(pid: int) -> bool:
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True  # gone
    states = [_stat(pid, t) for t in threads]
    return all(s is None or s[0] in "TtZ" for s in states)


def freeze_job(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGSTOP the whole job and wait until every thread of every process is stopped: nothing it does after
    this returns, so what the test then sees on disk or in Redis is where the job stands."""
    deadline = time.monotonic() + timeout_s
    while True:
        signal_job(proc, signal.SIGSTOP)
        running = [pid for pid in session_members(proc.pid) if not _all_stopped(pid)]
        if not running:
            return
        assert time.monotonic() < deadline, f"processes {running} of job {proc.pid} did not stop"
        time.sleep(0.0005)


def thaw_job(proc: subprocess.Popen) -> None:
    """SIGCONT the whole job (after `freeze_job`)."""
    signal_job(proc, signal.SIGCONT)


def spark_log(checkpoint: Path, kind: str) -> int:
    """The largest batch id in the checkpoint's `offsets` (planned) or `commits` (done) log; -1 if none."""
    folder = checkpoint / kind
    ids = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    return max(ids, default=-1)


def wait_until(proc: subprocess.Popen, done: Callable[[], bool], deadline: float, what: str, poll_s: float) -> None:
    """Poll `done` until it holds; AssertionError when the job exits first or `deadline` (monotonic) passes."""
    while not done():
        assert proc.poll() is None, f"the job exited with {proc.returncode} while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)


def wait_for_commit(proc: subprocess.Popen, checkpoint: Path, above: int, deadline: float) -> None:
    """Wait until Spark committed a batch past `above`."""
    wait_until(proc, lambda: spark_log(checkpoint, "commits") > above, deadline, f"a batch past {above}", 0.005)
