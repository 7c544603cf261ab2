"""The output log with real writers: child processes and the test itself writing into the pipes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.polling import finishes

from .log_records import MAX_LINE_BYTES, STDERR, STDOUT, Record, as_text, parse
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
    (1000, 999, 7),            # below half the cap... and beyond it: rotations
    (1000, 100_000, 333),      # many rotations, writes that do not divide the half
    (4096, 1_000_000, 65536),  # writes larger than the whole cap
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
    record_size = len(b"%d o 000000000\n" % time.time_ns())
    assert len(kept) <= cap and seen_max <= cap, f"kept {len(kept)} bytes, {seen_max} at most, of a {cap} cap"
    assert len(kept) >= cap // 2 - record_size, f"expected at least half the cap of records, kept {len(kept)}"
    records = parse(kept)
    assert len(records) * record_size >= len(kept) - record_size, "every kept line is a whole record"
    text = as_text(records).encode()
    assert text == pattern(total)[-len(text):] or text == pattern(total)[-len(text) + 1:] + b"\n", (
        "expected the last lines written, in order")
    assert [r.ns for r in records] == sorted({r.ns for r in records}), "stamps strictly increasing"


async def test_the_tail_spans_both_files(tmp_path: Path) -> None:
    output = OutputLog(tmp_path, 20_000)
    proc = spawn_writer(output, 10_000, 1000)
    output.start()
    await output.finish(DEADLINE_S)
    proc.wait(timeout=DEADLINE_S)
    rotated, current = on_disk(tmp_path)
    assert rotated and current
    assert output.tail(2500).encode() == pattern(10_000)[-2500:]
    everything = output.tail(100_000).encode()
    assert everything == as_text(parse(rotated + current)).encode(), "all that is kept, no more"
    assert everything == pattern(10_000)[-len(everything):]
    output.close()


async def test_stdout_and_stderr_are_kept_apart_each_line_a_record(tmp_path: Path) -> None:
    output = OutputLog(tmp_path, MIB)
    script = ("import sys\nsys.stdout.write('out 1\\n'); sys.stdout.flush()\n"
              "sys.stderr.write('err 1\\nerr 2\\n'); sys.stderr.flush()\n"
              "sys.stdout.write('out 2 no newline'); sys.stdout.flush()\n"
              "sys.stdout.write('x' * (MAX + 10) + '\\n')\n").replace("MAX", str(MAX_LINE_BYTES))
    heard: list[Record] = []
    output.on_records = heard.extend
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=output.writer, stderr=output.stderr_writer)
    output.start()
    await output.finish(DEADLINE_S)
    assert proc.wait(timeout=DEADLINE_S) == 0
    records = parse(b"".join(on_disk(tmp_path)))
    assert records == heard, "followers hear exactly what is written"
    by_stream = {stream: [r.text for r in records if r.stream == stream] for stream in (STDOUT, STDERR)}
    assert by_stream[STDERR] == [b"err 1", b"err 2"]
    long = b"out 2 no newline" + b"x" * (MAX_LINE_BYTES + 10)
    assert by_stream[STDOUT][0] == b"out 1"
    assert b"".join(by_stream[STDOUT][1:]) == long, "a long line is cut into records, nothing lost"
    assert all(len(text) <= MAX_LINE_BYTES for text in by_stream[STDOUT]), "no record over the line bound"
    assert output.ended
    output.close()


async def test_a_flood_leaves_the_event_loop_responsive(tmp_path: Path) -> None:
    """However fast the child writes, the pump does one read (at most CHUNK_BYTES) per turn of the event
    loop: every other task gets its turn between any two of its reads."""
    output = OutputLog(tmp_path, MIB)
    turns: list[int] = []  # bytes of text the pump wrote since the previous turn of the ticker, at each turn
    since_last_turn = 0
    pump_write = output._write

    def counted_write(records: list[Record]) -> None:  # (private: where the pump's reads show)
        nonlocal since_last_turn
        since_last_turn += sum(len(r.text) for r in records)
        pump_write(records)

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
    # One read, plus what a previous read left of a line not yet cut.
    assert max(reads_between_turns) <= CHUNK_BYTES + MAX_LINE_BYTES, (
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
        for line in (b"a" * 50, b"b" * 50, b"c" * 50):  # past half the cap: output.log is created anew
            os.write(writer, line + b"\n")
            await asyncio.sleep(0.05)
    finally:
        os.close(writer)
    await output.finish(DEADLINE_S)
    assert secret.read_text() == "SECRET"
    assert not (directory / LOG_NAME).is_symlink()
    assert [r.text for r in parse((directory / LOG_NAME).read_bytes())] == [b"c" * 50]
    assert output.tail(1000) == "b" * 50 + "\n" + "c" * 50 + "\n", (
        "the tail comes from the rep's own descriptors")
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
    assert len(os.listdir("/proc/self/fd")) == before + 6  # the directory, two pipes' ends, the log
    output.close()
    output.close()
    assert len(os.listdir("/proc/self/fd")) == before
