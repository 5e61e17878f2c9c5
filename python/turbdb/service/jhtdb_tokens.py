"""How JHTDB's endpoints take a token. givernylocal sends ``authToken=`` to the values
endpoint and ``token=`` to the cutout endpoint; each endpoint read only its own, so the
other spelling was ignored: anonymous limits without a word, or a 401 that advised the very
spelling it had ignored. Now every JHTDB endpoint takes either, or the ``Authorization:
Bearer`` header; JHTDB's public testing token counts as none (the header is then read)."""

from __future__ import annotations

from fastapi import Query

from ..exceptions import InvalidRequestError
from .tokens import JHTDB_TESTING_TOKEN

_SAID = "JHTDB token (as authToken= or token=, either on every JHTDB endpoint); the public testing token counts as none"


async def jhtdb_token(
    authToken: str | None = Query(None, description=_SAID),  # noqa: N803 - JHTDB's name
    token: str | None = Query(None, description=_SAID),
) -> str | None:
    """The token a JHTDB request names, or None (none, or the testing token): the caller
    then reads the Bearer header (:meth:`Backend.authorize`)."""
    named = {t for t in (authToken, token) if t}
    if len(named) > 1:
        raise InvalidRequestError("authToken and token name two different tokens; send one of them")
    given = named.pop() if named else None
    return None if given == JHTDB_TESTING_TOKEN else given
