"""The typed errors of a result query: what went wrong, not how a transport reports it.

The proxy maps each type to its HTTP status in one place (`pipelines/proxy/app.py`); the CLI prints the message.
Every message names the parameter and what is accepted.
"""

from __future__ import annotations


class QueryError(ValueError):
    """A query that cannot be answered (one of the subclasses below)."""


class BadQuery(QueryError):
    """A malformed argument: bad field, condition, time span, limit or cursor."""


class QueryTooLarge(BadQuery):
    """A one-time query larger than the proxy serves (its span or its page)."""


class NotFound(QueryError):
    """No such task, or the tier the query needs is not configured."""


class Gone(QueryError):
    """The feed no longer holds what a continuous query asks for. `cursor` resumes it from Parquet (None when
    the results are gone from both tiers)."""

    def __init__(self, message: str, cursor: str | None = None) -> None:
        super().__init__(message)
        self.cursor = cursor


class TryAgain(QueryError):
    """The tiers kept moving under the query, or Parquet has not committed a batch yet: the same query may work
    later."""


class Damaged(QueryError):
    """Stored results that cannot be read (a damaged or truncated file, a Redis chunk that breaks its index entry):
    names the task and batch, never where. `cursor`: where a continuous query resumes past them (None: not one)."""

    def __init__(self, message: str, cursor: str | None = None) -> None:
        super().__init__(message)
        self.cursor = cursor
