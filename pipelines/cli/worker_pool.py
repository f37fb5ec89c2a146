"""Worker processes with one inbox and one answer pipe each, whose death or failure is an error, never a hang.

The main process decides how much is in flight, so the queues stay bounded by what it sends. Each worker is the
only writer of its answer pipe (the main process and the later workers close their copies), so a worker that
dies, even halfway through an answer, ends its pipe and the main process hears at once; one that fails sends its
traceback. (A shared queue left the main process waiting forever for the rest of a dead worker's half-sent
answer.) Workers send from a thread, so they go on working while the main process is busy. Workers ignore Ctrl-C
and are stopped by the main process (on any exception there, KeyboardInterrupt included), or stop themselves
when it is gone. A single-threaded caller is forked (instant); a caller with threads gets processes from a fork
server that has imported the worker's module once, since forking a thread's held lock can hang the child.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection, wait
from typing import Any

ERROR = "error"  # the kind of answer a failing worker sends: (ERROR, tag, worker, traceback)
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
        self.inboxes = [ctx.Queue() for _ in range(workers)]
        for inbox in self.inboxes:
            inbox.cancel_join_thread()  # never wait at exit to flush into a dead worker's pipe
        self.answers: list[Connection] = []
        self.processes: list[mp.process.BaseProcess] = []
        try:
            for j, inbox in enumerate(self.inboxes):
                reader, writer = ctx.Pipe(duplex=False)
                self.answers.append(reader)
                process = ctx.Process(
                    target=_work,
                    args=(target, j, inbox, writer, list(self.answers), *args),
                    name=f"join-file worker {j}",
                    daemon=True,
                )
                self.processes.append(process)
                process.start()
                writer.close()  # before the next fork: the worker alone holds its pipe open
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
        ready = wait(self.answers)[0]
        j = self.answers.index(ready)
        try:
            answer = ready.recv()
        except (EOFError, OSError):  # the pipe ended, maybe halfway through an answer: the worker is gone
            process = self.processes[j]
            process.join(STOP_S)
            code = process.exitcode
            killed = code is not None and code < 0
            how = f"was killed by signal {signal.Signals(-code).name}" if killed else f"exited with code {code}"
            raise WorkerError(f"join-file worker {j} (pid {process.pid}) {how} before finishing its work") from None
        if answer[0] == ERROR:
            raise WorkerError(f"join-file worker {answer[2]} failed:\n{answer[3]}")
        return answer

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
        for answers in self.answers:
            answers.close()


class _Outbox:
    """A worker's side of its answer pipe: `put` hands the answer to a sending thread and returns."""

    def __init__(self, writer: Connection) -> None:
        self.writer = writer
        self.sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="answers")

    def put(self, answer: Any) -> None:
        self.sender.submit(self.writer.send, answer)

    def close(self) -> None:
        """Send what is queued (or give up when the main process is gone: the pipe breaks), then end the pipe."""
        self.sender.shutdown(wait=True)
        self.writer.close()


def _work(target: Callable[..., None], worker: int, inbox: Any, writer: Connection, readers: list, *args: Any) -> None:
    for reader in readers:  # the copies this process inherited: the main process alone may hold them open
        reader.close()
    outbox = _Outbox(writer)
    try:
        target(worker, inbox, outbox, *args)
    finally:
        outbox.close()
