"""The library's messages name what a Python caller passes (``dtype='float32'``,
``filter_width``, ``turbdb.set_max_result_bytes``); a command's error names its options
instead. Each message is written once, for the API, and reworded here for the command line,
from the command's own options, so that a new option needs no entry."""

from __future__ import annotations

import re

import click

#: API names a command line cannot use, and what it uses instead.
_API_TERMS = {
    "(turbdb.set_max_result_bytes)": "(set by $TURBDB_MAX_RESULT_BYTES, e.g. TURBDB_MAX_RESULT_BYTES=8GiB)",
}

# How a server's messages tell a client to send a token: the Python client's way, then
# HTTP's (a header, or authToken= on the JHTDB endpoint), which a command sends for its user.
_TOKEN_ADVICE = re.compile(r"turbdb\.connect\(url, token=…\)(?:(?:,| or) (?:send the header )?Authorization: Bearer "
                           r"(?:<token>|…)(?:,? or authToken=<token>(?: \(or token=<token>\))? on the JHTDB endpoints?)?)?")
#: What a command that sends a token says instead (its --token, or the environment).
_COMMAND_TOKEN = "--token TOKEN, or set $TURBDB_TOKEN"
_ENVIRONMENT_TOKEN = "the token in $TURBDB_TOKEN"

# name='value', name=(a, b, c) or a bare name= (pass format=): a keyword argument, as the
# API's messages write one. A number after = (nu=0.1) is a value shown, not advice.
_KEYWORD = re.compile(r"(?<![\w.$-])([a-z][a-z0-9_]*)=('[^']*'|\([^)]*\)|(?=[\s;:,)]|$))")
# Names listed after a verb, as what is taken or needed: "does not take shape (…",
# "needs dtype and shape (…" (but not "needs time steps 3-5": a list ends at punctuation).
_LISTED = re.compile(r"\b(takes?|needs?|without) ([a-z][a-z0-9_]*(?:(?:, | and | or )[a-z][a-z0-9_]*)*)(?=\s*[(,;:.)]|$)")
# A quoted value not after `=`: a name or value the user gave.
_QUOTED = re.compile(r"(?<!=)'[^']*'")
# A Python name with an underscore (filter_width, dataset_path) is no word of English.
_IDENTIFIER = re.compile(r"(?<![\w.$/-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w=/-]|\.\w)")


def reworded(message: str, command: click.Command | None) -> str:
    """``message`` with the API's names replaced by ``command``'s options (``filter_width``
    by ``--filter-width``, ``dtype='float32'`` by ``--dtype float32``)."""
    for term, replacement in _API_TERMS.items():
        message = message.replace(term, replacement)
    flags = _flags(command)
    message = _TOKEN_ADVICE.sub(_COMMAND_TOKEN if "token" in flags else _ENVIRONMENT_TOKEN, message)
    if not flags:
        return message

    def keyword(match: re.Match[str]) -> str:
        flag = flags.get(match.group(1))
        if flag is None:
            return match.group(0)
        value = match.group(2)
        if value.startswith("'"):
            value = value[1:-1]
        elif value.startswith("("):
            value = ",".join(part.strip() for part in value[1:-1].split(","))
        return f"{flag} {value}" if value else flag

    def listed(match: re.Match[str]) -> str:
        names = re.split(r"(, | and | or )", match.group(2))
        if not all(flags.get(n) for n in names[::2]):  # English, or names of another command's
            return match.group(0)
        return f"{match.group(1)} " + "".join(flags[n] if i % 2 == 0 else n for i, n in enumerate(names))

    def plain(text: str) -> str:
        text = _KEYWORD.sub(keyword, text)
        text = _LISTED.sub(listed, text)
        return _IDENTIFIER.sub(lambda m: flags.get(m.group(1), m.group(0)), text)

    # A quoted value is the user's (a dataset named 'save_every'), never reworded; a value
    # quoted after `=` belongs to its keyword (dtype='float32').
    out, last = [], 0
    for quoted in _QUOTED.finditer(message):
        out += [plain(message[last:quoted.start()]), quoted.group(0)]
        last = quoted.end()
    return "".join(out) + plain(message[last:])


def _flags(command: click.Command | None) -> dict[str, str]:
    """The command's options by the Python names the API gives them: the parameter's own
    (fmt) and its flag's (format)."""
    flags: dict[str, str] = {}
    for param in command.params if command is not None else ():
        if not isinstance(param, click.Option):
            continue
        flag = max((o for o in param.opts if o.startswith("--")), key=len, default=None)
        if flag is None:
            continue
        flags[flag[2:].replace("-", "_")] = flag
        if param.name:
            flags.setdefault(param.name, flag)
    return flags
