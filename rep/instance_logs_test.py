"""The rep's log book: instances' records as asked (recent, since, one stream, one index), a crashed
instance's from its kept directory, and followers that are bounded and dropped when their reader lags.
The output pipes are written by the test itself: no process is started."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.support.polling import eventually

from .instance_logs import LogBook, LogQuery, history, read_kept
from .log_records import STDERR, STDOUT, Record, parse
from .log_stream import Follower, Origin
from .output_log import LOG_NAME, MIB, OutputLog

pytestmark = pytest.mark.timeout(30)
DEADLINE_S = 10.0


@pytest.fixture
def book() -> LogBook:
    return LogBook()


async def lines_of(book: LogBook, query: LogQuery) -> list[tuple[str, str, str]]:
    entries, _ = history(book.sources(query), query)
    return [(origin.guid, record.stream, record.text.decode()) for origin, record in entries]


async def test_history_merges_instances_in_time_order_with_every_filter(
    tmp_path: Path, book: LogBook
) -> None:
    pipes = {}
    outputs = []
    for guid, index in (("a", 0), ("b", 1)):
        directory = tmp_path / guid
        directory.mkdir()
        output = OutputLog(directory, MIB)
        pipes[guid] = (os.dup(output.writer), os.dup(output.stderr_writer))
        output.start()
        book.started(Origin(guid, "cell-1", "web", index), directory, output)
        outputs.append(output)
    order = [("a", 0, b"a1\n"), ("b", 0, b"b1\n"), ("a", 1, b"a-err\n"), ("b", 0, b"b2\n"), ("a", 0, b"a2\n")]
    count = 0
    for guid, which, data in order:
        os.write(pipes[guid][which], data)
        count += 1
        await eventually(lambda n=count: sum(len(parse(o.snapshot())) for o in outputs) == n,  # type: ignore[misc]
                         DEADLINE_S, f"{count} records written", lambda: [o.snapshot() for o in outputs])
    everything = await lines_of(book, LogQuery(process_guid="web"))
    assert everything == [("a", "o", "a1"), ("b", "o", "b1"), ("a", "e", "a-err"), ("b", "o", "b2"),
                          ("a", "o", "a2")], "merged in the order printed"
    assert await lines_of(book, LogQuery(process_guid="web", recent=2)) == everything[-2:]
    only_b = [e for e in everything if e[0] == "b"]
    assert await lines_of(book, LogQuery(process_guid="web", index=1)) == only_b
    assert await lines_of(book, LogQuery(process_guid="web", stream=STDERR)) == [("a", "e", "a-err")]
    assert await lines_of(book, LogQuery(process_guid="web", stream=STDOUT, recent=1)) == [("a", "o", "a2")]
    entries, _ = history(book.sources(LogQuery(process_guid="web")), LogQuery(process_guid="web"))
    third = entries[2][1].ns
    assert await lines_of(book, LogQuery(process_guid="web", since_ns=third)) == everything[3:]
    assert await lines_of(book, LogQuery(process_guid="other")) == []
    assert await lines_of(book, LogQuery(process_guid="web", recent=0)) == []
    for fds in pipes.values():
        for fd in fds:
            os.close(fd)
    for output in outputs:
        await output.finish(DEADLINE_S)
        output.close()


async def test_a_crashed_instance_is_read_from_its_kept_directory_until_forgotten(
    tmp_path: Path, book: LogBook
) -> None:
    directory = tmp_path / "a"
    directory.mkdir()
    output = OutputLog(directory, MIB)
    out = os.dup(output.writer)
    output.start()
    book.started(Origin("a", "cell-1", "web", 0), directory, output)
    os.write(out, b"last words\n")
    os.close(out)
    await output.finish(DEADLINE_S)
    output.close()
    book.released("a", kept=True)
    assert await lines_of(book, LogQuery(process_guid="web")) == [("a", "o", "last words")], (
        "a crashed instance's lines stay readable")
    book.released("a", kept=False)
    assert await lines_of(book, LogQuery(process_guid="web")) == [], "a removed directory is forgotten"


def test_a_kept_log_the_app_replaced_with_a_link_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"1 o SECRET\n")
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / LOG_NAME).symlink_to(secret)
    assert read_kept(kept) == b"", "a symlink is not followed"
    (kept / LOG_NAME).unlink()
    os.link(secret, kept / LOG_NAME)
    assert read_kept(kept) == b"", "a file with another name elsewhere (a hard link) is not read"
    (kept / LOG_NAME).unlink()
    (kept / LOG_NAME).write_bytes(b"2 o mine\n")
    assert parse(read_kept(kept)) == [Record(2, "o", b"mine")]


async def test_a_follower_hears_new_records_and_is_dropped_when_it_falls_behind(
    tmp_path: Path, book: LogBook
) -> None:
    directory = tmp_path / "a"
    directory.mkdir()
    output = OutputLog(directory, MIB)
    out = os.dup(output.writer)
    output.start()
    book.started(Origin("a", "cell-1", "web", 0), directory, output)
    query = LogQuery(process_guid="web")
    follower = Follower(query.matches, max_bytes=4096)
    other = Follower(LogQuery(process_guid="api").matches, max_bytes=4096)
    book.attach(follower)
    book.attach(other)
    os.write(out, b"hello\n")
    await eventually(lambda: follower.pending_bytes > 0, DEADLINE_S, "the record offered",
                     lambda: follower.pending_bytes)
    batches = follower.batches()
    [(origin, records)] = await anext(batches)
    assert (origin.guid, [r.text for r in records]) == ("a", [b"hello"])
    assert other.pending_bytes == 0, "a follower hears only what it asked for"
    # Its reader stops reading: past max_bytes it is dropped, and what it held is freed at once.
    for _ in range(100):
        os.write(out, b"x" * 100 + b"\n")
        await asyncio.sleep(0)  # one record a read: the pump offers them one by one
    await eventually(lambda: follower.dropped, DEADLINE_S, "the follower dropped",
                     lambda: follower.pending_bytes)
    assert follower.pending_bytes == 0
    for _ in range(10):
        os.write(out, b"y" * 1000 + b"\n")
    await asyncio.sleep(0)
    assert follower.pending_bytes == 0, "a dropped follower holds nothing more"
    assert [b async for b in batches] == [], "its reader sees the end"
    book.detach(follower)
    book.detach(other)
    assert book.follower_count == 0
    os.close(out)
    await output.finish(DEADLINE_S)
    output.close()


async def test_a_tasks_follower_ends_with_the_task_an_apps_does_not(tmp_path: Path, book: LogBook) -> None:
    directory = tmp_path / "task-t1"
    directory.mkdir()
    output = OutputLog(directory, MIB)
    output.start()
    book.started(Origin("t1", "cell-1"), directory, output)
    tasks = Follower(LogQuery(task_guid="t1").matches, ends_with="t1")
    apps = Follower(LogQuery(process_guid="web").matches)
    book.attach(tasks)
    book.attach(apps)
    await output.finish(DEADLINE_S)
    output.close()
    book.released("t1", kept=False)
    assert tasks.done and not apps.done
    assert await lines_of(book, LogQuery(task_guid="t1")) == []
