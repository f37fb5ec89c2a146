"""The query error of Redis results that break their index entry (`pieces.ChunkDamaged`), worded the same wherever
a reader meets it: it names the task and the batch, never a key or what the value held."""

from __future__ import annotations

from windjoin.operators.query.errors import Damaged

PREFIX = "damaged:"  # how every such message starts (a stream's end event carries it as its error)


def damaged(task: str, batch: int | None, why: str, cursor: str | None = None) -> Damaged:
    """`Damaged` for task `task`'s batch `batch` (None: not known, the index member itself is malformed); `cursor`:
    where a continuous query resumes past it."""
    where = "an index entry" if batch is None else f"batch {batch}"
    return Damaged(
        f"{PREFIX} task {task!r} {where}: its Redis results break their index entry ({why}); none of them is "
        "served. The operator should remove the task's keys from Redis (Parquet holds the batch when configured)",
        cursor,
    )


def member_batch(member: bytes | str) -> int | None:
    """The batch an index member names first, when it names one."""
    head = (member.decode(errors="replace") if isinstance(member, bytes) else member).split(":", 1)[0]
    return int(head) if head.isdigit() and len(head) <= 16 else None
