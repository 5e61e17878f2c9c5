"""Numbers in requests are written with ASCII digits only: Python's ``int`` and ``float``
(and pydantic after them) read ``٣`` as 3 and ``1_0`` as 10, so a typo or a hostile
spelling became a different box or time without a word. Numeric query parameters and the
ranges and strides the service parses itself must be an optional sign, digits, a point and
an exponent (``inf`` and ``nan`` pass on to the checks that refuse them with their name)."""

from __future__ import annotations

import re

from fastapi import Request

from ..exceptions import InvalidRequestError

_PLAIN = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*|\s*[+-]?(?:inf|infinity|nan)\s*",
                    re.ASCII | re.IGNORECASE)


def check_plain_number(name: str, text: str) -> None:
    """Refuses (400) a number spelled with what Python reads as digits but ASCII does not
    (``٣``, ``1_0``); other text (``four``) is left to its parser, whose message it keeps."""
    if not _PLAIN.fullmatch(text) and any(c == "_" or not c.isascii() for c in text):
        raise InvalidRequestError(f"parameter {name!r} = {text!r} is not a number written with ASCII digits (an "
                                  "optional sign, digits 0-9, '.', and an exponent such as e-3); write it so")


def check_plain_numbers(name: str, text: str, separators: str = ",:") -> None:
    """:func:`check_plain_number` for each part of a list such as ``0,32`` or ``1,2,2``."""
    for part in re.split(f"[{re.escape(separators)}]", text):
        check_plain_number(name, part)


async def plain_numeric_parameters(request: Request) -> None:
    """A dependency of every route: the query parameters it declares as ``int`` or ``float``
    are written in plain ASCII (pydantic took ``time=1_0`` for 10)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    for field in dependant.query_params:
        if _numeric(field.field_info.annotation):
            value = request.query_params.get(field.alias)
            if value is not None:
                check_plain_number(field.alias, value)


def _numeric(annotation: object) -> bool:
    if annotation in (int, float):
        return True
    return any(a in (int, float) for a in getattr(annotation, "__args__", ()))
