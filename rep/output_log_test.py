"""The output log with real writers: child processes and the test itself writing into the pipe."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.polling import finishes

from .output_log import CHUNK_BYTES, LOG_NAME, MIB, ROTATED_NAME, OutputLog

pytestmark = pytest.mark.timeout(60)

DEADLINE_S = 30.0

# Writes $TOTAL bytes of a pattern no two nearby windows of which are alike (so a wrong cut shows), in
# writes of $WRITE bytes, then exits.
WRITER = """
import os, sys
total, size = int(os.environ["TOTAL"]), int(os.environ["WRITE"])
data = b"".join(b"%09d\\n" % i for i in range(total // 10 + 1))[:total]
out = sys.stdout.buffer
for i in range(0, total, size):
    out.write(data[i:i + size]); out.flush()
"""


def pattern(total: int) -> bytes:
    return b"".join(b"%09d\n" % i for i in range(total // 10 + 1))[:total]


def on_disk(directory: Path) -> tuple[bytes, bytes]:
    rotated = directory / ROTATED_NAME
    return (rotated.read_bytes() if rotated.exists() else b""), (directory / LOG_NAME).read_bytes()


def spawn_writer(output: OutputLog, total: int, write: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", WRITER], stdout=output.writer, stderr=subprocess.STDOUT,
                            env={**os.environ, "TOTAL": str(total), "WRITE": str(write)})


@pytest.mark.parametrize(("cap", "total", "write"), [
    (1000, 999, 7),            # below half the cap... and beyond it: one rotation
    (1000, 100_000, 333),      # many rotations, writes that do not divide the half
    (4096, 1_000_000, 65536),  # writes larger than the whole cap
    (2, 10, 1),                # the smallest cap: one byte per file
])
async def test_rotation_keeps_the_tail_and_never_exceeds_the_cap(
    tmp_path: Path, cap: int, total: int, write: int
) -> None:
    output = OutputLog(tmp_path, cap)
    seen_max = 0

    async def watch_sizes() -> None:
        nonlocal seen_max
        while True:  # between two of the pump's callbacks: the state every other task sees
            seen_max = max(seen_max, sum(len(part) for part in on_disk(tmp_path)))
            await asyncio.sleep(0)

    proc = spawn_writer(output, total, write)
    output.start()
    watcher = asyncio.create_task(watch_sizes())
    try:
        await output.finish(DEADLINE_S)
    finally:
        watcher.cancel()
        output.close()
    assert proc.wait(timeout=DEADLINE_S) == 0
    rotated, current = on_disk(tmp_path)
    kept = rotated + current
    assert len(kept) <= cap and seen_max <= cap, f"kept {len(kept)} bytes, {seen_max} at most, of a {cap} cap"
    assert len(kept) >= min(total, cap // 2), f"expected at least the last {cap // 2} bytes, kept {len(kept)}"
    assert kept == pattern(total)[-len(kept):], "expected the last bytes written, in order"


async def test_the_tail_spans_both_files(tmp_path: Path) -> None:
    output = OutputLog(tmp_path, 6000)
    proc = spawn_writer(output, 10_000, 1000)
    output.start()
    await output.finish(DEADLINE_S)
    proc.wait(timeout=DEADLINE_S)
    rotated, current = on_disk(tmp_path)
    assert (len(rotated), len(current)) == (3000, 1000)
    assert output.tail(2500).encode() == pattern(10_000)[-2500:]
    assert output.tail(100_000).encode() == pattern(10_000)[-4000:], "all that is kept, no more"
    output.close()


async def test_a_flood_leaves_the_event_loop_responsive(tmp_path: Path) -> None:
    """However fast the child writes, the pump does one read (at most CHUNK_BYTES) per turn of the event
    loop: every other task gets its turn between any two of its reads."""
    output = OutputLog(tmp_path, MIB)
    turns: list[int] = []  # bytes the pump wrote since the previous turn of the ticker, at each turn
    since_last_turn = 0
    pump_write = output._write

    def counted_write(data: bytes) -> None:  # (private: where the pump's reads show)
        nonlocal since_last_turn
        since_last_turn += len(data)
        pump_write(data)

    output._write = counted_write  # type: ignore[method-assign]

    async def ticker() -> None:  # a turn of its own on every pass of the loop, taking no time
        nonlocal since_last_turn
        while True:
            await asyncio.sleep(0)
            turns.append(since_last_turn)
            since_last_turn = 0

    flood = "import sys\nfor _ in range(256): sys.stdout.buffer.write(b'x' * 1024 * 1024)"
    proc = subprocess.Popen([sys.executable, "-c", flood], stdout=output.writer)
    output.start()
    ticking = asyncio.create_task(ticker())
    try:
        await output.finish(DEADLINE_S)
    finally:
        ticking.cancel()
        output.close()
    assert proc.wait(timeout=DEADLINE_S) == 0
    reads_between_turns = [n for n in turns if n]
    assert sum(turns) + since_last_turn == 256 * MIB, "the whole flood went through the pump"
    assert len(reads_between_turns) >= 2, f"expected the ticker's turns during the flood, saw {turns[:10]}"
    assert max(reads_between_turns) <= CHUNK_BYTES, (
        f"expected at most one read ({CHUNK_BYTES} bytes) between two turns of another task, saw "
        f"{max(reads_between_turns)} bytes")


async def test_the_log_is_written_only_through_what_the_rep_created(tmp_path: Path) -> None:
    """The app owns its directory: a symlink it plants as output.log is neither written nor read."""
    directory, secret = tmp_path / "instance", tmp_path / "secret"
    directory.mkdir()
    secret.write_text("SECRET")
    output = OutputLog(directory, 200)
    writer = os.dup(output.writer)
    output.start()
    try:
        (directory / LOG_NAME).unlink()
        (directory / LOG_NAME).symlink_to(secret)
        os.write(writer, b"a" * 150)  # past half the cap: the rotation creates output.log anew
    finally:
        os.close(writer)
    await output.finish(DEADLINE_S)
    assert secret.read_text() == "SECRET"
    assert not (directory / LOG_NAME).is_symlink() and (directory / LOG_NAME).read_bytes() == b"a" * 50
    assert output.tail(1000) == "a" * 150, "the tail comes from the rep's own descriptors"
    output.close()


async def test_finish_is_bounded_while_an_escapee_holds_the_pipe(tmp_path: Path) -> None:
    output = OutputLog(tmp_path, 1000)
    holder = subprocess.Popen(["sleep", "3600"], stdout=output.writer)  # holds the pipe until killed
    output.start()
    try:
        await finishes(output.finish(0.2), DEADLINE_S, "finish to end by its bound, the pipe still held")
        assert holder.poll() is None, "the escapee still holds the pipe: only finish's bound ended it"
    finally:
        holder.kill()
        holder.wait(timeout=DEADLINE_S)
        output.close()


def test_close_without_start_releases_every_descriptor(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    output = OutputLog(tmp_path, 1000)
    assert len(os.listdir("/proc/self/fd")) == before + 4  # the directory, the pipe's two ends, the log
    output.close()
    output.close()
    assert len(os.listdir("/proc/self/fd")) == before
