"""How the server logs: every line (uvicorn's own, the access log, errors) starts with its
time and level, and the access log has one line per request, written when it ends, with
its status, the bytes sent and how long it took. uvicorn's access line came when the answer
started (no size or duration), without a time, and not at all for an answer it could not
send; errors carried neither a time nor the request."""

from __future__ import annotations

import copy
import http
import logging
import os
import urllib.parse
from typing import Any

from starlette.types import Scope

from .head_requests import request_method

#: One line per request, when ``--access-log`` is asked for (INFO; off at WARNING).
access_log = logging.getLogger("turbdb.access")
#: The service's warnings and errors: 5xx answers, connections cut at shutdown.
log = logging.getLogger("turbdb.service")

FORMAT = "%(asctime)s.%(msecs)03d %(levelprefix)s %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
_REASONS = {499: "Client Closed Request"}  # nginx's name: the client went away first


def request_line(scope: Scope) -> str:
    """``client - "METHOD path?query HTTP/1.1"``, as uvicorn wrote it (the path already
    holds the root path, when there is one)."""
    client = scope.get("client")
    path = urllib.parse.quote(scope.get("path", ""))
    if scope.get("query_string"):
        path += "?" + scope["query_string"].decode("latin-1")
    return (f'{"%s:%d" % tuple(client) if client else "-"} - "{request_method(scope)} {path} '
            f'HTTP/{scope.get("http_version", "1.1")}"')


def status_text(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} {_REASONS[status]}" if status in _REASONS else str(status)


def access(scope: Scope, status: int, sent: int, seconds: float) -> None:
    """The access-log line of a request that ended."""
    if access_log.isEnabledFor(logging.INFO):
        access_log.info("%s %s %d B %.3f s", request_line(scope), status_text(status), sent, seconds)


class WithoutParserWarnings(logging.Filter):
    """Drops uvicorn's warning on each request its parser refuses: the connection guards
    log those (and every refusal) themselves, a line a second at most, where uvicorn wrote
    a line for each, however many an attacker sent."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Invalid HTTP request received."


def logging_config(level: str, access_lines: bool) -> dict[str, Any]:
    """uvicorn's logging configuration, without colours under ``NO_COLOR``, with the time
    first on every line, and turbdb's loggers added: the access
    log on stdout, as uvicorn's was, whatever ``level`` says (asked for, it shows)."""
    from uvicorn.config import LOGGING_CONFIG

    settings = copy.deepcopy(LOGGING_CONFIG)
    settings["formatters"]["default"].update(fmt=FORMAT, datefmt=DATE_FORMAT)
    if os.environ.get("NO_COLOR"):  # uvicorn colours its log on a terminal whatever NO_COLOR says
        for formatter in settings["formatters"].values():
            formatter["use_colors"] = False
    settings["handlers"]["turbdb_access"] = {"formatter": "default", "class": "logging.StreamHandler",
                                             "stream": "ext://sys.stdout"}
    settings["loggers"]["turbdb.service"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    settings["loggers"]["turbdb.access"] = {"handlers": ["turbdb_access"], "propagate": False,
                                            "level": "INFO" if access_lines else "WARNING"}
    # Every other logger (asyncio's, the engine's completions) through the same handler: it
    # fell to logging's last resort, with no time and no redaction. Tokens are taken out by
    # the handlers, which see the records other loggers pass up (a logger's own filter
    # does not).
    settings["root"] = {"handlers": ["default"], "level": "WARNING"}
    settings.setdefault("filters", {})["redact_tokens"] = {"()": "turbdb.service.redaction.RedactTokens"}
    for handler in settings["handlers"].values():
        handler["filters"] = [*handler.get("filters", []), "redact_tokens"]
    settings["filters"]["without_parser_warnings"] = {"()": "turbdb.service.logs.WithoutParserWarnings"}
    error_logger = settings["loggers"].setdefault("uvicorn.error", {})
    error_logger["filters"] = [*error_logger.get("filters", []), "without_parser_warnings"]
    return settings
