"""Pointing an unmodified givernylocal at a turbdb server. givernylocal sends every request
to JHTDB's address and reads its metadata from GitHub, both written into its code;
``redirect(url)`` makes every ``requests`` session it opens send those two to ``url``
instead (JHTDB's REST paths are served there: ``/turbulence-svc/values``,
``/turbulence-svc/cutout/api/local``, ``/turbulence-svc/metadata``). Nothing of
givernylocal is patched; other addresses are untouched."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

JHTDB_SERVICE = "https://web.idies.jhu.edu/turbulence-svc/"
GIVERNY_METADATA = "https://raw.githubusercontent.com/sciserver/giverny/"

_installed: list[tuple[object, object]] = []


def rewrite(url: str, server: str) -> str:
    """``url`` as sent to ``server``: JHTDB's service paths keep their path, the metadata
    document is ``/turbulence-svc/metadata``."""
    if url.startswith(JHTDB_SERVICE):
        return f"{server}/turbulence-svc/{url[len(JHTDB_SERVICE):]}"
    if url.startswith(GIVERNY_METADATA):
        return f"{server}/turbulence-svc/metadata"
    return url


def redirect(url: str) -> contextlib.AbstractContextManager[None]:
    """From now on (or within ``with``), requests for JHTDB go to the turbdb server ``url``
    (``http(s)://host:port``, checked as ``turbdb.connect`` checks it: without a scheme,
    givernylocal failed later with requests' "No host specified")."""
    import requests
    from requests.adapters import HTTPAdapter

    from ..remote import server_address

    server = server_address(url)

    class ToTurbdb(HTTPAdapter):
        def send(self, request, **kwargs):  # type: ignore[override]
            request.url = rewrite(request.url, server)
            return super().send(request, **kwargs)

    original = requests.Session.__init__

    def init(session, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(session, *args, **kwargs)
        for prefix in (JHTDB_SERVICE, GIVERNY_METADATA):
            session.mount(prefix, ToTurbdb())

    requests.Session.__init__ = init  # type: ignore[method-assign]
    _installed.append((requests.Session, original))
    return _undo_on_exit()


@contextlib.contextmanager
def _undo_on_exit() -> Iterator[None]:
    try:
        yield
    finally:
        undo()


def undo() -> None:
    """Sends JHTDB's requests to JHTDB again."""
    while _installed:
        cls, original = _installed.pop()
        cls.__init__ = original  # type: ignore[misc]
