"""A TLS listener presenting a certificate of our choosing, recording each request it is sent: for tests of
what a component refuses to talk to (a rep_url leading to another role, another cell's rep)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from common.tls import TLSFiles, server_context


@dataclass
class Listener:
    url: str = ""
    requests: list[bytes] = field(default_factory=list)  # each request's head (request line and headers)


@asynccontextmanager
async def tls_listener(files: TLSFiles, answer: bytes = b'{"cells":[]}') -> AsyncIterator[Listener]:
    """Serves HTTPS with `files` (asking callers for a certificate from their CA) on a free loopback port,
    answering each request 200 with `answer`, keeping connections alive."""
    listener = Listener()
    open_writers: set[asyncio.StreamWriter] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        open_writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                listener.requests.append(head)
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(answer), answer))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            open_writers.discard(writer)
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context(files))
    listener.url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        try:
            yield listener
        finally:
            for writer in list(open_writers):  # kept-alive connections end with the listener
                writer.close()
            await asyncio.sleep(0)  # let their handlers see the end
