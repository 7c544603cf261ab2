"""URLs that come from outside: a rep's URL, a task's completion callback.

`http_url` is the wire models' check (an absolute http(s) URL with a host, bounded). `callback_refusal`
is what the BBS adds for a completion callback, which it will POST the finished task to: never a
link-local address (169.254.0.0/16, fe80::/10) and never a cloud metadata service (169.254.169.254,
fd00:ec2::254, metadata.google.internal), where a POST from inside the cluster could reach credentials,
unless the operator allowlisted that host (`vendue bbs --callback-allow HOST`). Addresses are read the
way the resolver reads them, so `http://2852039166/` or `http://0xa9.0xfe.0xa9.0xfe/` (169.254.169.254
spelled otherwise) are refused too, and so is every IPv6 spelling of a refused IPv4 address
(`::ffff:a.b.c.d`, `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`: `forbidden_address`). A name is
checked again just before each delivery, against every address it resolves to then (`resolved_refusal`):
anyone can point a name of their own at 169.254.169.254. (The HTTP client resolves the name once more to
connect: a name whose answer changes in between is not caught.)
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

MAX_URL_CHARS = 2_048
METADATA_HOSTS = frozenset(
    {"metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"}
)
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def http_url(text: str) -> str:
    """`text` if it is an absolute http(s) URL with a host (a ValueError saying what is wrong otherwise)."""
    if len(text) > MAX_URL_CHARS:
        raise ValueError(f"URL longer than {MAX_URL_CHARS} characters")
    if any(c in text for c in "\0\r\n\t "):
        raise ValueError("URL holds whitespace or a control character")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
    except ValueError as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"only http and https URLs are allowed, not {parts.scheme or 'a relative URL'}")
    if not parts.hostname:
        raise ValueError("the URL names no host")
    return text


def http_url_or_none(text: str | None) -> str | None:
    return None if text is None else http_url(text)


def host_address(host: str) -> Address | None:
    """The IP address `host` stands for when it is one, in any spelling the C resolver accepts (IPv4 as
    one number, hex or octal parts), else None (a name)."""
    host = host.strip("[]")
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # fe80::1%eth0: the zone says nothing
    except ValueError:
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(host))  # 2852039166, 0xa9.0xfe.0xa9.0xfe
        except (OSError, ValueError):
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 spelling carries, or None: IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible
    (::a.b.c.d, the high 96 bits zero), NAT64 (64:ff9b::a.b.c.d) and 6to4 (2002:aabb:ccdd::). Each of these
    can reach the IPv4 host on a dual-stack or translating network, so each is judged as that host."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    value = int(address)
    if value >> 32 == 0 and value > 1:  # :: and ::1 are not IPv4 addresses
        return ipaddress.IPv4Address(value & 0xFFFF_FFFF)
    if address in NAT64_PREFIX:
        return ipaddress.IPv4Address(value & 0xFFFF_FFFF)
    return None


def forbidden_address(address: Address) -> str | None:
    """Why nothing the cluster sends out may go to `address`, or None: a cloud metadata address or a
    link-local one, in any IPv6 spelling of a refused IPv4 address. The one filter for callback URLs and
    any other URL the cluster connects to on someone's word."""
    if address in METADATA_ADDRESSES:
        return f"{address} is a cloud metadata address"
    if address.is_link_local:
        return f"{address} is a link-local address"
    if isinstance(address, ipaddress.IPv6Address) and (inner := embedded_ipv4(address)) is not None:
        if (why := forbidden_address(inner)) is not None:
            return f"{address} carries {why}"
    return None


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").rstrip(".").lower()


def _allowed(host: str, allow: Iterable[str]) -> bool:
    return host in {h.strip("[]").rstrip(".").lower() for h in allow}


def callback_refusal(url: str, allow: Iterable[str] = ()) -> str | None:
    """Why the BBS must not POST a task's result to `url` (an http(s) URL already), or None. `allow`: hosts
    (names or addresses, as written in URLs) the operator allowlisted."""
    host = _host(url)
    if _allowed(host, allow):
        return None
    if host in METADATA_HOSTS:
        return f"{host} is a cloud metadata service"
    address = host_address(host)
    return forbidden_address(address) if address is not None else None


async def resolve(host: str) -> list[str]:
    """The addresses `host` resolves to now (none when it does not)."""
    import asyncio  # here, not at the top: the wire models import this module, and so does the CLI

    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []  # the delivery fails as it would have
    return [str(info[4][0]) for info in infos]


async def resolved_refusal(url: str, allow: Iterable[str] = ()) -> str | None:
    """callback_refusal, and for a name, also for every address it resolves to now."""
    refusal = callback_refusal(url, allow)
    host = _host(url)
    if refusal is not None or _allowed(host, allow) or host_address(host) is not None:
        return refusal
    for resolved in await resolve(host):
        address = host_address(resolved)
        if address is not None and (why := forbidden_address(address)) is not None:
            return f"{host} resolves to {why}"
    return None
