"""Webhook URL safety: refuse every URL that could make the service call into its own network.

A merchant registers a webhook URL and the service later POSTs events to it. Left unchecked, that is
a server-side request forgery hole: ``http://169.254.169.254/`` reads cloud credentials,
``http://127.0.0.1:6379/`` talks to a local Redis, a name that resolves to ``10.0.0.5`` reaches an
internal admin panel. :func:`check_webhook_url` is the one gate:

* only ``http`` and ``https``, in plain ASCII, no user-info, no backslashes, no blanks or control
  characters, at most :data:`MAX_URL_LENGTH` characters, a port from 1 to 65535;
* a numeric host must be a canonical dotted quad (``127.1``, ``2130706433``, ``0x7f000001`` and
  ``0177.0.0.1`` are refused rather than guessed at), an IPv6 host must be a bracketed literal
  without a zone id;
* a literal address is checked as it stands; a name is resolved once and *every* address it
  resolves to must be public (:func:`is_public_address`);
* the answer is a :class:`~paymentcore.ports.DeliveryTarget` carrying the checked ``address``, so
  the sender connects there and never resolves the name again (no DNS-rebinding window).

Refusals raise :class:`UnsafeUrlError`, whose ``reason`` is safe to show the merchant: it never
repeats the URL, its credentials or what an internal name resolved to.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Final

from paymentcore.ports import DeliveryTarget, Resolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_LENGTH: Final = 2048
DEFAULT_PORTS: Final[dict[str, int]] = {"http": 80, "https": 443}


class UnsafeUrlError(Exception):
    """A webhook URL was refused; ``reason`` says why, in words fit for the merchant."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


# --- addresses ------------------------------------------------------------------------------------

# Never a webhook receiver, whatever ``ipaddress`` thinks of them.
_DENIED_V4: Final = tuple(
    ipaddress.IPv4Network(network)
    for network in (
        "0.0.0.0/8",  # "this network", including the unspecified 0.0.0.0
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # carrier-grade NAT (also Alibaba's 100.100.100.200 metadata)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, home of 169.254.169.254 cloud metadata
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation TEST-NET-1
        "192.31.196.0/24",  # AS112
        "192.52.193.0/24",  # AMT
        "192.88.99.0/24",  # deprecated 6to4 relay anycast
        "192.168.0.0/16",  # private
        "192.175.48.0/24",  # AS112 direct delegation
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation TEST-NET-2
        "203.0.113.0/24",  # documentation TEST-NET-3
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, including the limited broadcast 255.255.255.255
    )
)

_DENIED_V6: Final = tuple(
    ipaddress.IPv6Network(network)
    for network in (
        "::/96",  # unspecified ::, loopback ::1 and IPv4-compatible ::a.b.c.d
        "::ffff:0:0/96",  # IPv4-mapped
        "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
        "64:ff9b::/96",  # NAT64 well-known prefix
        "64:ff9b:1::/48",  # NAT64 local-use prefix
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments: Teredo, ORCHID, ORCHIDv2, benchmarking, ...
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4, which embeds an arbitrary IPv4 address
        "3fff::/20",  # documentation
        "5f00::/16",  # SRv6 SIDs
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)

# IPv6 unicast outside 2000::/3 is not handed out on the internet today.
_GLOBAL_UNICAST_V6: Final = ipaddress.IPv6Network("2000::/3")

# What ``allow_private`` opens up for local development: loopback, RFC 1918, CGNAT and ULA. Not
# link-local, not the cloud metadata services, not multicast, broadcast or unspecified.
_LOCAL_V4: Final = tuple(
    ipaddress.IPv4Network(network)
    for network in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
)
_LOCAL_V6: Final = tuple(ipaddress.IPv6Network(network) for network in ("::1/128", "fc00::/7"))
_METADATA_V4: Final = frozenset(
    ipaddress.IPv4Address(address) for address in ("100.100.100.200", "169.254.169.254", "169.254.170.2")
)
_METADATA_V6: Final = ipaddress.IPv6Network("fd00:ec2::/32")  # AWS metadata, DNS and time service


def is_public_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True only for a globally routable unicast address a webhook receiver may live at.

    ``ipaddress``'s ``is_global`` alone is not enough: it calls NAT64, 6to4 and IPv4-compatible
    addresses (``::127.0.0.1``) global although they can lead straight back to a private host. The
    address must pass an explicit deny-list *and* ``is_global``.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id is not None or ip not in _GLOBAL_UNICAST_V6:
            return False
        if any(ip in network for network in _DENIED_V6):
            return False
    elif any(ip in network for network in _DENIED_V4):
        return False
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_link_local or ip.is_private)


def _is_local_development_address(ip: IPAddress) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id is not None or ip in _METADATA_V6:
            return False
        return any(ip in network for network in _LOCAL_V6)
    if ip in _METADATA_V4:
        return False
    return any(ip in network for network in _LOCAL_V4)


def _check_address(ip: IPAddress, *, allow_private: bool, literal: bool) -> None:
    if is_public_address(ip):
        return
    if allow_private and _is_local_development_address(ip):
        return
    if literal:
        raise UnsafeUrlError("the URL points at an address that is not publicly routable")
    raise UnsafeUrlError("the host name resolves to an address that is not publicly routable")


# --- host names -----------------------------------------------------------------------------------

# Cloud metadata and cluster-internal names: refused even with ``allow_private``.
_METADATA_NAMES: Final = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
        "metadata.tencentyun.com",
        "kubernetes",
        "kubernetes.default",
    }
)
_METADATA_SUFFIXES: Final = (".internal", ".arpa", ".svc")

# Names of this machine or its LAN: refused unless ``allow_private`` (with single-label names).
_LOCAL_NAMES: Final = frozenset(
    {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "broadcasthost"}
)
_LOCAL_SUFFIXES: Final = (".localhost", ".local", ".localdomain", ".lan", ".intranet", ".corp")

_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_LABEL: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# A last label WHATWG parsers would read as a number, so the whole host as an IPv4 address.
_NUMERIC_LABEL: Final = re.compile(r"0x[0-9a-f]*|[0-9]+")
_CANONICAL_OCTET: Final = re.compile(r"0|[1-9][0-9]{0,2}")
_PORT: Final = re.compile(r"[0-9]{1,5}")


def _check_name(host: str, *, allow_private: bool) -> None:
    if host.endswith("."):
        raise UnsafeUrlError("the host name must not end with a dot")
    if len(host) > 253:
        raise UnsafeUrlError("the host name is too long")
    labels = host.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise UnsafeUrlError(
            "the host name is not valid: use letters, digits, hyphens and dots only "
            "(write an international name in punycode, xn--)"
        )
    if host in _METADATA_NAMES or host.endswith(_METADATA_SUFFIXES):
        raise UnsafeUrlError("the host name belongs to an internal or cloud metadata service")
    if allow_private:
        return
    if host in _LOCAL_NAMES or host.endswith(_LOCAL_SUFFIXES):
        raise UnsafeUrlError("the host name refers to this machine or a local network")
    if len(labels) == 1:
        raise UnsafeUrlError("the host name must be a fully qualified domain name")


def _numeric_host(host: str) -> ipaddress.IPv4Address | None:
    """The address of a host written as a number, or None for a name.

    Only the canonical dotted quad is accepted; every other numeric spelling is refused instead of
    being interpreted, because resolvers and HTTP libraries disagree on what they mean.
    """
    labels = host.rstrip(".").split(".")
    if not _NUMERIC_LABEL.fullmatch(labels[-1]):
        return None
    canonical = (
        not host.endswith(".")
        and len(labels) == 4
        and all(_CANONICAL_OCTET.fullmatch(label) and int(label) <= 255 for label in labels)
    )
    if not canonical:
        raise UnsafeUrlError(
            "a numeric host must be written as a plain dotted-quad IPv4 address such as 203.0.113.10"
        )
    return ipaddress.IPv4Address(host)


# --- resolution -----------------------------------------------------------------------------------


def system_resolver(host: str, port: int) -> list[str]:
    """Every IPv4 and IPv6 address ``host`` resolves to for a TCP connection, in resolver order."""
    try:
        answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    addresses: list[str] = []
    for family, _kind, _proto, _canonname, sockaddr in answers:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        address = sockaddr[0]
        if isinstance(address, str) and address not in addresses:
            addresses.append(address)
    return addresses


def _resolve(resolver: Resolver, host: str, port: int) -> list[IPAddress]:
    try:
        answers = resolver(host, port)
    except (OSError, UnicodeError):
        raise UnsafeUrlError("the host name could not be resolved") from None
    if not answers:
        raise UnsafeUrlError("the host name does not resolve to any address")
    addresses: list[IPAddress] = []
    for answer in answers:
        if not isinstance(answer, str):
            raise UnsafeUrlError("the host name did not resolve to an IP address")
        try:
            addresses.append(ipaddress.ip_address(answer))
        except ValueError:
            raise UnsafeUrlError("the host name did not resolve to an IP address") from None
    return addresses


# --- the URL --------------------------------------------------------------------------------------


def _split_authority(authority: str) -> tuple[str, ipaddress.IPv6Address | None, str | None]:
    """(host, IPv6 literal or None, port text or None) of ``host[:port]`` or ``[v6][:port]``."""
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise UnsafeUrlError("the IPv6 address in the URL is missing its closing bracket")
        literal, after = authority[1:close], authority[close + 1 :]
        if after and not after.startswith(":"):
            raise UnsafeUrlError("unexpected characters follow the IPv6 address")
        try:
            ip = ipaddress.IPv6Address(literal)
        except ValueError:
            raise UnsafeUrlError("the host is not a valid IPv6 address") from None
        if ip.scope_id is not None:
            raise UnsafeUrlError("an IPv6 zone identifier is not accepted")
        return str(ip), ip, (after[1:] if after else None)
    if authority.count(":") > 1:
        raise UnsafeUrlError("the host and port are malformed (write an IPv6 address in square brackets)")
    host, colon, port_text = authority.partition(":")
    return host.lower(), None, (port_text if colon else None)


def check_webhook_url(
    url: str, *, resolver: Resolver = system_resolver, allow_private: bool = False
) -> DeliveryTarget:
    """Check a webhook URL and pin the address to deliver to; raise :class:`UnsafeUrlError` if unsafe.

    ``resolver`` is called at most once, with the host name and port. ``allow_private`` (local
    development only) also accepts loopback, RFC 1918, CGNAT and unique-local addresses, single-label
    names and ``localhost``; every other rule still holds.
    """
    if not isinstance(url, str):
        raise UnsafeUrlError("the URL must be a string")
    if not url:
        raise UnsafeUrlError("the URL is empty")
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeUrlError(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if not url.isascii():
        raise UnsafeUrlError(
            "the URL must be plain ASCII: percent-encode the path and write an international "
            "host name in punycode (xn--)"
        )
    if any(char <= " " or char == "\x7f" for char in url):
        raise UnsafeUrlError("the URL must not contain spaces or control characters")
    if "\\" in url:
        raise UnsafeUrlError("the URL must not contain backslashes")

    match = _SCHEME.match(url)
    if match is None or not url.startswith("//", match.end()):
        raise UnsafeUrlError("the URL must start with http:// or https://")
    scheme = match.group(1).lower()
    if scheme not in DEFAULT_PORTS:
        raise UnsafeUrlError("only http and https URLs are accepted")

    rest = url[match.end() + 2 :].partition("#")[0]  # the fragment never leaves the client
    end = min((index for index in (rest.find("/"), rest.find("?")) if index >= 0), default=len(rest))
    authority, remainder = rest[:end], rest[end:]
    if "@" in authority:
        raise UnsafeUrlError("the URL must not contain a user name or password")
    if "%" in authority:
        raise UnsafeUrlError("the host must not be percent-encoded or carry an IPv6 zone identifier")

    host, ipv6, port_text = _split_authority(authority)
    if not host:
        raise UnsafeUrlError("the URL has no host")
    if port_text is None:
        port = DEFAULT_PORTS[scheme]
    elif _PORT.fullmatch(port_text) and 1 <= int(port_text) <= 65535:
        port = int(port_text)
    else:
        raise UnsafeUrlError("the port must be a number from 1 to 65535")

    target = remainder or "/"
    if target.startswith("?"):
        target = "/" + target

    addresses: list[IPAddress]
    literal: IPAddress | None = ipv6 if ipv6 is not None else _numeric_host(host)
    if literal is not None:
        addresses = [literal]
        _check_address(literal, allow_private=allow_private, literal=True)
    else:
        _check_name(host, allow_private=allow_private)
        addresses = _resolve(resolver, host, port)
        for address in addresses:
            _check_address(address, allow_private=allow_private, literal=False)

    url_host = f"[{host}]" if ":" in host else host
    url_port = "" if port == DEFAULT_PORTS[scheme] else f":{port}"
    return DeliveryTarget(
        url=f"{scheme}://{url_host}{url_port}{target}",
        scheme=scheme,
        host=host,
        port=port,
        target=target,
        address=str(addresses[0]),
    )
