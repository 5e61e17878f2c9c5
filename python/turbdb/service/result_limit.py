"""The server's own result size limit (``TURBDB_MAX_RESULT_BYTES``, default half its
memory) as an HTTP caller meets it. ``GET /v1/limits`` states it (``max_result_bytes``), so
that a client splits its work within it, and its 413 says what a caller can do: the
library's message named ``turbdb.set_max_result_bytes``, a function of the server's own
process, and spoke of "calls"."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import Response

from ..exceptions import LimitExceededError, TurbdbError
from ..size_limit import max_result_bytes

#: The field of ``GET /v1/limits`` that holds the limit, in bytes.
LIMITS_FIELD = "max_result_bytes"

#: The library's words (size_limit.py, cutout.py, the bindings), and an HTTP caller's.
_HTTP_TERMS = (
    ("(turbdb.set_max_result_bytes)", f"(this server's limit, set by its operator with $TURBDB_MAX_RESULT_BYTES; "
                                      f"GET /v1/limits states it as {LIMITS_FIELD})"),
    ("one call may return", "one request to this server may return"),
    ("one call may use", "one request on this server may use"),
    ("per call", "per request"),
    ("several calls", "several requests"),
    ("fewer times per call", "fewer times per request"),
    ("raise the limit", "ask the server's operator to raise the limit"),
)


def current() -> int:
    """The limit in force in this process, in bytes."""
    return max_result_bytes()


def for_http(message: str) -> str:
    """``message`` of a result size refusal as an HTTP caller can act on it; other
    messages as they are."""
    if "one call may" not in message:  # the token's limits speak of requests already
        return message
    for library, http in _HTTP_TERMS:
        message = message.replace(library, http)
    if "operator with $TURBDB_MAX_RESULT_BYTES" not in message:  # the bindings' messages name no setting
        message += f" (this server's limit, set by its operator with $TURBDB_MAX_RESULT_BYTES; GET /v1/limits " \
                   f"states it as {LIMITS_FIELD})"
    return message


def install(app: FastAPI) -> None:
    """Answers a LimitExceededError in HTTP's words, then as every turbdb error is answered
    (the handler for :class:`TurbdbError`, which must be installed first)."""
    answer = app.exception_handlers[TurbdbError]

    async def reworded(request: Request, error: Exception) -> Response:
        if error.args and isinstance(error.args[0], str):
            error.args = (for_http(error.args[0]), *error.args[1:])
        return await answer(request, error)

    app.add_exception_handler(LimitExceededError, reworded)
