"""The browser security headers every answer carries: the app's (through the middleware
here) and those the connection guards write before the app sees a request (408, 431, 503
in :mod:`.connections`), which carried none."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: No page may frame the server's answers (clickjacking), browsers take each answer as the
#: type it says, and no page address leaks in a Referer.
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer")]


def header_lines() -> bytes:
    """:data:`SECURITY_HEADERS` as lines of a response head written by hand."""
    return b"".join(name + b": " + value + b"\r\n" for name, value in SECURITY_HEADERS)


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every HTTP answer of the app it wraps."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)
