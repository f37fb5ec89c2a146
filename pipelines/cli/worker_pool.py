"""Worker processes with one inbox each and one shared outbox, whose death or failure is an error, never a hang.

The main process decides how much is in flight, so the queues stay bounded by what it sends. A worker that
dies is noticed within a poll interval; one that fails sends its traceback. Workers ignore Ctrl-C and are
stopped by the main process (on any exception there, KeyboardInterrupt included), or stop themselves when it
is gone. A single-threaded caller is forked (instant); a caller with threads gets processes from a fork server
that has imported the worker's module once, since forking a thread's held lock can hang the child.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

ERROR = "error"  # the kind of answer a failing worker sends: (ERROR, tag, worker, traceback)
POLL_S = 0.5
STOP_S = 5.0


class WorkerError(RuntimeError):
    """A worker process failed (the message holds its traceback) or died (its exit code or signal)."""


class WorkerPool:
    """`workers` processes running `target(worker, inbox, outbox, *args)`; use it as a context manager."""

    def __init__(self, target: Callable[..., None], args: tuple, workers: int, preload: str) -> None:
        if threading.active_count() == 1:
            ctx = mp.get_context("fork")
            sys.stdout.flush()  # a forked child flushes its copy of the standard streams when it ends
            sys.stderr.flush()
        else:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload([preload])
        self.outbox = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(workers)]
        self.processes = [
            ctx.Process(target=target, args=(j, inbox, self.outbox, *args), name=f"join-file worker {j}", daemon=True)
            for j, inbox in enumerate(self.inboxes)
        ]
        for inbox in self.inboxes:
            inbox.cancel_join_thread()  # never wait at exit to flush into a dead worker's pipe
        try:
            for process in self.processes:
                process.start()
        except BaseException:
            self.terminate()
            raise

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if kind is None:
            self.close()
        else:
            self.terminate()

    def send(self, worker: int, message: Any) -> None:
        self.inboxes[worker].put(message)

    def receive(self) -> tuple:
        """The next answer of any worker; WorkerError if one failed or died."""
        while True:
            try:
                answer = self.outbox.get(timeout=POLL_S)
            except queue.Empty:
                self._check_alive()
                continue
            if answer[0] == ERROR:
                raise WorkerError(f"join-file worker {answer[2]} failed:\n{answer[3]}")
            return answer

    def _check_alive(self) -> None:
        for j, process in enumerate(self.processes):
            code = process.exitcode
            if code is None:
                continue
            try:  # a failure's traceback may be on its way
                answer = self.outbox.get(timeout=POLL_S)
            except queue.Empty:
                answer = None
            if answer is not None and answer[0] == ERROR:
                raise WorkerError(f"join-file worker {answer[2]} failed:\n{answer[3]}")
            how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
            raise WorkerError(f"join-file worker {j} (pid {process.pid}) {how} before finishing its work")

    def close(self) -> None:
        """Ask every worker to stop, and wait for them (terminating any that does not)."""
        for inbox in self.inboxes:
            inbox.put(None)
        for process in self.processes:
            process.join(STOP_S)
        self.terminate()

    def terminate(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(STOP_S)
            if process.is_alive():
                process.kill()
                process.join()
        self.outbox.cancel_join_thread()
