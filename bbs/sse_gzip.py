"""A gzip response body built from segments deflated once and shared by every response that sends them.

The event stream sends the same bytes to every unfiltered follower. Compressed per connection, that would
cost one compressor's work per follower; here each published batch is deflated once, with a fresh
compressor ended by a sync flush, into a `Segment`. Such a segment refers to nothing before it and ends on
a byte boundary, so any sequence of segments is one valid deflate stream (the way pigz joins the blocks it
compresses in parallel). A `GzipBody` wraps that stream for one response: the gzip header first, the
segments as they come, and at the end the final empty block and the trailer, whose CRC-32 it combines from
the segments' own (zlib's crc32_combine, written out below since Python's zlib does not offer it) rather
than reading every byte again.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

LEVEL = 1  # 7x on the BBS's events; level 6 is 8x at twice the CPU, once per batch either way
_CRC_POLY = 0xEDB88320  # CRC-32 (reflected), as gzip uses
# gzip (RFC 1952): magic, deflate, no flags, no mtime, no extra flags, OS unknown.
HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_FINAL_EMPTY_BLOCK = b"\x03\x00"  # a final fixed-Huffman block with no data: the deflate stream ends


@dataclass(frozen=True, slots=True)
class Segment:
    """`size` bytes whose CRC-32 is `crc`, deflated on their own into `deflated`; `shift` is what appending
    them multiplies a CRC by (x^(8·size) mod p), worked out once for every body that sends them."""

    deflated: bytes
    crc: int
    size: int
    shift: int


def segment(data: bytes, level: int = LEVEL) -> Segment:
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate: no zlib header
    deflated = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return Segment(deflated, zlib.crc32(data), len(data), _x_to_the_8n(len(data)))


class GzipBody:
    """One response's gzip member: `header`, then `add` for each segment in order, then `end`."""

    def __init__(self) -> None:
        self.crc = 0
        self.size = 0

    @staticmethod
    def header() -> bytes:
        return HEADER

    def add(self, part: Segment) -> bytes:
        self.crc = _combine_shifted(self.crc, part.crc, part.shift)
        self.size += part.size
        return part.deflated

    def end(self) -> bytes:
        return _FINAL_EMPTY_BLOCK + struct.pack("<II", self.crc, self.size & 0xFFFFFFFF)


def _multiply_mod_p(a: int, b: int) -> int:
    """a(x) * b(x) modulo the CRC polynomial, in the reflected bit order zlib uses."""
    product = 0
    bit = 1 << 31
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ _CRC_POLY if b & 1 else b >> 1
    return product


def _powers_of_x() -> list[int]:
    """x^(2^k) modulo p(x) for k = 0..31."""
    powers, power = [], 1 << 30  # x^1
    for _ in range(32):
        powers.append(power)
        power = _multiply_mod_p(power, power)
    return powers


_X_TO_2_TO_THE = _powers_of_x()


def _x_to_the_8n(n: int) -> int:
    """x^(8n) modulo p(x): what appending n zero bytes multiplies a CRC by."""
    power, k = 1 << 31, 3  # x^0; 8n = n * 2^3
    while n:
        if n & 1:
            power = _multiply_mod_p(_X_TO_2_TO_THE[k & 31], power)
        n >>= 1
        k += 1
    return power


def crc32_combine(crc1: int, crc2: int, size2: int) -> int:
    """The CRC-32 of A + B from A's CRC, B's CRC and B's length (zlib's crc32_combine)."""
    return _combine_shifted(crc1, crc2, _x_to_the_8n(size2))


def _combine_shifted(crc1: int, crc2: int, shift: int) -> int:
    """crc32_combine with B's shift (`_x_to_the_8n` of its length) given: a segment's is worked out once."""
    return _multiply_mod_p(shift, crc1) ^ crc2


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding header admits gzip (RFC 9110: `gzip` or `*`, without q=0)."""
    weights: dict[str, float] = {}
    for item in (accept_encoding or "").split(","):
        name, _, params = item.strip().partition(";")
        weight = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        if name:
            weights[name.strip().lower()] = weight
    return weights.get("gzip", weights.get("x-gzip", weights.get("*", 0.0))) > 0
