"""`vendue exec`'s wire (docs/exec.md): what the CLI, the BBS and the rep send each other over a WebSocket.

- A binary frame is bytes of one stream: its first byte says which (0 stdin, 1 stdout, 2 stderr), the rest
  is the data, at most CHUNK_BYTES of it. stdin travels towards the process, stdout and stderr back.
- A text frame is one JSON object of control: {"start": {...}} (the BBS to the rep: the ExecRequest, sent
  only once the rep's certificate was checked), {"resize": [rows, cols]}, {"eof": true} (stdin ended),
  and back {"exit": status} (the last frame: the command's exit status, 128 + N for a signal N) or
  {"error": "why"} (nothing ran, or the session broke; the close follows).

The same frames go from the CLI to the BBS and from the BBS to the rep: the BBS relays them unchanged, but
for the start, which it makes from the request's query.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

STDIN, STDOUT, STDERR = 0, 1, 2
CHUNK_BYTES = 32 * 1024  # the most data one frame carries: a read of the process's output, at most
MAX_ARGS = 256
MAX_ARG_CHARS = 4096
MAX_TERMINAL = 10_000  # rows or columns
# WebSocket close codes (RFC 6455 leaves 4000-4999 to applications): the session ended with an error frame.
CLOSE_ERROR = 4000


class FrameError(ValueError):
    """A frame that is not one of the above (the session is ended)."""


Dimension = Annotated[int, Field(ge=1, le=MAX_TERMINAL)]


class ExecRequest(BaseModel):
    """What to run in an instance: the program and its arguments, with a terminal of rows x cols or not."""

    model_config = ConfigDict(extra="forbid")

    argv: list[Annotated[str, Field(min_length=1, max_length=MAX_ARG_CHARS)]] = Field(
        min_length=1, max_length=MAX_ARGS)
    tty: bool = False
    rows: Dimension = 24
    cols: Dimension = 80


def data_frame(stream: int, data: bytes) -> bytes:
    return bytes((stream,)) + data


def parse_data(frame: bytes, *, allowed: tuple[int, ...]) -> tuple[int, bytes]:
    """(stream, data) of a binary frame whose stream is one of `allowed`."""
    if not frame:
        raise FrameError("an empty binary frame names no stream")
    stream = frame[0]
    if stream not in allowed:
        raise FrameError(f"stream {stream} is not expected here (only {', '.join(map(str, allowed))})")
    if len(frame) - 1 > CHUNK_BYTES:
        raise FrameError(f"a frame carries at most {CHUNK_BYTES} bytes, not {len(frame) - 1}")
    return stream, frame[1:]


def control(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"))


def parse_control(text: str) -> dict[str, Any]:
    """A control frame, checked: exactly one known key with a value of its kind."""
    try:
        message = json.loads(text)
    except ValueError:
        raise FrameError("a text frame is not JSON") from None
    if not isinstance(message, dict) or len(message) != 1:
        raise FrameError("a control frame is a JSON object of one key")
    (key, value), = message.items()
    if key == "resize":
        if (not isinstance(value, list) or len(value) != 2
                or not all(type(n) is int and 1 <= n <= MAX_TERMINAL for n in value)):
            raise FrameError(f"resize is [rows, cols], each 1..{MAX_TERMINAL}")
    elif key == "eof":
        if value is not True:
            raise FrameError("eof is true")
    elif key == "exit":
        if type(value) is not int or not 0 <= value <= 255:
            raise FrameError("exit is a status 0..255")
    elif key == "error":
        if not isinstance(value, str):
            raise FrameError("error is a string")
    elif key == "start":
        try:
            message["start"] = ExecRequest.model_validate(value)
        except ValidationError as exc:
            raise FrameError(f"start: {exc.errors()[0]['msg']}") from None
    else:
        raise FrameError(f"unknown control {key!r}")
    return message


def exit_status(returncode: int) -> int:
    """A process's exit status as a shell reports it: its code, or 128 + N when signal N ended it."""
    return 128 - returncode if returncode < 0 else returncode & 0xFF
