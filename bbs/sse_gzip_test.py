import gzip
import os
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bbs.sse_gzip import GzipBody, accepts_gzip, crc32_combine, segment


@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_crc32_combine_is_the_crc_of_the_concatenation(a: bytes, b: bytes) -> None:
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_crc32_combine_over_a_long_second_part() -> None:
    a, b = os.urandom(100), os.urandom(5_000_000)
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@given(st.lists(st.binary(max_size=2000), max_size=8))
def test_segments_deflated_apart_make_one_gzip_body(parts: list[bytes]) -> None:
    body = GzipBody()
    data = body.header() + b"".join(body.add(segment(p)) for p in parts) + body.end()
    assert gzip.decompress(data) == b"".join(parts)


def test_a_segment_is_read_as_it_comes_before_the_body_ends() -> None:
    body = GzipBody()
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert inflater.decompress(body.header()) == b""
    for text in (b"id: 1\nevent: a\n\n", b": heartbeat\n\n"):
        assert inflater.decompress(body.add(segment(text))) == text  # nothing held back: a sync flush
    assert not inflater.eof
    inflater.decompress(body.end())
    assert inflater.eof and inflater.unused_data == b""


@pytest.mark.parametrize(("header", "accepted"), [
    ("gzip, deflate, br, zstd", True), ("gzip", True), ("GZIP;q=0.5", True), ("*", True),
    ("x-gzip", True), (None, False), ("", False), ("identity", False), ("deflate, br", False),
    ("gzip;q=0", False), ("*;q=0", False), ("gzip;q=0, *", False), ("br, *;q=0.1", True),
    ("gzip;q=nonsense", False),
])
def test_accepts_gzip(header: str | None, accepted: bool) -> None:
    assert accepts_gzip(header) is accepted
