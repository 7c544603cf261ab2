"""Watching a raw connection for the server's close, for the connection-limit tests."""

from __future__ import annotations

import asyncio
import ssl


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """True once the server has closed the connection (end of stream, or reset), False if still open after
    `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(1024):
                pass
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError):
        pass
    return True
