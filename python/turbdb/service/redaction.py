"""Keeps tokens out of the server's logs: uvicorn writes the full request line, query
string included, so ``authToken=<secret>`` (the JHTDB endpoint's token) would land in every
access log line. A filter on uvicorn's loggers rewrites each record's message and arguments
before any handler formats them."""

from __future__ import annotations

import logging
import re
import urllib.parse

#: Query parameters and headers whose values are secrets.
_SECRET = re.compile(r"(?i)((?:authtoken|token|access_token)=)[^&\s\"']*|(bearer\s+)[^\s\"',]+")
REDACTED = "[redacted]"
LOGGERS = ("uvicorn", "uvicorn.access", "uvicorn.error", "turbdb.access", "turbdb.service")


#: A query parameter, its name as sent (perhaps percent-encoded: ``auth%54oken`` reaches the
#: server as ``authToken``, and was logged in clear).
_PARAMETER = re.compile(r"(?<=[?&])([^=&\s?\"']+)=([^&\s\"']*)")
_SECRET_NAMES = {"authtoken", "token", "access_token"}


def redact(text: str) -> str:
    """``text`` with the value of every token parameter or Bearer credential replaced."""
    text = _SECRET.sub(lambda m: (m.group(1) or m.group(2)) + REDACTED, text)
    if "%" not in text and "+" not in text:
        return text

    def parameter(m: re.Match[str]) -> str:
        name = urllib.parse.unquote_plus(m.group(1))
        return f"{m.group(1)}={REDACTED}" if name.lower() in _SECRET_NAMES else m.group(0)

    return _PARAMETER.sub(parameter, text)


class RedactTokens(logging.Filter):
    """Redacts tokens in a record's message and in every string argument."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: redact(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True


def install() -> None:
    """Adds the filter to uvicorn's loggers (once)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())
