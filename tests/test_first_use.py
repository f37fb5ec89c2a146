"""install_once: a tool's script runs once, under a lock, even when several test runs ask at the same time."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tests.first_use import install_once


def _install(script: Path, marker: Path, lock_dir: Path) -> None:
    install_once(script, marker.exists, lock_dir)


def test_concurrent_runs_install_once_and_later_runs_not_at_all(tmp_path):
    marker, runs = tmp_path / "installed", tmp_path / "runs"
    script = tmp_path / "setup_tool.sh"
    script.write_text(f"echo run >> {runs}\nsleep 0.3\ntouch {marker}\n")
    procs = [multiprocessing.Process(target=_install, args=(script, marker, tmp_path / "locks")) for _ in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=30)
    assert [proc.exitcode for proc in procs] == [0, 0, 0]
    assert runs.read_text().splitlines() == ["run"]
    install_once(script, marker.exists, tmp_path / "locks")
    assert runs.read_text().splitlines() == ["run"]
    assert (tmp_path / "locks" / "setup_tool.lock").exists()


def test_a_failing_script_fails_the_fixture_with_its_output(tmp_path):
    script = tmp_path / "setup_tool.sh"
    script.write_text("echo 'no java on PATH' >&2\nexit 3\n")
    with pytest.raises(AssertionError, match="no java on PATH"):
        install_once(script, lambda: False, tmp_path / "locks")
