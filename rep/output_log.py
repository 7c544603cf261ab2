"""An instance's output log: its stdout and stderr through two pipes the rep reads, kept to a cap.

The child writes into the pipes; the rep's event loop reads them in chunks (one chunk per readiness
callback, so a flood shares the loop with everything else, and the child blocks on the full pipe
meanwhile), cuts them into lines and appends them as timestamped records (rep/log_records.py) to
`output.log` in the instance directory. When output.log would pass half the cap it becomes `output.log.1`
(replacing the older one) and a new output.log starts, always between two records: the two together never
exceed the cap, and the last cap/2 bytes of records (at least, less one record) are always on disk. Each
batch of records also goes to `on_records` (the live followers: rep/log_stream.py).

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
from collections.abc import Callable
from pathlib import Path

from .log_records import STDERR, STDOUT, Clock, LineSplitter, Record, StreamCode, as_text, parse

log = logging.getLogger("rep.output")

MIB = 1024 * 1024
LOG_NAME = "output.log"
ROTATED_NAME = "output.log.1"
LOG_NAMES = (LOG_NAME, ROTATED_NAME)
CHUNK_BYTES = 256 * 1024  # one read per readiness callback: at most this much work before the loop moves on
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class OutputLog:
    """One instance's output: `writer` is the child's stdout, `stderr_writer` its stderr; `start()` once it
    is spawned. `on_records(batch)` hears every batch as it is written; `on_end()` once both pipes closed.

    Lifecycle: construct -> (spawn the child with `writer`) -> start -> finish (EOF, or a bound) -> tail ->
    close. `close()` alone is enough when the spawn failed.
    """

    def __init__(self, directory: Path, cap_bytes: int) -> None:
        if cap_bytes < 2:
            raise ValueError(f"cap_bytes must be at least 2, got {cap_bytes}")
        self.directory = directory
        self.half = cap_bytes // 2
        self._dir_fd = self._current = self._previous = -1
        self.writer = self.stderr_writer = -1
        self._readers: dict[StreamCode, int] = {}
        self._splitters = {STDOUT: LineSplitter(STDOUT), STDERR: LineSplitter(STDERR)}
        self.stamp = Clock()
        self._size = 0  # bytes in the current file
        self._loop: asyncio.AbstractEventLoop | None = None
        self._eof: asyncio.Future[None] | None = None
        self._losing = False  # output is being dropped (a full disk, a log the app took away): said once
        self.on_records: Callable[[list[Record]], None] | None = None
        self.on_end: Callable[[], None] | None = None
        try:
            self._dir_fd = os.open(directory, _DIR_FLAGS)
            self._readers[STDOUT], self.writer = os.pipe2(os.O_CLOEXEC)
            self._readers[STDERR], self.stderr_writer = os.pipe2(os.O_CLOEXEC)
            for reader in self._readers.values():
                os.set_blocking(reader, False)
            self._current = self._create()
        except OSError:
            self.close()
            raise

    @property
    def ended(self) -> bool:
        """Both pipes closed (or reading stopped): no record comes any more."""
        return not self._readers

    def start(self) -> None:
        """The child has the pipes: drop the rep's copies of their write ends and pump from the event loop."""
        self._close_writer()
        self._loop = asyncio.get_running_loop()
        self._eof = self._loop.create_future()
        for stream, reader in self._readers.items():
            self._loop.add_reader(reader, self._on_readable, stream)

    async def finish(self, timeout_s: float) -> None:
        """Wait until every holder of the pipe is gone and all it wrote is in the log, at most `timeout_s`;
        then stop reading. (A process that escaped its instance and still holds the pipe then gets EPIPE.)"""
        if self._eof is not None and not self._eof.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._eof), timeout_s)
        self._stop_reading()

    def tail(self, size: int) -> str:
        """The text of the last records (across output.log.1 and output.log), at most `size` bytes of it,
        stdout and stderr interleaved as they came, decoded leniently."""
        text = as_text(parse(self.snapshot(size * 2 + 64 * 1024))).encode()
        return text[-size:].decode("utf-8", errors="replace") if size > 0 else ""

    def snapshot(self, limit: int | None = None) -> bytes:
        """The records on disk (the last `limit` bytes of them, the first perhaps torn), read through the
        rep's own descriptors: never through a name the app could have pointed elsewhere."""
        parts: list[bytes] = []
        wanted = limit if limit is not None else 2 * self.half + 2 * MIB
        for fd in (self._current, self._previous):
            if fd < 0 or wanted <= 0:
                continue
            end = os.fstat(fd).st_size
            start = max(0, end - wanted)
            parts.append(os.pread(fd, end - start, start))
            wanted -= end - start
        return b"".join(reversed(parts))

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

    def _on_readable(self, stream: StreamCode) -> None:
        reader = self._readers.get(stream, -1)
        if reader < 0:
            return
        try:
            data = os.read(reader, CHUNK_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:
            log.warning("cannot read an instance's output", extra={"data": {"dir": str(self.directory),
                                                                            "error": str(exc)}})
            data = b""
        splitter = self._splitters[stream]
        records = splitter.feed(data, self.stamp) if data else splitter.flush(self.stamp)
        if records:
            self._publish(records)
        if not data:
            self._stop_stream(stream)

    def _publish(self, records: list[Record]) -> None:
        try:
            self._write(records)
        except OSError as exc:  # never out of a reader callback: asyncio would call it again at once
            self._note_lost(exc)
        if self.on_records is not None:
            self.on_records(records)

    def _write(self, records: list[Record]) -> None:
        """Append the records, rotating between two of them: a file never ends within a record."""
        batch: list[bytes] = []
        batch_size = 0
        for record in records:
            encoded = record.encode()
            if self._size + batch_size + len(encoded) > self.half and self._size + batch_size > 0:
                self._append(b"".join(batch))
                batch, batch_size = [], 0
                self._rotate()
            batch.append(encoded)
            batch_size += len(encoded)
        self._append(b"".join(batch))

    def _append(self, data: bytes) -> None:
        self._size += len(data)  # counted even when lost: rotation stays on schedule
        if self._current >= 0 and data:
            view = memoryview(data)
            while view:
                view = view[os.write(self._current, view):]

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

    def _stop_stream(self, stream: StreamCode) -> None:
        reader = self._readers.pop(stream, -1)
        if reader < 0:
            return
        if self._loop is not None:
            self._loop.remove_reader(reader)
        os.close(reader)
        if not self._readers:
            if self._eof is not None and not self._eof.done():
                self._eof.set_result(None)
            if self.on_end is not None:
                on_end, self.on_end = self.on_end, None
                on_end()

    def _stop_reading(self) -> None:
        for stream in list(self._readers):
            records = self._splitters[stream].flush(self.stamp)  # a last line without its newline
            if records:
                self._publish(records)
            self._stop_stream(stream)

    def _close_writer(self) -> None:
        for name in ("writer", "stderr_writer"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
