"""The rep's exec relay (rep/exec_relay.py) in-process, with a scripted session: the start frame, output
out and input in as frames, the exit status last, the session closed however the socket ends; refusals
(no start, an unknown cell, the cap, the executor's own) as an error frame and a close."""

from __future__ import annotations

import asyncio
import json
import warnings
from types import SimpleNamespace

import pytest
from fastapi import FastAPI, WebSocket
from starlette.exceptions import StarletteDeprecationWarning
from starlette.websockets import WebSocketDisconnect

with warnings.catch_warnings():  # starlette would have its test client on httpx2: the httpx it has works
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

from common.exec_stream import CLOSE_ERROR, STDERR, STDIN, STDOUT, control, data_frame

from .exec_relay import ExecSlots, serve_exec
from .executor import ExecRefused, ExecSession

pytestmark = pytest.mark.filterwarnings("ignore::starlette.exceptions.StarletteDeprecationWarning")


class Scripted(ExecSession):
    """Echoes each input chunk back on stdout; its stdin's end makes it print to stderr and exit 3."""

    def __init__(self) -> None:
        self.out: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self.sizes: list[tuple[int, int]] = []
        self.closed = False

    async def read(self) -> tuple[int, bytes] | None:
        return await self.out.get()

    async def write(self, data: bytes) -> None:
        await self.out.put((STDOUT, data))

    def close_stdin(self) -> None:
        self.out.put_nowait((STDERR, b"bye"))
        self.out.put_nowait(None)

    def resize(self, rows: int, cols: int) -> None:
        self.sizes.append((rows, cols))

    async def wait(self) -> int:
        return 3

    def kill(self) -> None:
        self.closed = True

    async def close(self) -> None:
        self.closed = True


class Executor:
    def __init__(self) -> None:
        self.sessions: list[Scripted] = []
        self.asked: list[tuple[str, list[str], bool, int, int]] = []

    async def open_exec(self, guid: str, argv: list[str], tty: bool, rows: int, cols: int) -> ExecSession:
        self.asked.append((guid, argv, tty, rows, cols))
        if guid == "gone":
            raise ExecRefused("instance gone is not running on cell c1")
        self.sessions.append(Scripted())
        return self.sessions[-1]


def client(executor: Executor, slots: ExecSlots) -> TestClient:
    host = SimpleNamespace(cells={"c1": SimpleNamespace(retired=False, executor=executor)})
    app = FastAPI()

    @app.websocket("/instances/{guid}/exec")
    async def route(websocket: WebSocket, guid: str, cell: str) -> None:
        await serve_exec(websocket, host, slots, guid, cell)  # type: ignore[arg-type]

    return TestClient(app)


START = control(start={"argv": ["sh", "-c", "x"], "tty": True, "rows": 30, "cols": 90})


def test_a_session_relays_both_ways_and_ends_with_the_status() -> None:
    executor, slots = Executor(), ExecSlots()
    with client(executor, slots).websocket_connect("/instances/i1/exec?cell=c1") as ws:
        ws.send_text(START)
        ws.send_bytes(data_frame(STDIN, b"hello"))
        assert ws.receive_bytes() == data_frame(STDOUT, b"hello")
        ws.send_text(control(resize=[40, 100]))
        ws.send_text(control(eof=True))
        assert ws.receive_bytes() == data_frame(STDERR, b"bye")
        assert json.loads(ws.receive_text()) == {"exit": 3}
    assert executor.asked == [("i1", ["sh", "-c", "x"], True, 30, 90)]
    assert executor.sessions[0].sizes == [(40, 100)] and executor.sessions[0].closed
    assert slots.running == 0


def test_a_dropped_socket_closes_the_session() -> None:
    executor, slots = Executor(), ExecSlots()
    with client(executor, slots).websocket_connect("/instances/i1/exec?cell=c1") as ws:
        ws.send_text(START)
        ws.send_bytes(data_frame(STDIN, b"x"))
        assert ws.receive_bytes() == data_frame(STDOUT, b"x")
    # The socket went without an exit (the test client waits for the app to end): the command killed.
    assert executor.sessions[0].closed and slots.running == 0


@pytest.mark.parametrize(("first", "guid", "cell", "limit", "words"), [
    (control(eof=True), "i1", "c1", 16, "no start"),
    (START, "i1", "elsewhere", 16, "cell elsewhere is not on this rep"),
    (START, "i1", "c1", 0, "exec sessions already"),
    (START, "gone", "c1", 16, "not running"),
])
def test_a_refusal_is_an_error_frame_and_a_close(first: str, guid: str, cell: str, limit: int,
                                                  words: str) -> None:
    executor = Executor()
    with client(executor, ExecSlots(limit)).websocket_connect(f"/instances/{guid}/exec?cell={cell}") as ws:
        ws.send_text(first)
        assert words in json.loads(ws.receive_text())["error"]
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == CLOSE_ERROR
    assert all(s.closed for s in executor.sessions)


def test_a_frame_the_command_cannot_take_ends_the_session() -> None:
    executor = Executor()
    with client(executor, ExecSlots()).websocket_connect("/instances/i1/exec?cell=c1") as ws:
        ws.send_text(START)
        ws.send_bytes(data_frame(STDOUT, b"output sent to a command"))
        assert "stream 1" in json.loads(ws.receive_text())["error"]
    assert executor.sessions[0].closed
