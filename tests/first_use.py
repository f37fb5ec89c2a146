"""Tools a test needs beyond scripts/setup.sh, installed by the project's own script on first use.

So that `.venv/bin/pytest` after `bash scripts/setup.sh` runs every test CI runs: the fixture that needs a tool
runs its script (idempotent) instead of skipping. An exclusive lock file under .tools/ makes concurrent test runs
wait for one installer rather than race in the same directory.
"""

from __future__ import annotations

import fcntl
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def install_once(script: Path, ready: Callable[[], bool], lock_dir: Path = ROOT / ".tools") -> None:
    """Run `bash SCRIPT` under the lock `LOCK_DIR/<script stem>.lock` unless `ready()` holds (checked again once
    the lock is held: another run may have installed meanwhile); fails with the script's output's tail."""
    if ready():
        return
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / f"{script.stem}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready():
            return
        done = subprocess.run(["bash", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{script.name} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"


class BackgroundInstall:
    """`install_once` started in a thread while other tests run (a slow build that waits mostly on I/O), joined
    by the fixture that needs it; its failure is raised there, not in the thread."""

    def __init__(self, script: Path, ready: Callable[[], bool]) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(script, ready), daemon=True, name=script.stem)
        self._thread.start()

    def _run(self, script: Path, ready: Callable[[], bool]) -> None:
        try:
            install_once(script, ready)
        except BaseException as err:  # raised in the fixture's thread by wait()
            self._error = err

    def join(self) -> None:
        self._thread.join()

    def wait(self) -> None:
        self.join()
        if self._error is not None:
            raise self._error
