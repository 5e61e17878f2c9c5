"""HEAD answered as GET without the body (RFC 9110 §9.3.2), for every GET endpoint.

FastAPI routes a HEAD only where it was declared, so ``curl -I`` and link checkers got a
405 from every GET endpoint. Here a HEAD goes through the app as a GET, and its answer
keeps the status and headers (``content-length`` included) but sends no body."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


HEAD_REQUEST = "turbdb.head_request"  # set in the scope of a HEAD routed as GET


def request_method(scope: Scope) -> str:
    """The method the client sent: HEAD for a HEAD routed as GET."""
    return "HEAD" if scope.get(HEAD_REQUEST) else scope["method"]


class HeadAsGet:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET", HEAD_REQUEST: True}, receive, without_body)


def allowed_methods(allow: str) -> str:
    """A 405's ``Allow`` with HEAD added wherever GET is allowed, since HEAD is too."""
    methods = [m.strip() for m in allow.split(",") if m.strip()]
    if "GET" in methods and "HEAD" not in methods:
        methods.append("HEAD")
    return ", ".join(methods)
