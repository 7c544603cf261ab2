"""`vendue exec APP INDEX [-i] [-t] -- COMMAND...`: run a command in a running instance (its user, cgroup,
directory and environment), through the BBS (a WebSocket: docs/exec.md); and `vendue exec-enable APP`,
`vendue exec-disable APP`, whether an app allows it.

With `-t` the command gets a terminal: the local one is put in raw mode (`tty.setraw`, put back however the
command ends), every key goes to the remote terminal as typed (Ctrl-C too: it interrupts what runs there,
not this command), a resize follows (SIGWINCH), and the output is the terminal's, passed through as `ssh`
does: the person asked for a terminal session. Without `-t`, stdout and stderr are the command's, byte for
byte into a pipe or a file; on a terminal, their control characters are shown as escapes, never obeyed
(deploy/terminal_text.py). `-i` sends stdin (without it the command reads an empty one).

The exit status is the command's. A refusal is one line: exit 2 when the app or the index does not exist
or the request is malformed, 1 otherwise (not running, exec disabled, not an admin, the BBS unreachable).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import termios
import tty
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .cli import app
from .cli_style import USAGE_ERROR, OneLineErrorsCommand, fail
from .client_cmd import (
    AsJson,
    Connection,
    bbs_command,
    connect,
    print_json,
    read_cluster_file,
    resolve_auth,
    resolve_bbs_url,
)
from .terminal_text import echo, plain

if TYPE_CHECKING:
    import aiohttp

    from .bbs_client import ClientAuth

FAILURE = 1
HEARTBEAT_S = 20.0
# Close codes 4000 + HTTP status (bbs/routes/exec.py); these say the request named nothing that exists.
USAGE_CLOSES = (4404, 4422)


class ExecFailed(Exception):
    def __init__(self, message: str, status: int = FAILURE, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.unreachable = unreachable  # nothing answered there: another replica may


def exec_url(bbs_url: str, process_guid: str, index: int) -> str:
    base = bbs_url.rstrip("/").replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return f"{base}/v1/desired_lrps/{process_guid}/instances/{index}/exec"


def exec_params(argv: Sequence[str], tty_mode: bool, size: os.terminal_size | None) -> list[tuple[str, str]]:
    params = [("argv", arg) for arg in argv] + [("tty", "true" if tty_mode else "false")]
    if size is not None:
        params += [("rows", str(size.lines)), ("cols", str(size.columns))]
    return params


def terminal_size() -> os.terminal_size | None:
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            size = os.get_terminal_size(fd)
            if size.lines > 0 and size.columns > 0:
                return size
    return None


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """`fd`'s terminal in raw mode, as it was again afterwards, whatever happens (nothing when `fd` is no
    terminal)."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSANOW)  # not TCSAFLUSH: what was typed meanwhile still goes to the command
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class Output:
    """Where a stream's bytes go: as they are, or (`safe`: a terminal, no tty asked) decoded and shown
    with their control characters as escapes."""

    def __init__(self, fd: int, safe: bool) -> None:
        self.fd = fd
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace") if safe else None

    def write(self, data: bytes) -> None:
        if self.decoder is not None:
            data = plain(self.decoder.decode(data), lines=True).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]


def _refusal_message(exc: aiohttp.WSServerHandshakeError) -> str:
    if exc.status == 401:
        return "refused (401): authentication required (the cluster's admin certificate or an admin token)"
    if exc.status == 403:
        return "refused (403): only an admin may run commands in instances"
    return f"refused by the BBS ({exc.status} {exc.message})"


async def run_exec(url: str, auth: ClientAuth, process_guid: str, index: int, argv: Sequence[str], *,
                   interactive: bool, tty_mode: bool) -> int:
    """The remote command's exit status; ExecFailed when it could not run or the session broke."""
    import aiohttp

    from common.exec_stream import CHUNK_BYTES, control

    size = terminal_size() if tty_mode else None
    verify = auth.verify()
    ssl: Any = verify if not isinstance(verify, bool) else None
    async with aiohttp.ClientSession(trust_env=False) as session:
        try:
            ws = await session.ws_connect(
                exec_url(url, process_guid, index), params=exec_params(argv, tty_mode, size),
                headers=auth.headers(), ssl=ssl, heartbeat=HEARTBEAT_S, max_msg_size=CHUNK_BYTES + 1024)
        except aiohttp.WSServerHandshakeError as exc:
            raise ExecFailed(_refusal_message(exc)) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ExecFailed(f"cannot reach the BBS at {url}: {exc}", unreachable=True) from None
        async with ws:
            loop = asyncio.get_running_loop()
            stdout = Output(1, safe=not tty_mode and os.isatty(1))
            stderr = Output(2, safe=not tty_mode and os.isatty(2))
            sender: asyncio.Task[None] | None = None
            if interactive:
                sender = asyncio.create_task(_send_stdin(ws, tty_mode))
            else:
                await ws.send_str(control(eof=True))
            if tty_mode and size is not None:
                resizes: set[asyncio.Task[None]] = set()  # held until sent (the loop keeps only weak ones)

                def resized() -> None:
                    now = terminal_size()
                    if now is not None:
                        task = loop.create_task(ws.send_str(control(resize=[now.lines, now.columns])))
                        resizes.add(task)
                        task.add_done_callback(resizes.discard)

                loop.add_signal_handler(signal.SIGWINCH, resized)
            try:
                return await _receive(ws, stdout, stderr)
            finally:
                if tty_mode and size is not None:
                    loop.remove_signal_handler(signal.SIGWINCH)
                if sender is not None:
                    sender.cancel()
                    with contextlib.suppress(BaseException):
                        await sender
    raise AssertionError("unreachable")  # for mypy: the session above returns or raises


async def _receive(ws: aiohttp.ClientWebSocketResponse, stdout: Output, stderr: Output) -> int:
    import aiohttp

    from common.exec_stream import STDERR, STDOUT, FrameError, parse_control, parse_data

    error = ""
    async for message in ws:
        if message.type == aiohttp.WSMsgType.BINARY:
            try:
                stream, data = parse_data(message.data, allowed=(STDOUT, STDERR))
            except FrameError as exc:
                raise ExecFailed(f"the BBS sent a bad frame: {exc}") from None
            (stdout if stream == STDOUT else stderr).write(data)
        elif message.type == aiohttp.WSMsgType.TEXT:
            try:
                frame = parse_control(message.data)
            except FrameError as exc:
                raise ExecFailed(f"the BBS sent a bad frame: {exc}") from None
            if "exit" in frame:
                return int(frame["exit"])
            if "error" in frame:
                error = str(frame["error"])
    code = ws.close_code or 0
    status = USAGE_ERROR if code in USAGE_CLOSES else FAILURE
    raise ExecFailed(error or f"the session ended without the command's exit status (close code {code})",
                     status)


async def _send_stdin(ws: aiohttp.ClientWebSocketResponse, tty_mode: bool) -> None:
    """stdin to the command, a chunk at a time (the next read once the socket took the last); its end as
    {"eof": true}."""
    from common.exec_stream import CHUNK_BYTES, STDIN, control, data_frame

    loop = asyncio.get_running_loop()
    while True:
        data = await _read_stdin(loop, CHUNK_BYTES)
        if not data:
            if not tty_mode:
                await ws.send_str(control(eof=True))
            return
        await ws.send_bytes(data_frame(STDIN, data))


async def _read_stdin(loop: asyncio.AbstractEventLoop, size: int) -> bytes:
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    try:
        loop.add_reader(0, wake)
    except (PermissionError, ValueError, OSError):  # a regular file (epoll takes none): it never blocks
        return os.read(0, size)
    try:
        await ready
    finally:
        loop.remove_reader(0)
    try:
        return os.read(0, size)
    except OSError:
        return b""


def parse_index(text: str) -> int:
    if not text.isdigit():
        fail(f"INDEX: must be a whole number (0, 1, ...), got {plain(text, lines=False)!r}", USAGE_ERROR)
    return int(text)


@app.command("exec", cls=OneLineErrorsCommand)
@bbs_command
def exec_command(
    app_name: Annotated[str, typer.Argument(metavar="APP", help="The app's process guid.",
                                            show_default=False)],
    index: Annotated[str, typer.Argument(metavar="INDEX", help="Which instance (0, 1, ...).",
                                         show_default=False)],
    command: Annotated[list[str] | None, typer.Argument(metavar="-- COMMAND...", help="What to run, after "
                                                        "`--`.", show_default=False)] = None,
    interactive: Annotated[bool, typer.Option("--stdin", "-i", help="Send stdin to the command.")] = False,
    tty_mode: Annotated[bool, typer.Option("--tty", "-t", help="Give the command a terminal (raw mode here; "
                                                               "Ctrl-C goes to it).")] = False,
    connection: Connection = Connection(),
) -> None:
    """Run a command in a running instance: as its user, in its cgroup, directory and environment.

    `vendue exec web 0 -it -- sh` for a shell; `vendue exec web 0 -- cat /etc/hostname`; exits with the
    command's status. Admin only; an app pushed with --no-exec refuses it (docs/exec.md)."""
    number = parse_index(index)
    if not command:
        fail("COMMAND: give the command to run after `--`, e.g. `vendue exec web 0 -- ls`", USAGE_ERROR)
    local = read_cluster_file(connection.data_dir)
    url, _source = resolve_bbs_url(connection.bbs, connection.data_dir, local)
    auth = resolve_auth(connection, local)
    urls = [u for u in url.split(",") if u]
    status: int | None = None
    failure: ExecFailed | None = None
    with raw_terminal(0) if tty_mode else contextlib.nullcontext():
        for candidate in urls:  # replicas: the first that answers
            try:
                status = asyncio.run(run_exec(candidate, auth, app_name, number, command,
                                              interactive=interactive or tty_mode, tty_mode=tty_mode))
                break
            except KeyboardInterrupt:  # Ctrl-C here (no -t): the connection goes, and the command with it
                status = 130
                break
            except ExecFailed as exc:
                failure = exc
                if not exc.unreachable:
                    break
    if status is None:
        assert failure is not None
        echo(f"error: {failure}", err=True)
        raise typer.Exit(failure.status)
    raise typer.Exit(status)


def _set_exec(connection: Connection, name: str, enabled: bool, as_json: bool) -> None:
    with connect(connection) as client:
        answer = client.patch_desired_lrp(name, {"exec_enabled": enabled})
    if as_json:
        print_json(answer.get("desired_lrp") or answer)
        return
    echo(f"exec {'enabled' if enabled else 'disabled'} for {name}"
         + ("" if enabled else ": `vendue exec` into its instances is refused"))


@app.command("exec-enable", cls=OneLineErrorsCommand)
@bbs_command
def exec_enable(
    name: Annotated[str, typer.Argument(metavar="APP", help="The app's process guid.", show_default=False)],
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Allow `vendue exec` into an app's instances (the default). No new version: nothing restarts."""
    _set_exec(connection, name, True, as_json)


@app.command("exec-disable", cls=OneLineErrorsCommand)
@bbs_command
def exec_disable(
    name: Annotated[str, typer.Argument(metavar="APP", help="The app's process guid.", show_default=False)],
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Refuse `vendue exec` into an app's instances. No new version: nothing restarts."""
    _set_exec(connection, name, False, as_json)
