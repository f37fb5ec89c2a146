"""Tools a test needs beyond scripts/setup.sh, installed by the project's own script on first use.

So that `.venv/bin/pytest` after `bash scripts/setup.sh` runs every test CI runs: the fixture that needs a tool
runs its script (idempotent) instead of skipping. An exclusive lock file under .tools/ makes concurrent test runs
wait for one installer rather than race in the same directory.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_IMAGE = ROOT / "scripts" / "build_image.sh"  # podman (installed when missing) and the image
SETUP_FLINK = ROOT / "scripts" / "setup_flink.sh"  # PyFlink in .venv-flink, for the Flink peer
FETCH_JARS = ROOT / "scripts" / "fetch_jars.sh"  # Java jars from Maven Central (Apache Kafka's broker)


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


def podman_installable() -> bool:
    """podman is there, or build_image.sh can install it (root with apt-get)."""
    return shutil.which("podman") is not None or (os.geteuid() == 0 and shutil.which("apt-get") is not None)


class BackgroundInstall:
    """`install_once` started in a thread while other tests run (a slow build that waits mostly on I/O), joined
    by the fixture that needs it; its failure is raised there, not in the thread."""

    def __init__(self, script: Path) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(script,), daemon=True, name=script.stem)
        self._thread.start()

    def _run(self, script: Path) -> None:
        try:
            install_once(script, lambda: False)
        except BaseException as err:  # raised in the fixture's thread by wait()
            self._error = err

    def join(self) -> None:
        self._thread.join()

    def wait(self) -> None:
        self.join()
        if self._error is not None:
            raise self._error


_background: dict[Path, BackgroundInstall] = {}


def start_in_background(script: Path) -> None:
    """Start `bash SCRIPT` (an idempotent installer) now, for a fixture that `installed` it later."""
    if script not in _background:
        _background[script] = BackgroundInstall(script)


def installed(script: Path) -> None:
    """The installer's run of this session: the background one if started, else one now."""
    if script in _background:
        _background[script].wait()
    else:
        install_once(script, lambda: False)


def join_background() -> None:
    """Wait for every background installer: one left running outside any session would hold no lock, and the
    next session would start another."""
    for install in _background.values():
        install.join()
