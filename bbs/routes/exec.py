"""GET /v1/desired_lrps/{process_guid}/instances/{index}/exec (a WebSocket, admin only): `vendue exec`, a
command run in a running instance, relayed to and from the rep that holds it (docs/exec.md).

The query names the command (`argv`, repeated, in order), and `tty`, `rows`, `cols`. The BBS accepts the
socket, then checks the request against its state: the app exists and allows exec, the index is one of its
instances and RUNNING on a present cell. A refusal is one {"error": ...} frame and a close whose code is
4000 + the HTTP status it would be (4404, 4409, 4422, 4429, 4502), so that a client shows the reason.
It then opens a WebSocket to the rep with its own client certificate, and sends the command (the start
frame) only once the rep's certificate is that of the instance's cell (as every request to a rep:
bbs/outbound.py). From then on frames go both ways unchanged, each checked (common/exec_stream.py), one
at a time: the next is read from one side only once the other took the last, so nothing piles up here.

Every exec is published (`exec_started`, `exec_ended`) and kept in the app's story: who, which instance,
the program and how many arguments, never the arguments (they may hold secrets) nor any output.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, WebSocket
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect

if TYPE_CHECKING:  # imported by the functions that use it: an eighth of a second of every BBS's start
    import aiohttp

from common.exec_stream import (
    CHUNK_BYTES,
    CLOSE_ERROR,
    STDERR,
    STDIN,
    STDOUT,
    ExecRequest,
    FrameError,
    control,
    parse_control,
    parse_data,
)
from common.tls import client_context, peer_rep_refusal

from ..core import BBS
from ..events import event
from ..records import ORDINARY, RUNNING, iso

router = APIRouter()
log = logging.getLogger("bbs.exec")

MAX_RELAYS = 64  # exec sessions this BBS relays at once
CONNECT_TIMEOUT_S = 10.0
HEARTBEAT_S = 20.0  # WebSocket pings to the rep: a rep gone without a close is noticed
EXEC_KIND = "exec"  # its entry in the app's story (bbs/app_history.py)


class Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


class _Relays:
    running = 0


RELAYS = _Relays()


@router.websocket("/v1/desired_lrps/{process_guid}/instances/{index}/exec")
async def exec_instance(websocket: WebSocket, process_guid: str, index: str) -> None:
    bbs: BBS = websocket.app.state.bbs
    await websocket.accept()
    identity = websocket.scope.get("state", {}).get("identity")
    user = f"{identity.role} {identity.name}" if identity is not None else "anonymous"
    if RELAYS.running >= MAX_RELAYS:
        await _refuse(websocket, Refused(429, f"this BBS relays {MAX_RELAYS} exec sessions already"))
        return
    RELAYS.running += 1
    try:
        await _exec(websocket, bbs, process_guid, index, user)
    finally:
        RELAYS.running -= 1


async def _exec(websocket: WebSocket, bbs: BBS, process_guid: str, index_text: str, user: str) -> None:
    try:
        request = _request(websocket, index_text)
        index = int(index_text)
        cell_id, instance_guid, rep_url = await _target(bbs, process_guid, index)
    except Refused as refusal:
        await _refuse(websocket, refusal)
        return
    files = bbs.settings.client_files()
    ssl_context = client_context(files) if files is not None else None
    url = f"{rep_url.rstrip('/').replace('https://', 'wss://', 1).replace('http://', 'ws://', 1)}" \
          f"/instances/{instance_guid}/exec"
    import aiohttp
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT_S),
                                     trust_env=False) as session:
        try:
            rep = await session.ws_connect(url, params={"cell": cell_id}, ssl=ssl_context or False,
                                           heartbeat=HEARTBEAT_S, max_msg_size=CHUNK_BYTES + 1024,
                                           autoclose=False)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            await _refuse(websocket, Refused(502, f"the rep of cell {cell_id} could not be reached: {exc}"))
            return
        try:
            not_the_rep = peer_rep_refusal(rep.get_extra_info("ssl_object"), (cell_id,))
            if not_the_rep is not None:
                await _refuse(websocket, Refused(502, f"refused to talk to the rep of {cell_id}: "
                                                      f"{not_the_rep}"))
                return
            await rep.send_str(control(start=request.model_dump()))
            started = time.time()
            at = {"process_guid": process_guid, "index": index, "instance_guid": instance_guid,
                  "cell_id": cell_id, "user": user, "program": request.argv[0],
                  "args": len(request.argv) - 1, "tty": request.tty}
            _record(bbs, "exec_started", at, started)
            status = await _relay(websocket, rep)
            _record(bbs, "exec_ended", {**at, "exit_status": status,
                                        "duration_s": round(time.time() - started, 3)}, None)
        finally:
            await rep.close()
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await websocket.close()


def _request(websocket: WebSocket, index_text: str) -> ExecRequest:
    query = websocket.query_params
    if not index_text.isdigit() or len(index_text) > 6:
        raise Refused(422, f"index: must be a whole number, not {index_text[:20]!r}")
    fields: dict[str, Any] = {"argv": query.getlist("argv"), "tty": query.get("tty", "false")}
    for name in ("rows", "cols"):
        if name in query:
            fields[name] = query[name]
    try:
        return ExecRequest.model_validate(fields)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        raise Refused(422, f"{where}: {error['msg']}") from None


async def _target(bbs: BBS, process_guid: str, index: int) -> tuple[str, str, str]:
    """(cell id, instance guid, rep URL) of the instance, or Refused saying why not."""
    async with bbs.uow.read() as tx:
        desired = await tx.get_desired(process_guid)
        if desired is None:
            raise Refused(404, f"app {process_guid!r} not found")
        if not desired.definition.get("exec_enabled", True):
            raise Refused(409, f"exec is disabled for app {process_guid!r} (vendue exec-enable "
                               f"{process_guid} allows it)")
        if index >= desired.instances:
            raise Refused(404, f"app {process_guid!r} has {desired.instances} instance(s): no index {index}")
        actuals = [a for a in await tx.list_actuals(process_guid=process_guid) if a.index == index]
        running = [a for a in actuals if a.state == RUNNING]
        if not running:
            states = ", ".join(sorted({a.state for a in actuals})) or "not created yet"
            raise Refused(409, f"instance {index} of {process_guid!r} is not running ({states})")
        actual = next((a for a in running if a.presence == ORDINARY), running[0])
        cell = await tx.get_cell(actual.cell_id)
    if cell is None or not cell.rep_url or cell.expires_at < time.time():
        raise Refused(409, f"the cell of instance {index} ({actual.cell_id}) is not present")
    return actual.cell_id, actual.instance_guid, cell.rep_url


async def _refuse(websocket: WebSocket, refusal: Refused) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await websocket.send_text(control(error=str(refusal)))
        await websocket.close(CLOSE_ERROR + refusal.status)


def _record(bbs: BBS, kind: str, data: dict[str, Any], at: float | None) -> None:
    now = time.time()
    bbs.hub.publish([event(kind, data, now)])
    if at is not None:  # the story keeps the start; the end is on the event stream
        bbs.uow.history.add(data["process_guid"], {
            "kind": EXEC_KIND, "at": iso(at), "index": data["index"], "cell_id": data["cell_id"],
            "user": data["user"], "program": data["program"], "args": data["args"]})
    log.info(kind.replace("_", " "), extra={"data": data})


async def _relay(client: WebSocket, rep: aiohttp.ClientWebSocketResponse) -> int | None:
    """Both ways until the rep sends the exit status (returned) or either side goes (None)."""
    upstream = asyncio.create_task(_client_to_rep(client, rep), name="exec-up")
    downstream = asyncio.create_task(_rep_to_client(rep, client), name="exec-down")
    try:
        done, _ = await asyncio.wait({upstream, downstream}, return_when=asyncio.FIRST_COMPLETED)
        return downstream.result() if downstream in done else None
    finally:
        for task in (upstream, downstream):
            task.cancel()
        for task in (upstream, downstream):
            with contextlib.suppress(BaseException):
                await task


async def _client_to_rep(client: WebSocket, rep: aiohttp.ClientWebSocketResponse) -> None:
    import aiohttp

    try:
        while True:
            message = await client.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                parse_data(message["bytes"], allowed=(STDIN,))
                await rep.send_bytes(message["bytes"])
                continue
            text = message.get("text") or ""
            frame = parse_control(text)
            if not ("resize" in frame or "eof" in frame):
                raise FrameError(f"{next(iter(frame))} is not sent to a command")
            await rep.send_str(text)
    except FrameError as exc:
        await _refuse(client, Refused(422, str(exc)))
    except (WebSocketDisconnect, RuntimeError, ConnectionError, aiohttp.ClientError):
        return


async def _rep_to_client(rep: aiohttp.ClientWebSocketResponse, client: WebSocket) -> int | None:
    import aiohttp

    try:
        async for message in rep:
            if message.type == aiohttp.WSMsgType.BINARY:
                parse_data(message.data, allowed=(STDOUT, STDERR))
                await client.send_bytes(message.data)
            elif message.type == aiohttp.WSMsgType.TEXT:
                frame = parse_control(message.data)
                if "error" in frame:
                    await _refuse(client, Refused(409, frame["error"]))
                    return None
                if "exit" in frame:
                    await client.send_text(message.data)
                    return int(frame["exit"])
            else:  # closed, or an error: the session is over
                break
    except FrameError as exc:
        log.warning("a rep sent a bad exec frame", extra={"data": {"error": str(exc)}})
    except (WebSocketDisconnect, RuntimeError, ConnectionError, aiohttp.ClientError):
        return None
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await client.send_text(control(error="the rep ended the session"))
    return None
