"""Which of the answer's forms the client asked for: its ``Accept`` header read as RFC 9110
says (quality values, wildcards, ``q=0`` meaning "not this"), by werkzeug's parser.

A request that accepts none of the forms offered gets the first one (the endpoint's
default) rather than a 406: scripts that send an odd ``Accept`` still get an answer."""

from __future__ import annotations

from starlette.requests import Request
from werkzeug.datastructures import MIMEAccept
from werkzeug.http import parse_accept_header


def preferred(request: Request, offered: list[str]) -> str:
    """The form of ``offered`` the client prefers; ties go to the earlier one."""
    header = request.headers.get("accept", "")
    return parse_accept_header(header, MIMEAccept).best_match(offered) or offered[0]
