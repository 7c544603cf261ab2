"""The event stream parser against the examples of the WHATWG HTML standard's "Server-sent events" section
(each fed whole, line by line and a byte at a time), and the rules the BBS's stream leans on."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from common.sse import EventStreamParser, ServerSentEvent, aevents, events


def whole(stream: bytes) -> list[bytes]:
    return [stream]


def by_byte(stream: bytes) -> list[bytes]:
    return [stream[i : i + 1] for i in range(len(stream))]


def by_line(stream: bytes) -> list[bytes]:
    return stream.splitlines(keepends=True)


CHUNKINGS = pytest.mark.parametrize("chunked", [whole, by_byte, by_line])
Chunking = Callable[[bytes], list[bytes]]


def parsed(stream: bytes, chunked: Chunking) -> list[tuple[str, str, str]]:
    return [(e.type, e.data, e.last_event_id) for e in events(chunked(stream))]


@CHUNKINGS
def test_the_standards_stock_example_multi_line_data_joins_with_lf(chunked: Chunking) -> None:
    stream = b"data: YHOO\ndata: +2\ndata: 10\n\n"
    assert parsed(stream, chunked) == [("message", "YHOO\n+2\n10", "")]


@CHUNKINGS
def test_the_standards_first_example_the_last_event_has_no_blank_line_yet(chunked: Chunking) -> None:
    stream = (b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\n"
              b"data:  third event\n")
    # The comment dispatches nothing; `id` with no value resets the last event id; only one space after
    # the colon goes; the third event never saw its blank line, so it is not dispatched.
    assert parsed(stream, chunked) == [("message", "first event", "1"), ("message", "second event", "")]


@CHUNKINGS
def test_the_standards_second_example_a_field_without_colon_has_an_empty_value(chunked: Chunking) -> None:
    stream = b"data\n\ndata\ndata\n\ndata:"
    assert parsed(stream, chunked) == [("message", "", ""), ("message", "\n", "")]


@CHUNKINGS
def test_the_standards_third_example_one_space_after_the_colon_is_optional(chunked: Chunking) -> None:
    assert parsed(b"data:test\n\ndata: test\n\n", chunked) == [("message", "test", "")] * 2


@CHUNKINGS
def test_the_standards_event_types_example(chunked: Chunking) -> None:
    stream = b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\ndata: 113411\n\n"
    assert parsed(stream, chunked) == [("add", "73857293", ""), ("remove", "2153", ""), ("add", "113411", "")]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
@CHUNKINGS
def test_lines_end_in_lf_crlf_or_cr(chunked: Chunking, newline: bytes) -> None:
    stream = b"event: a\ndata: 1\ndata: 2\n\n".replace(b"\n", newline)
    assert parsed(stream, chunked) == [("a", "1\n2", "")]


@CHUNKINGS
def test_only_cr_and_lf_end_lines_not_the_other_unicode_line_breaks(chunked: Chunking) -> None:
    # What the BBS writes: JSON whose strings may hold U+2028, U+0085 or a form feed, unescaped.
    data = '{"reason": "a\u2028b\x85c\x0cd"}'
    assert parsed(f"data: {data}\n\n".encode(), chunked) == [("message", data, "")]


def test_a_character_split_across_chunks_and_a_leading_bom() -> None:
    stream = "\ufeffdata: café ✓\n\n".encode()
    assert parsed(stream, by_byte) == [("message", "café ✓", "")]
    assert parsed("data: \ufeffkept\n\n".encode(), whole) == [("message", "\ufeffkept", "")]  # not first


@CHUNKINGS
def test_heartbeat_comments_dispatch_nothing_once_an_id_was_seen(chunked: Chunking) -> None:
    stream = b": connected\n\nid: e-1\nevent: task_created\ndata: {}\n\n: heartbeat\n\n: heartbeat\n\n"
    assert parsed(stream, chunked) == [("task_created", "{}", "e-1")]


@CHUNKINGS
def test_the_last_event_id_holds_for_later_events_an_id_alone_dispatches_nothing(chunked: Chunking) -> None:
    parser = EventStreamParser()
    stream = b"id: 7\ndata: a\n\ndata: b\n\nid: 8\n\ndata: c\n\n"
    got = [(e.data, e.last_event_id) for e in events(chunked(stream), parser)]
    assert got == [("a", "7"), ("b", "7"), ("c", "8")]
    assert parser.last_event_id == "8"


@CHUNKINGS
def test_an_id_holding_nul_is_ignored(chunked: Chunking) -> None:
    stream = b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n"
    assert parsed(stream, chunked) == [("message", "a", "1"), ("message", "b", "1")]


@CHUNKINGS
def test_an_unterminated_event_at_the_end_is_discarded_with_its_id(chunked: Chunking) -> None:
    parser = EventStreamParser()
    stream = b"id: 1\ndata: kept\n\nid: 2\nevent: x\ndata: cut off\n"
    assert [e.data for e in events(chunked(stream), parser)] == ["kept"]
    assert parser.last_event_id == "1"  # what a reconnecting client sends: the cut event comes again


@CHUNKINGS
def test_retry_takes_ascii_digits_only_and_unknown_fields_are_ignored(chunked: Chunking) -> None:
    parser = EventStreamParser()
    stream = b"retry: 2500\nfoo: bar\ndata: a\n\nretry: 1x\nretry: \xd9\xa3\nretry:\ndata: b\n\n"
    assert [e.data for e in events(chunked(stream), parser)] == ["a", "b"]
    assert parser.retry_ms == 2500


def test_each_event_is_yielded_when_its_blank_line_arrives_not_at_the_end() -> None:
    sent: list[bytes] = []

    def stream() -> Iterator[bytes]:
        for chunk in (b"data: 1\n", b"\n", b"data: 2\n\n"):
            sent.append(chunk)
            yield chunk

    reader = events(stream())
    assert next(reader) == ServerSentEvent("message", "1", "")
    assert sent == [b"data: 1\n", b"\n"]  # the second event not yet read


async def test_aevents_reads_an_async_stream() -> None:
    async def stream():
        for chunk in by_byte(b"event: a\r\ndata: 1\r\n\r\ndata: 2\r\n"):
            yield chunk

    assert [(e.type, e.data) async for e in aevents(stream())] == [("a", "1")]
