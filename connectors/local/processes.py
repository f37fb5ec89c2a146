"""Detached child processes owned by PID: spawn in a new process group, probe, stop, read log tails.

Kept apart from the service definitions so that `down` and `status` can act on a PID recorded by another
process (the CLI exits after `up`; a later `down` runs in a fresh interpreter).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# Popen objects of children started by this interpreter, kept so they are reaped (no zombies, no
# "still running" ResourceWarning when the object would otherwise be garbage-collected).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def spawn(argv: Sequence[str], log_path: Path, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> int:
    """Start `argv` in its own session/process group, stdout+stderr to `log_path`; return its PID.

    A new session means a Ctrl-C in the starting terminal does not reach the service, and the whole
    group can be signalled on stop.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            list(argv),
            stdin=devnull,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def _reap(pid: int) -> int | None:
    """Collect the exit status if `pid` is our own child and has exited; return its code, else None."""
    proc = _CHILDREN.get(pid)
    if proc is not None:
        code = proc.poll()
        if code is not None:
            _CHILDREN.pop(pid, None)
        return code
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None


def exit_code(pid: int) -> int | None:
    """Exit code of a child of this interpreter that has exited, or None (still running / not ours)."""
    return _reap(pid)


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or None if gone.

    Recorded with the PID so that a later `down` never signals an unrelated process that reused the PID.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Format: "pid (comm) S ..."; comm may contain spaces or parentheses, so split after the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[19])


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # Format: "pid (comm) S ..."; comm may contain spaces or parentheses, so split after the last ')'.
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def is_alive(pid: int, expect_start: int | None = None) -> bool:
    """True when `pid` runs (not a zombie) and, if given, started at `expect_start` (see start_ticks)."""
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _is_zombie(pid):
        return False
    return expect_start is None or start_ticks(pid) == expect_start


def stop(pid: int, grace_s: float = 10.0, expect_start: int | None = None) -> bool:
    """SIGTERM the process group led by `pid`, SIGKILL it after `grace_s`; True if it was running.

    Only signals a group whose leader is `pid` (we started it with a new session), otherwise the PID
    alone, so a reused PID in someone else's group is never group-killed.
    """
    if not is_alive(pid, expect_start):
        return False

    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    send(signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and is_alive(pid):
        time.sleep(0.05)
    return True


def free_port(host: str = "127.0.0.1", avoid: int | None = None) -> int:
    """A TCP port that was free a moment ago (the kernel's pick), never `avoid` (a port just handed out for the same
    process); callers retry if it is taken meanwhile."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port != avoid:
            return port


def port_free(host: str, port: int) -> bool:
    """True when (host, port) can be bound now (nothing listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT does not count
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True when a TCP connect to (host, port) succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 20, since: int = 0, max_bytes: int = 64 * 1024) -> str:
    """The last `lines` lines of a log file written after byte offset `since` ("" if there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(since, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])
