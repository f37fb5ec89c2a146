"""An open stream's events for as long as its token admits it: looked at before each event and about every second
between events, so that a revoked, rotated or expired token ends a quiet stream too, not only at its next event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")

CHECK_S = 1.0  # how often a stream without events looks whether its token still admits it


async def while_admitted(
    events: AsyncIterator[T], admitted: Callable[[], bool], every_s: float = CHECK_S
) -> AsyncIterator[T | None]:
    """The events of `events` while `admitted()` holds; then one None, and the end (an event that arrived as it
    stopped holding is not passed on)."""
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not admitted():
                yield None
                return
            if done:
                finished, pending = pending, None
                try:
                    event = finished.result()
                except StopAsyncIteration:
                    return
                yield event
    finally:
        if pending is not None:  # the events' generator must be back at rest before anyone closes it
            pending.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait({pending})
            if not pending.cancelled():
                pending.exception()  # an event (or the end) that came too late: dropped, and not logged as lost
