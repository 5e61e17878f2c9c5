"""The v1 and JHTDB endpoints refuse query parameters and JSON body members they do not
read. Ignored, a typo was a wrong answer with status 200: ``temporl=pchip`` answered
without temporal interpolation, ``Method=lag4`` or JHTDB's ``sint=lag4`` with lag6,
``strides=2`` with the whole box, ``{"points": …, "time": 0.01}`` at the query's own time,
where Python raised a TypeError and the command line a usage error. The names a route
takes are read from FastAPI (its parameters and its dependencies'), so a new parameter
needs no entry here."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import Request

from ..exceptions import InvalidRequestError

#: The endpoints held to their parameters: the API's own and JHTDB's, whose clients
#: (turbdb.connect, givernylocal) send only what these routes take. The home page,
#: /healthz, /metrics and the docs take no parameter a typo could turn into another
#: answer, and browsers, probes and scrapers may add their own (a cache buster).
STRICT_PREFIXES = ("/v1/", "/turbulence-svc/")

#: The same setting under the other API's names: JHTDB's on a v1 endpoint, v1's on
#: JHTDB's (the first the route takes is suggested).
OTHER_NAMES: dict[str, tuple[str, ...]] = {
    "sint": ("method",), "sop": ("operator",), "tint": ("temporal",), "var": ("field",), "t": ("time", "start"),
    "timepoint_end": ("end",), "delta_t": ("dt",),
    "method": ("sint",), "operator": ("sop",), "temporal": ("tint",), "field": ("var", "function"),
    "time": ("t", "ts"), "start": ("t",), "end": ("timepoint_end",), "dt": ("delta_t",), "stride": ("stridex",),
}


async def known_query_parameters(request: Request) -> None:
    """A dependency of every route: on a v1 or JHTDB endpoint, a query parameter the route
    does not declare is a 400 that names it, suggests the one meant and lists those taken."""
    route = request.scope.get("route")
    path = getattr(route, "path", "")
    if not path.startswith(STRICT_PREFIXES) or getattr(route, "dependant", None) is None:
        return
    taken = taken_by(route)
    unknown = [name for name in dict.fromkeys(request.query_params.keys()) if name not in taken]
    if unknown:
        method = request.scope.get("method", "GET")
        raise InvalidRequestError(unknown_message(unknown, taken, f"{method} {path}"))


def taken_by(route: Any) -> tuple[str, ...]:
    """The query parameters ``route`` declares, its dependencies' among them, in order (a
    walk of a few objects: routes are not hashable, so not cached)."""
    names: list[str] = []
    pending = [route.dependant]
    while pending:
        dependant = pending.pop(0)
        names += [field.alias for field in dependant.query_params if field.alias not in names]
        pending += dependant.dependencies
    return tuple(names)


def unknown_message(unknown: list[str], taken: Iterable[str], where: str) -> str:
    """Names the parameters ``where`` does not take, each with the one likely meant."""
    taken = list(taken)
    described = [f"{name!r}{_meant(name, taken)}" for name in unknown]
    noun = "an unknown query parameter" if len(unknown) == 1 else "unknown query parameters"
    takes = f"it takes {', '.join(taken)}" if taken else "it takes no query parameters"
    return f"{where} got {noun}, {', '.join(described)}, which would be ignored; {takes}"


def _meant(name: str, taken: list[str]) -> str:
    """`` (did you mean …?)`` for a misspelt, differently cased or other API's name."""
    if "token" in name.lower() and not any("token" in t.lower() for t in taken):
        return " (this endpoint takes a token as the header Authorization: Bearer <token>)"
    for other in OTHER_NAMES.get(name.lower(), ()):
        if other in taken:
            return f" (this endpoint's name for it is {other!r})"
    lowered = {t.lower(): t for t in taken}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.7)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""


def check_members(document: Mapping[str, Any], taken: tuple[str, ...], example: str) -> None:
    """Refuses a JSON body member outside ``taken``: the body carries those only, and the
    endpoint's settings (time, method, …) travel as query parameters. ``example``: the
    body as it should be."""
    unknown = [name for name in document if name not in taken]
    if unknown:
        described = ", ".join(f"{name!r}{_meant(name, list(taken))}" for name in unknown)
        raise InvalidRequestError(
            f"the JSON body has {'a member' if len(unknown) == 1 else 'members'} {described} that this endpoint does "
            f"not read; the body is {example}, and settings such as time or method go in the query string "
            "(?time=…&method=…)")
