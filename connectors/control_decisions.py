"""The controller's decisions in Redis: the latest one as a hash, every one in a capped stream.

Layout (`ns` as for the load reports, `{control}` the shared hash tag):

- `ns:{control}:decision` - hash, the latest decision's fields (strings; JSON for structured values), what a
  restarted controller resumes from and what the join job will read to apply a decision;
- `ns:{control}:decisions` - stream, one entry per decided epoch with the same fields, `MAXLEN ~ maxlen`.

Both are written in one MULTI/EXEC, so the hash and the stream never disagree on the latest epoch.
"""

from __future__ import annotations

from collections.abc import Mapping

from windjoin.connectors.load_reports import check_namespace
from windjoin.connectors.redis_client import RedisAuth, redis_client

DEFAULT_MAXLEN = 10_000


def decision_key(namespace: str = "windjoin") -> str:
    return f"{check_namespace(namespace)}:{{control}}:decision"


def decisions_key(namespace: str = "windjoin") -> str:
    return f"{check_namespace(namespace)}:{{control}}:decisions"


class DecisionStore:
    """Record and read the controller's decisions of one namespace."""

    def __init__(
        self,
        url: str,
        namespace: str = "windjoin",
        maxlen: int = DEFAULT_MAXLEN,
        socket_timeout: float = 10.0,
        auth: RedisAuth | None = None,
    ) -> None:
        self.latest_key = decision_key(namespace)
        self.stream_key = decisions_key(namespace)
        self.maxlen = maxlen
        self.client = redis_client(url, auth, socket_timeout=socket_timeout)

    def close(self) -> None:
        self.client.close()

    def record(self, fields: Mapping[str, str | int | float]) -> str:
        """Make `fields` the latest decision (replacing the hash whole) and append it to the stream; the entry id."""
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self.latest_key)
        pipe.hset(self.latest_key, mapping=dict(fields))
        pipe.xadd(self.stream_key, dict(fields), maxlen=self.maxlen, approximate=True)
        return pipe.execute()[-1].decode()

    def latest(self) -> dict[str, str] | None:
        """The latest decision's fields, or None before the first."""
        raw = self.client.hgetall(self.latest_key)
        return {k.decode(): v.decode() for k, v in raw.items()} or None

    def history(self, after: str = "-", count: int | None = None) -> list[tuple[str, dict[str, str]]]:
        """(entry id, fields) of recorded decisions after entry id `after` (exclusive; "-" for all), oldest first."""
        low = after if after == "-" else f"({after}"
        return [
            (entry_id.decode(), {k.decode(): v.decode() for k, v in fields.items()})
            for entry_id, fields in self.client.xrange(self.stream_key, min=low, max="+", count=count)
        ]
