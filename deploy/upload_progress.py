"""A progress bar for an upload, on stderr, only when stderr is a terminal: piped or captured (scripts,
CI logs), nothing is drawn and stdout (`--json`) is never touched."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def upload_progress(total: int, label: str, *, force: bool | None = None) -> Iterator[Callable[[int], None]]:
    """`advance(n)` to call as n more bytes are sent; a bar of `total` bytes while it runs (transient: gone
    once done). `force`: draw or not whatever stderr is (tests)."""
    draw = sys.stderr.isatty() if force is None else force
    if not draw:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from .terminal_text import plain

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(plain(label), total=total)
        yield lambda n: progress.advance(task, n)
