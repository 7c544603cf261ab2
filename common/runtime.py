"""Running a service's event loop.

uvloop when it is installed (a dependency everywhere it builds: Linux and macOS): the services spend
much of their time in the event loop and in HTTP parsing, and uvloop (with uvicorn's httptools parser,
which uvicorn picks by itself when installed) serves a request in about two thirds of the time of the
standard loop with h11. Without it, the standard asyncio loop runs the same code.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


# A service keeps big, long-lived data in memory (the BBS every actual LRP, 250,000 records with their
# ports at scale; the auctioneer a batch and 1,000 cell states; a sim rep its instances) and replaces
# thousands of objects per request. With CPython's default thresholds (700, 10, 10) the cycle collector
# ran young collections all the time and full ones over the whole heap each time a quarter of it was new:
# measured, GC took about a quarter of the BBS's CPU at 100,000 instances. The data are trees, freed by
# reference counting; cycles (asyncio's, exceptions') are few and can wait longer.
GC_THRESHOLDS = (200_000, 50, 100)


def tune_gc() -> None:
    """For a serving process, once set up: the objects of startup (modules, schemas, settings) frozen out
    of every later collection (and of the interpreter's exit walk), and rarer cycle collections."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
