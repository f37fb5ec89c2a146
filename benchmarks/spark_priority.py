"""Spark below the load generator, so that a paced phase measures the job and not the generator's starvation.

On 2 shared cores a saturated Spark starved even the pre-encoded generator: it fell ~5 s behind its schedule at 80%
of windjoin's rate, and the phase was void; at nice 10 alone it still fell 0.71 s behind (p99). In production the
producers run on other machines; here the generator keeps normal priority while Spark runs in Linux's idle
scheduling class (SCHED_IDLE: the CPU no other thread wants; its nice set to `SPARK_NICE` too): every thread of
the JVM and of PySpark's worker processes, and every thread of this (driver) process but its main one, which
starts the generators and must leave them at normal priority (Linux lets a process lower its threads' priority,
never raise it again). The broker and Redis keep normal priority, as outside services would. Both systems run in
the same JVM under the same policy.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

SPARK_NICE = 10
PROC = Path("/proc")


def lower_spark_priority(spark: Any, nice: int = SPARK_NICE) -> int:
    """Renice Spark's threads (see the module) to at least `nice`; returns how many were lowered now.

    Threads and processes started later by a lowered thread inherit its priority; call this again after Spark may
    have started processes from an unlowered one (say, at each paced phase)."""
    jvm = spark.sparkContext._gateway.proc.pid
    main = threading.main_thread().native_id
    threads = [t for t in _threads(os.getpid()) if t != main]
    for pid in [jvm, *_descendants(jvm)]:
        threads += _threads(pid)
    lowered = 0
    for tid in threads:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # gone since, or not ours: left as it is
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                lowered += 1
            if os.sched_getscheduler(tid) != os.SCHED_IDLE:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    return lowered


def _threads(pid: int) -> list[int]:
    try:
        return [int(t.name) for t in (PROC / str(pid) / "task").iterdir()]
    except OSError:  # the process ended
        return []


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for stat in PROC.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
