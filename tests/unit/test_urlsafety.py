"""Webhook URL safety: the hostile URLs refused at registration, the good ones pinned correctly."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paymentcore._services.urlsafety import (
    MAX_URL_LENGTH,
    UnsafeUrlError,
    check_webhook_url,
    is_public_address,
    system_resolver,
)
from paymentcore.ports import DeliveryTarget

PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"

# What the stub DNS answers; a name missing from the table does not resolve.
DNS: dict[str, list[str]] = {
    "good.example": [PUBLIC_V4],
    "hooks.example.com": [PUBLIC_V4, PUBLIC_V6],
    "v6only.example": [PUBLIC_V6],
    "evil.example": ["127.0.0.1"],
    "rebind.example": [PUBLIC_V4, "10.0.0.1"],
    "rebind6.example": [PUBLIC_V6, "fd12:3456::1"],
    "nat64.example": ["64:ff9b::7f00:1"],
    "nat64local.example": ["64:ff9b:1::a00:1"],
    "six2four.example": ["2002:7f00:1::"],
    "mapped.example": ["::ffff:127.0.0.1"],
    "compat.example": ["::127.0.0.1"],
    "teredo.example": ["2001:0:4136:e378:8000:63bf:3fff:fdd2"],
    "orchid.example": ["2001:10::1"],
    "orchid2.example": ["2001:20::1"],
    "discard.example": ["100::1"],
    "ula.example": ["fd00:ec2::254"],
    "linklocal6.example": ["fe80::1"],
    "scoped6.example": ["fe80::1%eth0"],
    "sitelocal.example": ["fec0::1"],
    "doc6.example": ["2001:db8::1"],
    "doc6new.example": ["3fff::1"],
    "mcast6.example": ["ff02::1"],
    "loop6.example": ["::1"],
    "unspec6.example": ["::"],
    "private10.example": ["10.1.2.3"],
    "private172.example": ["172.20.0.5"],
    "private192.example": ["192.168.1.1"],
    "metadata-ip.example": ["169.254.169.254"],
    "cgnat.example": ["100.64.0.1"],
    "zero.example": ["0.0.0.0"],
    "zeronet.example": ["0.1.2.3"],
    "bench.example": ["198.18.0.1"],
    "testnet1.example": ["192.0.2.1"],
    "testnet2.example": ["198.51.100.7"],
    "testnet3.example": ["203.0.113.9"],
    "ietf.example": ["192.0.0.8"],
    "reserved.example": ["240.0.0.1"],
    "broadcast.example": ["255.255.255.255"],
    "mcast.example": ["224.0.0.1"],
    "garbage.example": ["not-an-address"],
    "localhost": ["127.0.0.1"],
    "devbox": ["192.168.1.20"],
}


class StubResolver:
    """A resolver over :data:`DNS` that remembers every question."""

    def __init__(self, table: dict[str, list[str]] | None = None) -> None:
        self.table = DNS if table is None else table
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        return list(self.table.get(host, []))


def check(url: str, *, allow_private: bool = False) -> DeliveryTarget:
    return check_webhook_url(url, resolver=StubResolver(), allow_private=allow_private)


HOSTILE: list[tuple[str, str]] = [
    # schemes and shape
    ("ftp", "ftp://good.example/hook"),
    ("file", "file:///etc/passwd"),
    ("javascript", "javascript:alert(1)"),
    ("gopher", "gopher://good.example:70/_SET%20x"),
    ("dict", "dict://good.example:11211/stat"),
    ("data", "data:text/plain,hello"),
    ("ws", "ws://good.example/socket"),
    ("no-scheme", "good.example/hook"),
    ("scheme-relative", "//good.example/hook"),
    ("no-slashes", "http:good.example/hook"),
    ("one-slash", "http:/good.example/hook"),
    ("empty", ""),
    ("too-long", "https://good.example/" + "a" * MAX_URL_LENGTH),
    # user-info
    ("user", "http://user@good.example/"),
    ("user-password", "http://user:pass@good.example/"),
    ("host-at-loopback", "http://good.example@127.0.0.1/"),
    ("empty-userinfo", "http://@good.example/"),
    ("encoded-at", "http://good.example%40evil.example/"),
    ("percent-host", "http://%67ood.example/"),
    # characters
    ("backslash-authority", "http://good.example\\@127.0.0.1/"),
    ("backslash-path", "http://good.example/\\..\\admin"),
    ("space-in-host", "http://good .example/"),
    ("leading-space", " http://good.example/"),
    ("tab", "http://good.example/\tx"),
    ("crlf-injection", "http://good.example/x\r\nHost: 127.0.0.1"),
    ("nul", "http://good.example\x00.evil/"),
    ("del", "http://good.example/\x7f"),
    # host and port shape
    ("no-host", "http:///hook"),
    ("port-only", "http://:8080/hook"),
    ("port-zero", "http://good.example:0/"),
    ("port-too-big", "http://good.example:65536/"),
    ("port-huge", "http://good.example:99999999/"),
    ("port-negative", "http://good.example:-1/"),
    ("port-letters", "http://good.example:http/"),
    ("port-empty", "http://good.example:/"),
    ("double-port", "http://good.example:80:80/"),
    ("trailing-dot-name", "http://good.example./"),
    ("empty-label", "http://good..example/"),
    ("hyphen-label", "http://-good.example/"),
    ("underscore", "http://under_score.example/"),
    # literal IPv4 in every refused range
    ("loopback", "http://127.0.0.1/"),
    ("loopback-other", "http://127.8.9.10:8080/"),
    ("private-10", "http://10.0.0.1/"),
    ("private-172", "http://172.16.0.1/"),
    ("private-172-top", "http://172.31.255.255/"),
    ("private-192", "http://192.168.0.1/"),
    ("metadata-ip", "http://169.254.169.254/latest/meta-data/"),
    ("ecs-metadata", "http://169.254.170.2/v2/credentials"),
    ("alibaba-metadata", "http://100.100.100.200/latest/meta-data/"),
    ("cgnat", "http://100.64.0.1/"),
    ("unspecified", "http://0.0.0.0/"),
    ("this-network", "http://0.1.2.3/"),
    ("broadcast", "http://255.255.255.255/"),
    ("multicast", "http://224.0.0.1/"),
    ("reserved", "http://240.0.0.1/"),
    ("benchmark", "http://198.18.0.1/"),
    ("benchmark-top", "http://198.19.255.254/"),
    ("testnet-1", "http://192.0.2.1/"),
    ("testnet-2", "http://198.51.100.1/"),
    ("testnet-3", "http://203.0.113.1/"),
    ("ietf-192-0-0", "http://192.0.0.1/"),
    # numeric encodings
    ("decimal", "http://2130706433/"),
    ("hex", "http://0x7f000001/"),
    ("octal", "http://017700000001/"),
    ("short-form", "http://127.1/"),
    ("three-part", "http://127.0.1/"),
    ("octal-dotted", "http://0177.0.0.1/"),
    ("hex-dotted", "http://0x7f.0.0.1/"),
    ("padded-octets", "http://127.000.000.001/"),
    ("trailing-dot-ip", "http://127.0.0.1./"),
    ("zero", "http://0/"),
    ("five-parts", "http://1.2.3.4.5/"),
    ("octet-overflow", "http://256.0.0.1/"),
    ("public-in-hex", "http://0x5db8d822/"),
    ("public-leading-zero", "http://93.184.216.034/"),
    ("uppercase-hex", "http://0X7F000001/"),
    # literal IPv6
    ("v6-loopback", "http://[::1]/"),
    ("v6-unspecified", "http://[::]/"),
    ("v6-mapped", "http://[::ffff:127.0.0.1]/"),
    ("v6-mapped-hex", "http://[::ffff:7f00:1]/"),
    ("v6-mapped-metadata", "http://[::ffff:169.254.169.254]/"),
    ("v6-compatible", "http://[::127.0.0.1]/"),
    ("v6-zone", "http://[fe80::1%25eth0]/"),
    ("v6-zone-raw", "http://[fe80::1%eth0]/"),
    ("v6-link-local", "http://[fe80::1]/"),
    ("v6-site-local", "http://[fec0::1]/"),
    ("v6-ula", "http://[fc00::1]/"),
    ("v6-aws-metadata", "http://[fd00:ec2::254]/"),
    ("v6-nat64", "http://[64:ff9b::7f00:1]/"),
    ("v6-nat64-local", "http://[64:ff9b:1::a00:1]/"),
    ("v6-6to4", "http://[2002:7f00:1::]/"),
    ("v6-teredo", "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/"),
    ("v6-documentation", "http://[2001:db8::1]/"),
    ("v6-documentation-new", "http://[3fff::1]/"),
    ("v6-discard", "http://[100::1]/"),
    ("v6-orchid", "http://[2001:10::1]/"),
    ("v6-multicast", "http://[ff02::1]/"),
    ("v6-ipvfuture", "http://[v1.fe80::a]/"),
    ("v6-unterminated", "http://[::1/"),
    ("v6-unbracketed", "http://::1/"),
    ("v6-junk-after", "http://[2606:4700::1111]x/"),
    # metadata and local names
    ("localhost", "http://localhost/"),
    ("localhost-upper", "http://LOCALHOST:8080/"),
    ("sub-localhost", "http://app.localhost/"),
    ("gcp-metadata", "http://metadata.google.internal/computeMetadata/v1/"),
    ("bare-metadata", "http://metadata/"),
    ("instance-data", "http://instance-data/latest/"),
    ("ec2-instance-data", "http://instance-data.ec2.internal/"),
    ("any-internal", "http://billing.corp.internal/"),
    ("mdns", "http://printer.local/"),
    ("k8s-service", "http://kubernetes.default.svc/"),
    ("reverse-dns", "http://1.0.0.127.in-addr.arpa/"),
    ("single-label", "http://devbox/"),
    # unicode and IDNA tricks
    ("fullwidth-localhost", "http://ｌｏｃａｌｈｏｓｔ/"),
    ("ideographic-dots", "http://127。0。0。1/"),
    ("circled-letters", "http://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ/"),
    ("cyrillic-o", "http://gооd.example/"),
    ("zero-width-space", "http://good\u200b.example/"),
    ("fullwidth-digits", "http://１２７.0.0.1/"),
    # names resolving somewhere they must not
    ("resolves-loopback", "http://evil.example/"),
    ("rebind-one-private", "https://rebind.example/hook"),
    ("rebind-one-private-v6", "https://rebind6.example/hook"),
    ("resolves-nat64", "http://nat64.example/"),
    ("resolves-nat64-local", "http://nat64local.example/"),
    ("resolves-6to4", "http://six2four.example/"),
    ("resolves-mapped", "http://mapped.example/"),
    ("resolves-compat", "http://compat.example/"),
    ("resolves-teredo", "http://teredo.example/"),
    ("resolves-orchid", "http://orchid.example/"),
    ("resolves-orchid2", "http://orchid2.example/"),
    ("resolves-discard", "http://discard.example/"),
    ("resolves-ula", "http://ula.example/"),
    ("resolves-link-local-v6", "http://linklocal6.example/"),
    ("resolves-scoped-v6", "http://scoped6.example/"),
    ("resolves-site-local", "http://sitelocal.example/"),
    ("resolves-doc-v6", "http://doc6.example/"),
    ("resolves-doc-v6-new", "http://doc6new.example/"),
    ("resolves-multicast-v6", "http://mcast6.example/"),
    ("resolves-loopback-v6", "http://loop6.example/"),
    ("resolves-unspecified-v6", "http://unspec6.example/"),
    ("resolves-private-10", "http://private10.example/"),
    ("resolves-private-172", "http://private172.example/"),
    ("resolves-private-192", "http://private192.example/"),
    ("resolves-metadata", "http://metadata-ip.example/"),
    ("resolves-cgnat", "http://cgnat.example/"),
    ("resolves-zero", "http://zero.example/"),
    ("resolves-this-network", "http://zeronet.example/"),
    ("resolves-benchmark", "http://bench.example/"),
    ("resolves-testnet-1", "http://testnet1.example/"),
    ("resolves-testnet-2", "http://testnet2.example/"),
    ("resolves-testnet-3", "http://testnet3.example/"),
    ("resolves-ietf", "http://ietf.example/"),
    ("resolves-reserved", "http://reserved.example/"),
    ("resolves-broadcast", "http://broadcast.example/"),
    ("resolves-multicast", "http://mcast.example/"),
    ("resolves-garbage", "http://garbage.example/"),
    ("unresolvable", "http://nowhere.example/"),
]


def test_the_hostile_table_is_large_and_unambiguous() -> None:
    assert len(HOSTILE) >= 50
    assert len({label for label, _ in HOSTILE}) == len(HOSTILE)


@pytest.mark.parametrize(("label", "url"), HOSTILE, ids=[label for label, _ in HOSTILE])
def test_hostile_urls_are_refused(label: str, url: str) -> None:
    with pytest.raises(UnsafeUrlError) as caught:
        check(url)
    assert caught.value.reason
    assert str(caught.value) == caught.value.reason
    if label.startswith("resolves-") and label != "resolves-garbage":
        # refused for what the name resolves to, not for some accident of spelling
        assert "resolves to an address that is not publicly routable" in caught.value.reason


def test_the_reason_never_repeats_credentials_or_internal_answers() -> None:
    with pytest.raises(UnsafeUrlError) as caught:
        check("http://admin:s3cret-token@good.example/")
    assert "s3cret" not in caught.value.reason
    assert "admin" not in caught.value.reason
    with pytest.raises(UnsafeUrlError) as caught:
        check("https://rebind.example/hook")
    assert "10.0.0.1" not in caught.value.reason
    assert "rebind" not in caught.value.reason


def test_a_resolver_that_fails_is_a_refusal() -> None:
    def broken(host: str, port: int) -> list[str]:
        raise OSError("resolver down")

    with pytest.raises(UnsafeUrlError, match="could not be resolved"):
        check_webhook_url("https://good.example/", resolver=broken)


# --- accepted ---------------------------------------------------------------------------------------


def test_a_public_name_is_pinned_to_its_first_address() -> None:
    resolver = StubResolver()
    target = check_webhook_url("https://hooks.example.com/path?q=1", resolver=resolver)
    assert target == DeliveryTarget(
        url="https://hooks.example.com/path?q=1",
        scheme="https",
        host="hooks.example.com",
        port=443,
        target="/path?q=1",
        address=PUBLIC_V4,
    )
    assert resolver.calls == [("hooks.example.com", 443)]


def test_defaults_case_ports_and_fragments() -> None:
    target = check("HTTP://Good.Example")
    assert (target.url, target.scheme, target.host, target.port, target.target) == (
        "http://good.example/",
        "http",
        "good.example",
        80,
        "/",
    )
    target = check("https://good.example:8443/x/y?a=1&b=2#section")
    assert target.url == "https://good.example:8443/x/y?a=1&b=2"
    assert (target.port, target.target) == (8443, "/x/y?a=1&b=2")
    assert check("https://good.example?x=1").target == "/?x=1"
    assert check("https://good.example:443/").url == "https://good.example/"


def test_the_path_may_carry_what_the_authority_may_not() -> None:
    target = check("https://good.example/callback/@127.0.0.1?next=http://10.0.0.1/")
    assert target.host == "good.example"
    assert target.address == PUBLIC_V4
    assert target.target == "/callback/@127.0.0.1?next=http://10.0.0.1/"
    assert check("https://good.example#@127.0.0.1").target == "/"


def test_a_public_literal_is_not_resolved() -> None:
    resolver = StubResolver()
    target = check_webhook_url(f"https://{PUBLIC_V4}:8443/in", resolver=resolver)
    assert (target.host, target.address, target.port) == (PUBLIC_V4, PUBLIC_V4, 8443)
    target = check_webhook_url(f"https://[{PUBLIC_V6.upper()}]/in", resolver=resolver)
    assert (target.host, target.address) == (PUBLIC_V6, PUBLIC_V6)
    assert target.url == f"https://[{PUBLIC_V6}]/in"
    assert resolver.calls == []


def test_an_ipv6_only_name_and_punycode_are_fine() -> None:
    assert check("https://v6only.example/").address == PUBLIC_V6
    table = {"xn--bcher-kva.example": [PUBLIC_V4]}
    target = check_webhook_url("https://xn--bcher-kva.example/", resolver=StubResolver(table))
    assert target.host == "xn--bcher-kva.example"


def test_allow_private_accepts_loopback_for_local_development() -> None:
    target = check("http://127.0.0.1:8080/x", allow_private=True)
    assert target == DeliveryTarget(
        url="http://127.0.0.1:8080/x",
        scheme="http",
        host="127.0.0.1",
        port=8080,
        target="/x",
        address="127.0.0.1",
    )
    assert check("http://localhost:3000/hook", allow_private=True).address == "127.0.0.1"
    assert check("http://devbox/", allow_private=True).address == "192.168.1.20"
    assert check("http://[::1]:9000/", allow_private=True).address == "::1"
    assert check("http://evil.example/", allow_private=True).address == "127.0.0.1"
    assert check("https://rebind.example/", allow_private=True).address == PUBLIC_V4


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/",
        "http://user@127.0.0.1:8080/",
        "http://nowhere.example/",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.100.100.200/",
        "http://[fd00:ec2::254]/",
        "http://[fe80::1]/",
        "http://metadata.google.internal/",
        "http://metadata/",
        "http://0.0.0.0:8080/",
        "http://255.255.255.255/",
        "http://2130706433/",
        "http://127.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://metadata-ip.example/",
    ],
)
def test_allow_private_keeps_every_other_rule(url: str) -> None:
    with pytest.raises(UnsafeUrlError):
        check(url, allow_private=True)


# --- addresses ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e", PUBLIC_V6],
)
def test_public_addresses(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.255.255.255",
        "172.16.0.0",
        "192.168.255.255",
        "169.254.169.254",
        "100.64.0.0",
        "100.127.255.255",
        "0.0.0.0",
        "224.0.0.251",
        "239.255.255.250",
        "255.255.255.255",
        "240.0.0.0",
        "198.18.0.0",
        "198.19.255.255",
        "192.0.2.255",
        "198.51.100.0",
        "203.0.113.255",
        "192.0.0.9",
        "192.88.99.1",
        "::",
        "::1",
        "::127.0.0.1",
        "::8.8.8.8",
        "::ffff:8.8.8.8",
        "::ffff:0:8.8.8.8",
        "64:ff9b::808:808",
        "64:ff9b:1::1",
        "2002:808:808::1",
        "2001::1",
        "2001:10::1",
        "2001:20::1",
        "2001:2::1",
        "2001:db8:ffff::1",
        "3fff:fff::1",
        "100::",
        "fc00::1",
        "fdff:ffff::1",
        "fe80::1",
        "febf::1",
        "fec0::1",
        "ff0e::1",
        "5f00::1",
        "4000::1",
    ],
)
def test_non_public_addresses(address: str) -> None:
    assert not is_public_address(ipaddress.ip_address(address))


def test_a_scoped_ipv6_address_is_never_public() -> None:
    assert not is_public_address(ipaddress.IPv6Address(f"{PUBLIC_V6}%eth0"))


NON_PUBLIC_V4 = [
    ipaddress.IPv4Network(network)
    for network in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "100.64.0.0/10",
    )
]


@st.composite
def non_public_v4(draw: st.DrawFn) -> ipaddress.IPv4Address:
    network = draw(st.sampled_from(NON_PUBLIC_V4))
    offset = draw(st.integers(min_value=0, max_value=network.num_addresses - 1))
    return ipaddress.IPv4Address(int(network.network_address) + offset)


@settings(database=None)
@given(non_public_v4())
def test_private_loopback_link_local_and_cgnat_are_never_public(ip: ipaddress.IPv4Address) -> None:
    assert not is_public_address(ip)
    embedded = int(ip)
    # The same address smuggled inside IPv6: mapped, compatible, NAT64 and 6to4.
    for wrapped in (
        (0xFFFF << 32) | embedded,
        embedded,
        int(ipaddress.IPv6Address("64:ff9b::")) | embedded,
        int(ipaddress.IPv6Address("2002::")) | (embedded << 80),
    ):
        assert not is_public_address(ipaddress.IPv6Address(wrapped))
    with pytest.raises(UnsafeUrlError):
        check(f"http://{ip}/")


@settings(database=None)
@given(st.ip_addresses())
def test_nothing_python_calls_non_global_is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    if is_public_address(ip):
        assert ip.is_global
        assert not ip.is_multicast


# --- the system resolver --------------------------------------------------------------------------


def test_system_resolver_answers_a_literal_without_dns() -> None:
    assert system_resolver("127.0.0.1", 80) == ["127.0.0.1"]


def test_system_resolver_gives_nothing_for_an_unknown_name(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_name(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    assert system_resolver("nowhere.invalid", 443) == []


def test_system_resolver_deduplicates(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = socket.SocketKind.SOCK_STREAM
    answers = [
        (socket.AF_INET, stream, 6, "", (PUBLIC_V4, 443)),
        (socket.AF_INET6, stream, 6, "", (PUBLIC_V6, 443, 0, 0)),
        (socket.AF_INET, stream, 6, "", (PUBLIC_V4, 443)),
    ]

    def fake(*args: Any, **kwargs: Any) -> Any:
        return answers

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    assert system_resolver("hooks.example.com", 443) == [PUBLIC_V4, PUBLIC_V6]
