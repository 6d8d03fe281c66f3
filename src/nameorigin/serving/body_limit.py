"""The request body's size limit, as ASGI middleware.

LitServe's own limit answers 413 the moment the count passes the limit, with the rest of the body still on its way:
the server then closes a socket that has unread bytes, the kernel resets the connection, and a client still
sending sees "connection reset" in place of the 413. Here the rest is read and dropped first (for at most
DRAIN_SECONDS, as a web server's lingering close does), so the client reads the answer, with a detail that names
the fix.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import HTTPException

DRAIN_SECONDS = 10.0


class BodyLimit:
    """Refuses a request whose body passes `max_bytes` with a one-line 413, after reading what the client still
    sends. Nothing is kept: a refused body costs the server bandwidth, never memory."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        received = 0

        async def counted() -> dict:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                await drain(receive, message)
                raise HTTPException(413, f"request body too large: over {self.max_bytes / 2**20:g} MiB; send fewer "
                                         "names a request, or start the server with a larger --max-body-mb")
            return message

        await self.app(scope, counted, send)


async def drain(receive: Any, message: dict) -> None:
    """Reads and drops the rest of the body, until the client has sent it all, hangs up, or DRAIN_SECONDS pass."""
    deadline = time.monotonic() + DRAIN_SECONDS
    while message.get("more_body") and message["type"] == "http.request" and time.monotonic() < deadline:
        message = await receive()
