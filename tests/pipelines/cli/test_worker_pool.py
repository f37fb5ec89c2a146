"""Worker processes: answers come back, a failing worker's traceback and a killed worker's signal are errors (not
hangs), and every worker is gone after the pool, whether forked or started from the fork server."""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from pathlib import Path

import pytest

from windjoin.pipelines.cli.worker_pool import WorkerError, WorkerPool


def echo(worker: int, inbox, outbox, scale: int) -> None:
    """Answer (kind, tag, payload) with payload * scale; 'fail' raises, 'die' kills the worker (also mid-answer)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while (message := inbox.get()) is not None:
        kind, tag, payload = message
        if kind == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "die-mid-answer":  # dies while its answer, larger than a pipe holds, is half sent
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
        try:
            if kind == "fail":
                raise ValueError(f"bad payload {payload}")
            outbox.put((kind, tag, worker, payload * scale))
        except ValueError:
            outbox.put(("error", tag, worker, traceback.format_exc()))
            return


def _gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{p}").exists() and "Z" not in _state(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(Path(f"/proc/{p}").exists() and "Z" not in _state(p) for p in pids)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@pytest.fixture(params=["fork", "forkserver"])
def start(request):
    """Pools made by a single-threaded caller (forked) or by one with another thread (fork server)."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait) if request.param == "forkserver" else None
    if thread:
        thread.start()
    yield lambda workers: WorkerPool(echo, (10,), workers, __name__)
    stop.set()
    if thread:
        thread.join()


def test_answers_come_back_and_workers_end(start):
    with start(3) as pool:
        pids = [p.pid for p in pool.processes]
        for worker in range(3):
            pool.send(worker, ("x", 7, worker + 1))
        assert sorted(pool.receive() for _ in range(3)) == [("x", 7, w, (w + 1) * 10) for w in range(3)]
    assert _gone(pids)


def test_a_failure_is_an_error_with_its_traceback(start):
    with pytest.raises(WorkerError, match=r"(?s)worker 1 failed:.*ValueError: bad payload 5"), start(2) as pool:
        pids = [p.pid for p in pool.processes]
        pool.send(1, ("fail", 0, 5))
        pool.receive()
    assert _gone(pids)


def test_a_killed_worker_is_an_error_not_a_hang(start):
    with pytest.raises(WorkerError, match="was killed by signal SIGKILL"), start(2) as pool:
        pids = [p.pid for p in pool.processes]
        pool.send(0, ("die", 0, 0))
        pool.receive()
    assert _gone(pids)


def test_a_worker_killed_while_sending_is_an_error_not_a_hang(start):
    """The main process must not wait forever for the rest of a message its dead writer will never send."""
    errors: list[BaseException] = []

    def receive() -> None:
        try:
            with start(2) as pool:
                pool.send(0, ("die-mid-answer", 0, b"x" * 1_000_000))  # 10 MB answer
                time.sleep(1)  # the worker is dead before its answer is read
                pool.receive()
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            errors.append(err)

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    reader.join(30)
    assert not reader.is_alive(), "the pool waits forever for a dead worker's half-sent answer"
    assert len(errors) == 1 and isinstance(errors[0], WorkerError), errors
    assert "was killed by signal SIGKILL" in str(errors[0])
