"""The proxy's server-sent events response: sse_starlette's, but a client that goes away without closing (its
socket stops taking data, so a send waits past the send timeout) ends its stream with one log line instead of an
"Exception in ASGI application" traceback per client. The stream's generator is closed first (sse_starlette does
it), so its slot and subscription are released."""

from __future__ import annotations

import logging

from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError
from starlette.types import Receive, Scope, Send

log = logging.getLogger("windjoin.proxy")


class StreamResponse(EventSourceResponse):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            client = scope.get("client") or ("?", 0)
            log.warning(
                "stream %s of %s:%s: the client went away (took nothing for %g s); its stream is closed",
                scope.get("path"),
                *client,
                self.send_timeout,
            )
