"""Decoded slot windows shared by the Python workers of one machine, through private local files.

Spark hands a slot's task to whichever Python worker is idle, so the worker that joined a slot's last batch is
often not the one that gets its next: its in-memory cache (`slot_windows._CACHE`) then misses and the windows are
rebuilt from every state segment (read through the state server, ~15-45 MB/s, and re-indexed), measured at
0.1-0.26 s per miss for a 10 s window at 4,000 tuples/s per stream, on about half the batches. So the worker
that ends a slot's batch also leaves the windows, pickled, in a file named by the slot and the state version
(`nonce`, unique per write); another worker on the machine loads that file instead of rebuilding. A file is
only ever used for exactly its version, so a stale or replayed one is never read as current; elsewhere (another
machine) it is simply not there and the windows are rebuilt as before.

Windows that do not pickle (MJoin's n-way operators hold weak references) are not shared: those slots rebuild
on a miss as before. The folder is private (mode 0700, owned by this user, checked before any load): a pickle
is only read from where no other user can write.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import tempfile
from pathlib import Path
from typing import Any


class WindowFiles:
    """Pickled windows per slot and state version under a private folder named after the job (`job_key`)."""

    def __init__(self, job_key: str) -> None:
        digest = hashlib.sha256(job_key.encode()).hexdigest()[:16]
        self.root = Path(tempfile.gettempdir()) / f"windjoin-windows-{os.getuid()}" / digest

    def _private(self) -> bool:
        """Create the folder (and its parent) mode 0700 if missing; whether both are ours and private."""
        for folder in (self.root.parent, self.root):
            try:
                folder.mkdir(mode=0o700, exist_ok=True)
                info = folder.lstat()
            except OSError:
                return False
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
                return False
        return True

    def _path(self, slot: int, nonce: str) -> Path:
        return self.root / f"{int(slot)}-{nonce}.pkl"

    def load(self, slot: int, nonce: str) -> Any | None:
        """The windows of `slot` at state version `nonce`, or None when no worker here left them."""
        if not self._private():
            return None
        try:
            with open(self._path(slot, nonce), "rb") as file:
                return pickle.load(file)  # noqa: S301 - written by this job's workers into a private folder
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            return None  # not there, torn, or left by another version of the code: rebuilt instead

    def store(self, slot: int, nonce: str, windows: Any) -> None:
        """Leave `windows` for `slot` at version `nonce` (atomically), and remove the slot's older files."""
        if not self._private():
            return
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{int(slot)}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                pickle.dump(windows, file, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self._path(slot, nonce))
        except (pickle.PicklingError, TypeError, AttributeError):
            return  # windows that do not pickle (MJoin's n-way operators hold weak references) are rebuilt instead
        finally:
            Path(tmp).unlink(missing_ok=True)
        for old in self.root.glob(f"{int(slot)}-*.pkl"):
            if old.name != self._path(slot, nonce).name:
                old.unlink(missing_ok=True)
