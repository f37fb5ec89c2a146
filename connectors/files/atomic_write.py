"""Replace a small local file whole, for the files one process writes and another reads (marks, batch costs,
refusal counts, the services' state): a reader sees the old content or the new, never half, and a writer killed
midway leaves only a hidden temporary file beside it. Not durable across a power loss (no fsync): each of these
files is rebuilt or only advisory when lost; results go through `result_files`, which syncs. (The window cache
streams a large pickle to its own temporary file rather than build the bytes in memory first.)"""

from __future__ import annotations

import contextlib
import os
import tempfile


def replace_whole(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to a temporary file in `path`'s folder (created if missing), then rename it onto `path`."""
    folder, name = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
