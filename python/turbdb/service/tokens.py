"""Who may ask what: the tokens file (TOML), each token's limits, and a per-token rate
limiter. Anonymous requests get small limits, like JHTDB without a personal token.

A tokens file::

    [anonymous]                  # requests without a token; omit the table for the defaults
    allowed = true               # false: every request needs a token
    max_points = 4096            # points per request (JHTDB's limit without a token)
    requests_per_minute = 60
    datasets = ["*"]             # dataset names, or "*" for all

    [[token]]
    token = "alice-7f3a9c2e51d8"  # the secret a client sends (or sha256 = "<hex digest>")
    name = "alice"               # shown in logs and metrics, never the secret itself
    max_points = 10_000_000
    requests_per_minute = 1200
    datasets = ["*"]
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import ipaddress
import math
import os
import re
import time
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..exceptions import AccessDeniedError, FormatError, LimitExceededError

# JHTDB answers up to 4096 points without a personal token.
ANONYMOUS_MAX_POINTS = 4096
ANONYMOUS_REQUESTS_PER_MINUTE = 60
# Rate-limit buckets kept; past this, the one used longest ago is forgotten (its address
# starts afresh). Pruned as a whole, the dict cost 20 ms a request once it held 100 000.
MAX_BUCKETS = 100_000
# Requests with a wrong token an address may send a minute (a minute's worth in a burst):
# refused with 401 before the rate limit, guesses at a secret were never slowed.
FAILED_TOKENS_PER_MINUTE = 30
# An IPv6 client is counted by its /64: one host is given a whole /64 and picks addresses in it.
IPV6_CLIENT_PREFIX = 64
# The token every JHTDB client script ships with: treated as no token at all.
JHTDB_TESTING_TOKEN = "edu.jhu.pha.turbulence.testing-201406"
# What a caller without a token is told where anonymous use is off.
TOKEN_NEEDED = ("this server needs a token: pass turbdb.connect(url, token=…), send the header Authorization: Bearer "
                "<token>, or authToken=<token> (or token=<token>) on the JHTDB endpoints")


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one token (or anonymous use) may do."""

    name: str
    max_points: int
    requests_per_minute: float
    datasets: tuple[str, ...] = ("*",)

    def allows(self, dataset: str) -> bool:
        return "*" in self.datasets or dataset in self.datasets

    def check_dataset(self, dataset: str) -> None:
        if not self.allows(dataset):
            anonymous = self.name == "anonymous"
            who = "anonymous use" if anonymous else f"token {self.name!r}"
            remedy = "send a token that may read it" if anonymous else "ask the server's operator to add it to your token"
            raise AccessDeniedError(
                f"{who} may not read dataset {dataset!r} (allowed: {', '.join(self.datasets) or 'none'}); {remedy}",
                status=403,
            )

    def check_points(self, points: int, what: str = "points") -> None:
        if points > self.max_points:
            hint = ("send a personal token (turbdb.connect(url, token=…) or Authorization: Bearer …)"
                    if self.name == "anonymous" else "ask the server's operator for a larger limit")
            raise LimitExceededError(
                f"this request asks for {points:,} {what}; the limit of {self.name_phrase} is "
                f"{self.max_points:,} per request: split it into batches of at most {self.max_points:,} "
                f"(turbdb.connect does this by itself), or {hint}"
            )

    @property
    def name_phrase(self) -> str:
        return "anonymous use" if self.name == "anonymous" else f"token {self.name!r}"


class Tokens:
    """The tokens of one server and their rate limiters."""

    def __init__(self, tokens: Iterable[tuple[str, Limits]] = (), anonymous: Limits | None = None,
                 anonymous_allowed: bool = True):
        self._by_digest: dict[str, Limits] = {}
        self.plaintext = 0  #: tokens whose secret is written in the file (not its digest)
        for secret, limits in tokens:
            digest = secret[7:] if secret.startswith("sha256:") else _digest(secret)
            if secret.startswith("sha256:") and not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise FormatError(f"token {limits.name!r} is given as sha256:{digest[:16]}…, which is not a SHA-256 "
                                  "digest (64 lower-case hexadecimal digits), so no token could match it; write the "
                                  "secret as token = \"…\", or its digest as sha256 = \"<hex>\" (turbdb token NAME "
                                  "--hashed)")
            self.plaintext += not secret.startswith("sha256:")
            if digest in self._by_digest:
                raise FormatError(f"tokens {self._by_digest[digest].name!r} and {limits.name!r} have the same secret; "
                                  "give each token its own")
            self._by_digest[digest] = limits
        self.anonymous = anonymous or Limits("anonymous", ANONYMOUS_MAX_POINTS, ANONYMOUS_REQUESTS_PER_MINUTE)
        self.anonymous_allowed = anonymous_allowed
        self._buckets: collections.OrderedDict[str, _Bucket] = collections.OrderedDict()  # least recent first

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None) -> Tokens:
        """Reads a tokens file; ``None`` gives the defaults (anonymous use with small limits)."""
        if path is None:
            return cls()
        path = Path(path)
        try:
            document = tomllib.loads(path.read_text())
        except OSError as e:
            raise FormatError(f"cannot read the tokens file {path}: {e.strerror or e}") from None
        except tomllib.TOMLDecodeError as e:
            raise FormatError(f"the tokens file {path} is not valid TOML: {e}") from None
        return cls.from_document(document, str(path))

    @classmethod
    def from_document(cls, document: dict[str, Any], origin: str = "tokens") -> Tokens:
        unknown = set(document) - {"anonymous", "token"}
        if unknown:
            raise FormatError(f"{origin}: unknown table(s) {', '.join(sorted(unknown))}; expected [anonymous] and [[token]]")
        anon = document.get("anonymous", {})
        if not isinstance(anon, dict):
            raise FormatError(f"{origin}: anonymous must be a table, [anonymous], not {anon!r}")
        anonymous = _limits(anon, "anonymous", origin, ANONYMOUS_MAX_POINTS, ANONYMOUS_REQUESTS_PER_MINUTE,
                            extra={"allowed"})
        allowed = anon.get("allowed", True)
        if not isinstance(allowed, bool):  # "false" is a non-empty string: bool() of it left anonymous use on
            raise FormatError(f"{origin}: [anonymous] allowed must be true or false (no quotes), not {allowed!r}")
        tables = document.get("token", [])
        if not (isinstance(tables, list) and all(isinstance(t, dict) for t in tables)):
            raise FormatError(f"{origin}: tokens are [[token]] tables, each with token = \"…\" or sha256 = \"…\"; "
                              f"found token = {tables!r}")
        entries, names = [], set()
        for i, entry in enumerate(tables):
            secret = entry.get("token")
            digest = entry.get("sha256")
            if (secret is None) == (digest is None) or not isinstance(secret or digest, str) or not (secret or digest):
                raise FormatError(f"{origin}: token entry {i + 1} needs exactly one of token = \"…\" or sha256 = \"…\"")
            problem = unsendable(secret) if secret is not None else None
            if problem:
                raise FormatError(f"{origin}: the secret of token entry {i + 1} could never be sent: {problem}")
            if digest is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
                raise FormatError(f"{origin}: the sha256 of token entry {i + 1} is not 64 hexadecimal digits, so no "
                                  "token could match it; make it with turbdb token NAME --hashed")
            name = str(entry.get("name", f"token{i + 1}"))
            if name == "anonymous":
                raise FormatError(f"{origin}: token entry {i + 1} is named 'anonymous', the name of use without a "
                                  "token (set its limits under [anonymous]); give the token another name")
            if name in names:  # a name is a rate-limit bucket: two would share one
                raise FormatError(f"{origin}: token entry {i + 1} is named {name!r}, as another is; give each its own "
                                  "name (its requests are counted by name)")
            names.add(name)
            limits = _limits(entry, name, origin, 1_000_000, 600, extra={"token", "sha256", "name"})
            entries.append((secret if secret is not None else f"sha256:{digest.lower()}", limits))
        return cls(entries, anonymous, allowed)

    def named(self) -> list[tuple[str, Limits]]:
        """Each token's name and limits (never the secret), in the file's order."""
        return [(limits.name, limits) for limits in self._by_digest.values()]

    def largest_max_points(self) -> int:
        """The largest point limit of any token (or anonymous use)."""
        return max([self.anonymous.max_points, *(limits.max_points for limits in self._by_digest.values())])

    def __contains__(self, token: str) -> bool:
        """Whether ``token`` is one of the file's tokens."""
        return _digest(token) in self._by_digest

    def identify(self, token: str | None) -> Limits:
        """The limits of ``token`` (``None`` or empty: anonymous), or AccessDeniedError."""
        if not token or token == JHTDB_TESTING_TOKEN:
            if not self.anonymous_allowed:
                raise AccessDeniedError(TOKEN_NEEDED, status=401)
            return self.anonymous
        limits = self._by_digest.get(_digest(token))
        if limits is None:
            raise AccessDeniedError(
                "the token is not recognised by this server; check it for typos or ask the server's operator for one",
                status=401,
            )
        return limits

    def take(self, limits: Limits, now: float | None = None, key: str | None = None) -> None:
        """Counts one request against the token's rate (or the rate of ``key``, for
        anonymous callers by address); LimitExceededError when over it."""
        wait = self._wait(key or limits.name, limits.requests_per_minute, now)
        if wait > 0:
            raise LimitExceededError(
                f"{limits.name_phrase} may send {rate_text(limits.requests_per_minute)} requests per minute; "
                f"wait {wait:.1f} s, or send fewer, larger batches",
                retry_after=wait,
            )

    def take_failure(self, client: str, now: float | None = None) -> None:
        """Counts a request with a wrong token against its address's
        ``FAILED_TOKENS_PER_MINUTE``; LimitExceededError (429) when over it."""
        wait = self._wait(f"failed-token@{client}", FAILED_TOKENS_PER_MINUTE, now)
        if wait > 0:
            raise LimitExceededError(
                f"this address sent too many requests with a token this server does not know (at most "
                f"{FAILED_TOKENS_PER_MINUTE} a minute); wait {wait:.1f} s and check the token", retry_after=wait)

    def _wait(self, key: str, per_minute: float, now: float | None) -> float:
        """Takes one request from the bucket of ``key``: the seconds to wait, 0 when it may go."""
        now = time.monotonic() if now is None else now
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._buckets.popitem(last=False)
            bucket = self._buckets[key] = _Bucket(per_minute)
        else:
            self._buckets.move_to_end(key)
        return bucket.take(now)


class _Bucket:
    """A token bucket: ``rate`` requests per minute, bursts up to a minute's worth."""

    def __init__(self, per_minute: float):
        self.capacity = max(1.0, per_minute)
        self.rate = per_minute / 60.0
        self.level = self.capacity
        self.stamp: float | None = None

    def take(self, now: float) -> float:
        if self.stamp is not None:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.level >= 1.0:
            self.level -= 1.0
            return 0.0
        return (1.0 - self.level) / self.rate if self.rate > 0 else math.inf


def rate_text(per_minute: float) -> str:
    """A rate as written in a tokens file and said in messages: every digit of a whole
    number (``:g`` turned 1234567 into 1.23457e+06, which the file then granted)."""
    return str(int(per_minute)) if float(per_minute).is_integer() else repr(float(per_minute))


def client_key(host: str) -> str:
    """The client a limit counts: an IPv4 address as it is, an IPv6 one by its /64 (a
    host picks any address of its /64, each a fresh rate and connection count)."""
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.split("%")[0])
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return f"{ipaddress.IPv6Network((address, IPV6_CLIENT_PREFIX), strict=False)}"


def unsendable(token: str) -> str | None:
    """Why ``token`` cannot travel in an HTTP header (``Authorization: Bearer …``, which
    carries visible ASCII only), or ``None`` if it can."""
    for position, char in enumerate(token):
        if not ("!" <= char <= "~"):
            hint = (" ('…' in the documentation's examples stands for the rest of a token: use the whole of yours)"
                    if char == "\u2026" else "")
            return (f"its character {position + 1}, {char!r} (U+{ord(char):04X}), is not a visible ASCII character, "
                    f"and HTTP headers carry nothing else{hint}; tokens are letters, digits and punctuation, e.g. "
                    "made by python -c 'import secrets; print(secrets.token_urlsafe(24))'")
    return None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _limits(table: dict[str, Any], name: str, origin: str, points: int, rate: float, extra: set[str]) -> Limits:
    unknown = set(table) - {"max_points", "requests_per_minute", "datasets"} - extra
    if unknown:
        raise FormatError(f"{origin}: [{name}] has unknown key(s) {', '.join(sorted(unknown))}")
    max_points = table.get("max_points", points)
    per_minute = table.get("requests_per_minute", rate)
    datasets = table.get("datasets", ["*"])
    if not (isinstance(max_points, int) and not isinstance(max_points, bool) and max_points >= 1):
        raise FormatError(f"{origin}: [{name}] max_points must be a positive integer, not {max_points!r}")
    if not (isinstance(per_minute, (int, float)) and not isinstance(per_minute, bool) and per_minute > 0
            and math.isfinite(per_minute)):
        raise FormatError(f"{origin}: [{name}] requests_per_minute must be a positive, finite number, not {per_minute!r}")
    if not (isinstance(datasets, list) and all(isinstance(d, str) for d in datasets)):
        raise FormatError(f"{origin}: [{name}] datasets must be a list of names, e.g. [\"*\"] or [\"isotropic64\"]")
    return Limits(name, max_points, float(per_minute), tuple(datasets))
