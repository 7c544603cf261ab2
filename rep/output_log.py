"""An instance's output log: its stdout and stderr through a pipe the rep reads, kept to a cap.

The child writes into a pipe; the rep's event loop reads it in chunks (one chunk per readiness callback,
so a flood shares the loop with everything else, and the child blocks on the full pipe meanwhile) and
appends to `output.log` in the instance directory. When output.log reaches half the cap it becomes
`output.log.1` (replacing the older one) and a new output.log starts: the two together never exceed the
cap, and the last cap/2 bytes (at least) are always on disk.

The directory belongs to the app's user, who may rename, delete or plant files in it at any moment, and
the rep may be root: the log is written and read only through descriptors the rep opened itself (the
directory once, `O_NOFOLLOW`; each file created with `O_EXCL`), never by a path the app could have
pointed elsewhere. An app that deletes its log only loses its own output.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger("rep.output")

MIB = 1024 * 1024
LOG_NAME = "output.log"
ROTATED_NAME = "output.log.1"
LOG_NAMES = (LOG_NAME, ROTATED_NAME)
CHUNK_BYTES = 256 * 1024  # one read per readiness callback: at most this much work before the loop moves on
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class OutputLog:
    """One instance's output: `writer` is the child's stdout and stderr; `start()` once it is spawned.

    Lifecycle: construct -> (spawn the child with `writer`) -> start -> finish (EOF, or a bound) -> tail ->
    close. `close()` alone is enough when the spawn failed.
    """

    def __init__(self, directory: Path, cap_bytes: int) -> None:
        if cap_bytes < 2:
            raise ValueError(f"cap_bytes must be at least 2, got {cap_bytes}")
        self.directory = directory
        self.half = cap_bytes // 2
        self._dir_fd = self._reader = self.writer = self._current = self._previous = -1
        self._size = 0  # bytes in the current file
        self._loop: asyncio.AbstractEventLoop | None = None
        self._eof: asyncio.Future[None] | None = None
        self._losing = False  # output is being dropped (a full disk, a log the app took away): said once
        try:
            self._dir_fd = os.open(directory, _DIR_FLAGS)
            self._reader, self.writer = os.pipe2(os.O_CLOEXEC)
            os.set_blocking(self._reader, False)
            self._current = self._create()
        except OSError:
            self.close()
            raise

    def start(self) -> None:
        """The child has the pipe: drop the rep's copy of its write end and pump from the event loop."""
        self._close_writer()
        self._loop = asyncio.get_running_loop()
        self._eof = self._loop.create_future()
        self._loop.add_reader(self._reader, self._on_readable)

    async def finish(self, timeout_s: float) -> None:
        """Wait until every holder of the pipe is gone and all it wrote is in the log, at most `timeout_s`;
        then stop reading. (A process that escaped its instance and still holds the pipe then gets EPIPE.)"""
        if self._eof is not None and not self._eof.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._eof), timeout_s)
        self._stop_reading()

    def tail(self, size: int) -> str:
        """The last `size` bytes written (across output.log.1 and output.log), decoded leniently."""
        parts: list[bytes] = []
        wanted = size
        for fd in (self._current, self._previous):
            if fd < 0 or wanted <= 0:
                continue
            end = os.fstat(fd).st_size
            start = max(0, end - wanted)
            parts.append(os.pread(fd, end - start, start))
            wanted -= end - start
        return b"".join(reversed(parts)).decode("utf-8", errors="replace")

    def close(self) -> None:
        """Release every descriptor (idempotent)."""
        self._stop_reading()
        self._close_writer()
        for name in ("_current", "_previous", "_dir_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    # --- the pump ------------------------------------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            data = os.read(self._reader, CHUNK_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:
            log.warning("cannot read an instance's output", extra={"data": {"dir": str(self.directory),
                                                                            "error": str(exc)}})
            data = b""
        if not data:
            self._stop_reading()
            return
        try:
            self._write(data)
        except OSError as exc:  # never out of a reader callback: asyncio would call it again at once
            self._note_lost(exc)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._size >= self.half:
                self._rotate()
            room = self.half - self._size
            piece = view[:room]
            view = view[room:]
            self._size += len(piece)  # counted even when lost: rotation stays on schedule
            if self._current >= 0:
                written = 0
                while written < len(piece):
                    written += os.write(self._current, piece[written:])

    def _rotate(self) -> None:
        # By name, inside the directory: the app may have removed or replaced output.log (then what is
        # renamed is its own doing) or made output.log.1 something that cannot be replaced (then the old
        # log is simply dropped).
        with contextlib.suppress(OSError):
            os.rename(LOG_NAME, ROTATED_NAME, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
        if self._previous >= 0:
            os.close(self._previous)
        self._previous, self._current, self._size = self._current, -1, 0
        try:
            self._current = self._create()
        except OSError as exc:
            self._note_lost(exc)

    def _create(self) -> int:
        """A new output.log the rep made itself (O_EXCL: never a file or link the app put there)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(LOG_NAME, dir_fd=self._dir_fd)
        return os.open(LOG_NAME, _FILE_FLAGS, 0o644, dir_fd=self._dir_fd)

    def _note_lost(self, exc: OSError) -> None:
        if not self._losing:
            self._losing = True
            log.warning("an instance's output is being lost", extra={"data": {"dir": str(self.directory),
                                                                              "error": str(exc)}})

    def _stop_reading(self) -> None:
        if self._reader < 0:
            return
        if self._loop is not None:
            self._loop.remove_reader(self._reader)
        os.close(self._reader)
        self._reader = -1
        if self._eof is not None and not self._eof.done():
            self._eof.set_result(None)

    def _close_writer(self) -> None:
        if self.writer >= 0:
            os.close(self.writer)
            self.writer = -1
