"""Running a service's event loop.

uvloop when it is installed (a dependency everywhere it builds: Linux and macOS): the services spend
much of their time in the event loop and in HTTP parsing, and uvloop (with uvicorn's httptools parser,
which uvicorn picks by itself when installed) serves a request in about two thirds of the time of the
standard loop with h11. Without it, the standard asyncio loop runs the same code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
