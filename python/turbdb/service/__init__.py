"""The turbdb web service (FastAPI on uvicorn): ``create_app`` builds the app over one
database, ``serve`` runs it (``turbdb serve``). See docs/service.md. The web framework is
imported on first use, so the client (which shares ``transport``) does not load it."""

from typing import Any

__all__ = ["create_app", "serve", "Tokens"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "serve":
        from .server import serve

        return serve
    if name == "Tokens":
        from .tokens import Tokens

        return Tokens
    raise AttributeError(f"module 'turbdb.service' has no attribute {name!r}")
