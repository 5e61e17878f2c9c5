"""``GET /``: what this server is and where its documentation lives — a short page for a
browser, JSON for a program."""

from __future__ import annotations

import html
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from .. import __version__
from .backend import Backend
from .negotiation import preferred

LINKS = {
    "docs": ("/docs", "interactive API documentation (Swagger UI, served from this server: works offline)"),
    "redoc": ("/redoc", "the same documentation as one page (ReDoc)"),
    "openapi": ("/openapi.json", "the OpenAPI description"),
    "datasets": ("/v1/datasets", "the datasets and their metadata"),
    "limits": ("/v1/limits", "what your token may do: points per request, requests per minute"),
    "jhtdb_metadata": ("/turbulence-svc/metadata", "the datasets described for JHTDB's givernylocal"),
    "health": ("/healthz", "liveness"),
    "metrics": ("/metrics", "Prometheus metrics"),
}


# The home page is text and links: it loads nothing, runs nothing and posts nothing (the
# links, /docs among them, are navigations, which this does not restrict).
HOME_PAGE_POLICY = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"


def summary(backend: Backend, request: Request) -> dict[str, Any]:
    """What the server is, and the datasets the caller may read (none named to a caller
    without a token where anonymous use is off). Links are under the root path a proxy
    serves the server under."""
    names = backend.visible_names(request)
    root = request.scope.get("root_path", "")
    return {
        "service": "turbdb",
        "description": "a turbulence database: point queries (values, gradients, Hessians, Laplacians), cutouts "
                       "and particle tracking evaluated where the data lives",
        "version": __version__,
        "datasets": names or [],
        **({"token_needed": "this server needs a token to list or read its datasets"} if names is None else {}),
        "links": {key: root + path for key, (path, _) in LINKS.items()},
        "clients": f"Python: turbdb.connect(url, token=…); JHTDB scripts: see {root}/docs and docs/service.md",
    }


def router(backend: Backend) -> APIRouter:
    api = APIRouter(tags=["operations"])

    @api.get("/", summary="what this server is, with links to its documentation")
    async def home(request: Request) -> Response:
        # The listing stats every dataset's directory: off the event loop, which a database
        # of hundreds of datasets would hold up.
        about = await anyio.to_thread.run_sync(summary, backend, request)
        if preferred(request, ["application/json", "text/html"]) != "text/html":
            return JSONResponse(about)
        links = {key: html.escape(path) for key, path in about["links"].items()}
        items = "\n".join(f'<li><a href="{links[key]}">{links[key]}</a>: {html.escape(text)}</li>'
                          for key, (_, text) in LINKS.items())
        datasets = ", ".join(html.escape(n) for n in about["datasets"]) or (
            "shown with a token" if "token_needed" in about or await anyio.to_thread.run_sync(backend.names)
            else "none yet")
        page = (f"<!doctype html><html><head><meta charset='utf-8'><title>turbdb {__version__}</title></head><body>"
                f"<h1>turbdb {__version__}</h1><p>{html.escape(about['description'])}.</p>"
                f"<p>Datasets: {datasets}.</p><ul>{items}</ul>"
                f"<p>From Python: <code>turbdb.connect(\"{html.escape(str(request.base_url).rstrip('/'))}\")</code>.</p>"
                "</body></html>")
        return HTMLResponse(page, headers={"Content-Security-Policy": HOME_PAGE_POLICY})

    return api
