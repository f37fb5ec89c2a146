"""The names of a task's keys in the Redis tier (what each holds: `connectors.redis.sink`'s docstring).

Every key of task `T` in namespace `ns` starts `ns:{T}:`; `{T}` is a Redis Cluster hash tag, so a task's keys
share one slot and each script or transaction stays on one shard. Names are checked before any key is built.
"""

from __future__ import annotations

from windjoin.operators.redis_namespace import DEFAULT_NAMESPACE, check_namespace
from windjoin.operators.result_table import check_batch_id, check_identifier, check_piece


def task_prefix(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """`ns:{task}:`, the start of every key of the task."""
    return f"{check_namespace(namespace)}:{{{check_identifier('task name', task)}}}:"


def meta_key(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The hash of the task's commit state (`committed`, `max_time`, `since`, `snapshot`, ...)."""
    return task_prefix(task, namespace) + "meta"


def index_key(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The sorted set of the committed chunks' entries, scored by their smallest result time."""
    return task_prefix(task, namespace) + "index"


def pieces_key(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The sorted set of the committed pieces (`batch:piece`), scored by their largest result time."""
    return task_prefix(task, namespace) + "pieces"


def feed_key(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The stream of committed pieces in commit order, the continuous-query feed."""
    return task_prefix(task, namespace) + "feed"


def piece_key(task: str, batch_id: int, piece: int, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The hash of one piece: its chunks and what describes them (staged, then committed in place)."""
    return task_prefix(task, namespace) + f"piece:{check_batch_id(batch_id)}:{check_piece(piece)}"


def owner_key(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The hash naming the checkpoint that writes the task's keys: `run_id`, `checkpoint`."""
    return task_prefix(task, namespace) + "owner"


def staged_key(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The set of the staged pieces not committed yet (`batch:piece`): with `pieces`, every piece hash of the task,
    found without SCAN (which no component's user may run: it would list every key of the server)."""
    return task_prefix(task, namespace) + "staged"


def task_keys(task: str, namespace: str = DEFAULT_NAMESPACE) -> list[str]:
    """The task's fixed keys (its piece hashes are named by the `pieces` and `staged` sets)."""
    return [f(task, namespace) for f in (meta_key, index_key, pieces_key, feed_key, staged_key, owner_key)]
