"""Reverse proxies the server trusts (``serve(forwarded_allow_ips=…)``): a request that comes
from one of them is taken to come from the client its ``X-Forwarded-For`` names, over the
scheme its ``X-Forwarded-Proto`` names, under the path its ``X-Forwarded-Prefix`` names (the
root path of its links). From any other peer those headers are ignored: any process that
can connect would otherwise choose the address it is rated, logged and owns jobs under.
None are trusted by default."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from ..exceptions import InvalidRequestError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Segments of letters, digits and -._~+@ only: the prefix is written into pages and scripts
# (/docs puts it in a JavaScript string), and a proxy may pass on what its client sent.
_PREFIX = re.compile(r"(?:/[A-Za-z0-9._~+@-]+)*")


class TrustedProxies:
    """The addresses and networks (``10.0.0.0/8``) of trusted proxies, or every peer (``*``)."""

    def __init__(self, proxies: str | Iterable[str]):
        entries = proxies.split(",") if isinstance(proxies, str) else list(proxies)
        entries = [e.strip() for e in entries if e.strip()]
        if not entries:
            raise InvalidRequestError("forwarded_allow_ips names no proxy: give their addresses or networks, such as "
                                      "127.0.0.1 or 10.0.0.0/8 (or * for any peer)")
        self.any = "*" in entries
        self.networks: list[Network] = []
        for entry in entries:
            if entry == "*":
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                # uvicorn took a typo for a host name that never matched: refused here instead.
                raise InvalidRequestError(
                    f"{entry!r} in forwarded_allow_ips is not an IP address or network: give addresses such as "
                    "127.0.0.1 or ::1, or networks such as 10.0.0.0/8") from None

    def __contains__(self, host: str) -> bool:
        if self.any:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        address = getattr(address, "ipv4_mapped", None) or address  # ::ffff:10.0.0.1 on a server bound to ::
        return any(address in network for network in self.networks)

    def __str__(self) -> str:
        return "any peer" if self.any else ", ".join(str(n) for n in self.networks)

    def client(self, peer: tuple[str, int],
               headers: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[str, int], str | None]:
        """The client a request from ``peer`` came from, and the scheme it used (None: as
        received): the last address in ``X-Forwarded-For`` that is not a trusted proxy
        (each proxy appends the address it got the request from, so those before it are the
        client's own word), when ``peer`` is trusted; else ``peer``. With ``*`` the last
        address, the one the proxy in front of the server saw."""
        if peer[0] not in self:
            return peer, None
        forwarded, scheme = [], None
        for name, value in headers:
            if name == b"x-forwarded-for":
                forwarded.extend(v.strip() for v in value.decode("latin-1").split(","))
            elif name == b"x-forwarded-proto":
                proto = value.decode("latin-1").strip().lower()
                scheme = proto if proto in ("http", "https") else scheme
        hops = [_host_port(hop) for hop in forwarded if hop]
        # From the proxy next to us back: a hop that is no IP address ("unknown", text the
        # client wrote) ends the trusted chain, and the last good one is the client.
        trusted: list[tuple[str, int]] = []
        for hop in reversed(hops):
            if hop is None:
                break
            trusted.append(hop)
            if self.any or hop[0] not in self:  # with *: the address the proxy next to us saw
                return hop, scheme
        if not trusted:
            return peer, scheme
        return trusted[-1], scheme  # every hop a proxy: the first one sent it


def _host_port(hop: str) -> tuple[str, int] | None:
    """``1.2.3.4``, ``1.2.3.4:5678``, ``::1`` or ``[::1]:5678`` as (host, port; 0 if none), or
    None for anything that is not an IP address with a valid port."""
    if hop.startswith("["):
        host, _, rest = hop[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif hop.count(":") == 1:
        host, _, port = hop.partition(":")
    else:
        host, port = hop, ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        return None
    return host, int(port) if port else 0


def forwarded_prefix(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The path ``X-Forwarded-Prefix`` says a proxy serves the server under (``/turbdb``; ""
    for none, from ``/``), or None when no such header is sent or it is not such a path. Several
    values, from proxies in a chain, are joined outermost first (``/site, /turbdb``:
    ``/site/turbdb``), as Spring and Traefik read them. For a trusted proxy's request only."""
    parts = [part.strip() for name, value in headers if name == b"x-forwarded-prefix"
             for part in value.decode("latin-1").split(",")]
    if not parts:
        return None
    prefix = "".join(part.rstrip("/") for part in parts)
    if not _PREFIX.fullmatch(prefix) or any(segment in (".", "..") for segment in prefix.split("/")):
        return None
    return prefix
