"""A streamed answer that never waits on its reader for long, and keeps telling an idle one it lives.

Logs are followed for as long as the reader likes (GET /v1/logs on the BBS, GET /logs on a rep); what is
queued for a reader is bounded where it is produced (rep/log_stream.py, bbs/log_relay.py). Here: a send
the reader does not take within `send_timeout_s` ends the answer (the connection is closed: a reader
that stopped reading is dropped, its buffers freed), and an idle stream sends a blank line every
`heartbeat_s`, so that a reader that left is noticed at the next write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse
from starlette.types import Send

log = logging.getLogger("common.streaming")

SEND_TIMEOUT_S = 10.0
HEARTBEAT_S = 5.0


class BoundedStreamingResponse(StreamingResponse):
    send_timeout_s = SEND_TIMEOUT_S

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        iterator = self.body_iterator
        try:
            async for chunk in iterator:
                body = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
                try:
                    await asyncio.wait_for(send({"type": "http.response.body", "body": body,
                                                 "more_body": True}), self.send_timeout_s)
                except TimeoutError:
                    log.info("a streaming reader stopped reading: dropped")
                    return  # the server closes the connection: the response was not completed
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


async def with_heartbeats(source: AsyncIterator[bytes], every_s: float = HEARTBEAT_S) -> AsyncIterator[bytes]:
    """`source`'s chunks, with a blank line after every `every_s` without one."""
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield b"\n"
                continue
            finished, pending = pending, None
            try:
                chunk = finished.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
