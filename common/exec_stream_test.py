"""`vendue exec`'s frames: what each side accepts and refuses."""

from __future__ import annotations

import json

import pytest

from common.exec_stream import (
    CHUNK_BYTES,
    STDERR,
    STDIN,
    STDOUT,
    ExecRequest,
    FrameError,
    control,
    data_frame,
    exit_status,
    parse_control,
    parse_data,
)


def test_a_data_frame_round_trips_with_its_stream() -> None:
    for stream in (STDIN, STDOUT, STDERR):
        frame = data_frame(stream, b"\x00\x03 bytes \xff")
        assert frame[0] == stream
        assert parse_data(frame, allowed=(stream,)) == (stream, b"\x00\x03 bytes \xff")


@pytest.mark.parametrize(("frame", "allowed", "why"), [
    (b"", (STDIN,), "empty"),
    (data_frame(STDOUT, b"x"), (STDIN,), "stream 1"),  # output sent towards the command
    (data_frame(STDIN, b"x"), (STDOUT, STDERR), "stream 0"),
    (bytes((7,)) + b"x", (STDIN,), "stream 7"),
    (data_frame(STDIN, b"x" * (CHUNK_BYTES + 1)), (STDIN,), "at most"),
])
def test_a_bad_data_frame_is_refused_saying_why(frame: bytes, allowed: tuple[int, ...], why: str) -> None:
    with pytest.raises(FrameError, match=why):
        parse_data(frame, allowed=allowed)


def test_control_frames_round_trip() -> None:
    assert parse_control(control(resize=[33, 101])) == {"resize": [33, 101]}
    assert parse_control(control(eof=True)) == {"eof": True}
    assert parse_control(control(exit=130)) == {"exit": 130}
    assert parse_control(control(error="no such instance")) == {"error": "no such instance"}
    start = parse_control(control(start={"argv": ["sh", "-c", "true"], "tty": True, "rows": 40, "cols": 120}))
    assert start["start"] == ExecRequest(argv=["sh", "-c", "true"], tty=True, rows=40, cols=120)


@pytest.mark.parametrize("text", [
    "not json", "[1]", json.dumps({"resize": [1, 2], "eof": True}), json.dumps({"resize": [0, 80]}),
    json.dumps({"resize": [24, 80, 1]}), json.dumps({"resize": [24.0, 80]}),
    json.dumps({"resize": [True, 80]}), json.dumps({"eof": False}), json.dumps({"exit": 256}),
    json.dumps({"exit": "0"}), json.dumps({"error": 1}),
    json.dumps({"start": {"argv": []}}), json.dumps({"start": {"argv": ["x"], "extra": 1}}),
    json.dumps({"start": {"argv": [""]}}), json.dumps({"kill": 9}),
])
def test_a_bad_control_frame_is_refused(text: str) -> None:
    with pytest.raises(FrameError):
        parse_control(text)


def test_exit_status_is_the_shells() -> None:
    assert [exit_status(code) for code in (0, 3, -2, -9)] == [0, 3, 130, 137]
