"""GET /instances/{instance_guid}/exec?cell=CELL (a WebSocket, the BBS only): a command run in an instance,
its streams relayed over the socket (the frames of common/exec_stream.py; docs/exec.md).

The BBS opens the socket, checks this rep's certificate, then sends {"start": ExecRequest}. The command
runs through the cell's executor (`open_exec`); its output goes out a chunk at a time, the next read only
once the socket took the last (uvicorn's send waits while the connection's buffer is full), and input is
written to the command before the next frame is read (uvicorn reads no more of the socket meanwhile):
nothing is buffered without bound here. The session's end, whichever side ends it (the command exits, the
socket drops, the instance stops), kills what the command started (ExecSession.close).

At most MAX_EXEC_SESSIONS run at once on a rep process; one more is refused with an error frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect

from common.exec_stream import (
    CLOSE_ERROR,
    STDIN,
    ExecRequest,
    FrameError,
    control,
    data_frame,
    parse_control,
    parse_data,
)

from .executor import ExecRefused, ExecSession
from .host import RepHost

log = logging.getLogger("rep.exec")

MAX_EXEC_SESSIONS = 16
START_TIMEOUT_S = 10.0  # from the socket's accept to the start frame


class ExecSlots:
    """The rep process's count of sessions running."""

    def __init__(self, limit: int = MAX_EXEC_SESSIONS) -> None:
        self.limit = limit
        self.running = 0


async def refuse(websocket: WebSocket, why: str) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await websocket.send_text(control(error=why))
        await websocket.close(CLOSE_ERROR)


async def serve_exec(websocket: WebSocket, host: RepHost, slots: ExecSlots, instance_guid: str,
                     cell_id: str) -> None:
    await websocket.accept()
    try:
        first = await asyncio.wait_for(websocket.receive_text(), START_TIMEOUT_S)
        start = parse_control(first).get("start")
        if not isinstance(start, ExecRequest):
            raise FrameError("the first frame is the start")
    except (TimeoutError, FrameError, WebSocketDisconnect, KeyError, RuntimeError) as exc:
        await refuse(websocket, f"no start: {exc}" if str(exc) else "no start frame in time")
        return
    cell = host.cells.get(cell_id)
    if cell is None or cell.retired:
        await refuse(websocket, f"cell {cell_id} is not on this rep")
        return
    if slots.running >= slots.limit:
        await refuse(websocket, f"this rep runs {slots.limit} exec sessions already: try again later")
        return
    slots.running += 1
    try:
        try:
            session = await cell.executor.open_exec(instance_guid, start.argv, start.tty, start.rows,
                                                    start.cols)
        except ExecRefused as exc:
            await refuse(websocket, str(exc))
            return
        log.info("exec started", extra={"data": {"instance_guid": instance_guid, "cell_id": cell_id,
                                                 "program": start.argv[0], "args": len(start.argv) - 1,
                                                 "tty": start.tty}})
        try:
            status = await relay_session(websocket, session)
        finally:
            await session.close()
        log.info("exec ended", extra={"data": {"instance_guid": instance_guid, "status": status}})
    finally:
        slots.running -= 1


async def relay_session(websocket: WebSocket, session: ExecSession) -> int | None:
    """Both directions until the command's outputs close (then its exit status is sent: returned) or the
    socket ends (None: the caller kills the command)."""
    inbound = asyncio.create_task(_inbound(websocket, session), name="exec-in")
    outbound = asyncio.create_task(_outbound(websocket, session), name="exec-out")
    try:
        done, _ = await asyncio.wait({inbound, outbound}, return_when=asyncio.FIRST_COMPLETED)
        if outbound not in done:  # the socket ended, or a bad frame: kill it
            return None
        return outbound.result()
    finally:
        for task in (inbound, outbound):
            task.cancel()
        for task in (inbound, outbound):
            with contextlib.suppress(BaseException):
                await task


async def _outbound(websocket: WebSocket, session: ExecSession) -> int | None:
    try:
        while (chunk := await session.read()) is not None:
            await websocket.send_bytes(data_frame(*chunk))
        status = await session.wait()
        await websocket.send_text(control(exit=status))
        await websocket.close()
        return status
    except (WebSocketDisconnect, RuntimeError, ConnectionError):
        return None


async def _inbound(websocket: WebSocket, session: ExecSession) -> None:
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                _, data = parse_data(message["bytes"], allowed=(STDIN,))
                await session.write(data)
                continue
            frame = parse_control(message.get("text") or "")
            if "resize" in frame:
                session.resize(*frame["resize"])
            elif "eof" in frame:
                session.close_stdin()
            else:
                raise FrameError(f"{next(iter(frame))} is not sent to a command")
    except FrameError as exc:
        await refuse(websocket, str(exc))
    except (WebSocketDisconnect, RuntimeError):
        return
