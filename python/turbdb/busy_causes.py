"""Why a turbdb server answered 503 Service Unavailable, read from its JSON error body
(``error`` names the exception, ``description`` says what is full): a client that waits
out and retries such answers counts them by cause (:class:`turbdb.remote.Throttling`), so
that a report does not call every 503 the engine's queue — ``workload replay`` did so for
the 503s of the server's cap on connections from one address, which more clients only
make worse."""

from __future__ import annotations

from typing import Any

#: The causes, by key, in words.
BUSY_CAUSES = {
    "engine_queue": "the node engine's queue full",
    "open_jobs": "the server's open jobs at their limit",
    "client_connections": "this address's connections or requests under way past the server's cap for one client",
    "server_connections": "the server's connections at their cap",
    "points_in_flight": "the server's points in flight at capacity",
    "shutting_down": "the server shutting down",
    "step_rewritten": "a step being rewritten",
    "other": "another cause (not a turbdb answer, or one this client does not know)",
}


def busy_cause(body: Any) -> str:
    """The key in :data:`BUSY_CAUSES` of a 503 whose JSON body is ``body`` (anything else,
    such as a proxy's page, is ``other``)."""
    if not isinstance(body, dict):
        return "other"
    error, description = body.get("error"), str(body.get("description", ""))
    if error == "EngineBusyError":  # the engine's own refusal, or the job registry's
        return "open_jobs" if "open jobs" in description else "engine_queue"
    if error == "LimitExceededError":  # a 503, not a 413: only the connection guards answer so
        return "client_connections"
    if error == "DatasetBusyError":
        return "step_rewritten"
    if error == "ServiceError":
        for phrase, cause in (("shutting down", "shutting_down"), ("connections", "server_connections"),
                              ("points in flight", "points_in_flight")):
            if phrase in description:
                return cause
    return "other"
