"""The query proxy's tokens file followed while it runs, so that revoking or adding a token (a Secret's update)
needs no restart.

A request (and every open stream, about every second) looks at the file at most every `check_s` seconds (a `stat`:
device, inode, size, modification time) and re-reads it when it changed. A rewrite that does not parse is logged,
counted by the caller, and ignored until the file changes again: the proxy keeps the last good table, so a bad edit
neither opens the proxy nor stops it. A file that is gone revokes every token (logged) until it is back: deleting
it is how an operator shuts everyone out at once. A file missing at start is a configuration error.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from windjoin.pipelines.proxy.tokens import Client, TokenTable

log = logging.getLogger("windjoin.proxy")

DEFAULT_CHECK_S = 1.0
RELOADED, FAILED, REVOKED = "reloaded", "failed", "revoked"


class TokenFile:
    """The table of the tokens file at `path` (ValueError naming the key at fault when it is bad at start),
    re-read by `refresh()` when the file changed."""

    def __init__(
        self,
        path: str | Path,
        tasks: Iterable[str],
        check_s: float = DEFAULT_CHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.tasks = list(tasks)
        self.check_s = check_s
        self._clock = clock
        self._seen = _signature(self.path)  # taken before reading: a change while reading is seen next time
        self.table = TokenTable.from_file(self.path, self.tasks)
        self._checked = clock()

    def client(self, token: str) -> Client | None:
        return self.table.client(token)

    def admits(self, client: Client) -> bool:
        return self.table.admits(client)

    def refresh(self) -> str | None:
        """RELOADED or FAILED when the file changed since it was last read (looked at no more often than every
        `check_s` seconds), REVOKED when it is gone (no token is accepted then), else None. FAILED keeps the last
        good table."""
        now = self._clock()
        if now - self._checked < self.check_s:
            return None
        self._checked = now
        seen = _signature(self.path)
        if seen == self._seen:
            return None
        self._seen = seen
        if seen is None:
            log.error("tokens file %s is gone: every token is revoked until it is back", self.path)
            self.table = TokenTable({})
            return REVOKED
        try:
            self.table = TokenTable.from_file(self.path, self.tasks)
        except ValueError as err:
            log.error("%s; the proxy keeps serving the last good tokens (%d)", err, len(self.table))
            return FAILED
        log.info("tokens file %s reloaded: %d tokens", self.path, len(self.table))
        return RELOADED


def _signature(path: Path) -> tuple[int, ...] | None:
    """What changes when the file is rewritten or replaced (a Secret volume swaps a symlink); None when missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
