"""The BBS's log relay with fake reps: merged in time order, the last N across reps, a follow that picks up
the reps of new instances, resumes where a rep's stream broke, and drops a reader that falls behind."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from tests.support.polling import eventually

from .log_relay import DROPPED, LogAsk, Rep, client_line, relay, rfc3339

pytestmark = pytest.mark.timeout(30)
DEADLINE_S = 10.0


def entry(ns: int, index: int, cell: str, text: str, stream: str = "stdout") -> dict[str, Any]:
    return {"ns": ns, "stream": stream, "text": text, "cell_id": cell, "guid": f"g{index}",
            "process_guid": "web", "index": index}


class FakeReps:
    """Reps by URL: each a list of entries (its history) and a queue of what it prints next."""

    def __init__(self) -> None:
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.live: dict[str, asyncio.Queue[dict[str, Any] | None]] = {}
        self.asked: list[tuple[str, dict[str, str]]] = []
        self.open = 0

    def rep(self, url: str, history: list[dict[str, Any]]) -> Rep:
        self.history[url] = history
        self.live[url] = asyncio.Queue()
        return Rep(url, (url.removeprefix("https://"),))

    async def fetch(self, rep: Rep, params: dict[str, str], follow: bool,
                    ) -> AsyncGenerator[dict[str, Any], None]:
        self.asked.append((rep.url, params))
        since, recent = int(params["since_ns"]), int(params["recent"])
        after = [e for e in self.history[rep.url] if e.get("ns", since + 1) > since]
        kept = after[-recent:] if recent else []
        for item in kept:
            yield item
        if not follow:
            return
        self.open += 1
        try:
            while (item := await self.live[rep.url].get()) is not None:
                self.history[rep.url].append(item)
                yield item
        finally:
            self.open -= 1


async def read_lines(stream: AsyncIterator[bytes], count: int) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    async for chunk in stream:
        lines.extend(json.loads(line) for line in chunk.splitlines() if line.strip())
        if len(lines) >= count:
            break
    return lines


def test_lines_carry_an_rfc3339_utc_time_to_the_nanosecond() -> None:
    assert rfc3339(1_764_392_400_123_456_789) == "2025-11-29T05:00:00.123456789Z"
    line = json.loads(client_line(entry(1_764_392_400_000_000_001, 2, "cell-1", "hi\x1b[2J")))
    assert line == {"time": "2025-11-29T05:00:00.000000001Z", "ns": 1_764_392_400_000_000_001, "index": 2,
                    "instance_guid": "g2", "cell": "cell-1", "stream": "stdout", "text": "hi\x1b[2J"}


async def test_recent_merges_every_rep_in_time_order_and_keeps_the_last_n() -> None:
    reps = FakeReps()
    one = reps.rep("https://cell-1", [entry(1, 0, "cell-1", "a"), entry(4, 0, "cell-1", "d")])
    two = reps.rep("https://cell-2", [entry(2, 1, "cell-2", "b"), entry(3, 1, "cell-2", "c")])

    async def targets() -> list[Rep]:
        return [one, two]

    everything = await read_lines(relay(LogAsk(process_guid="web"), targets, reps.fetch), 4)
    assert [(line["text"], line["index"], line["cell"]) for line in everything] == [
        ("a", 0, "cell-1"), ("b", 1, "cell-2"), ("c", 1, "cell-2"), ("d", 0, "cell-1")]
    last = [chunk async for chunk in relay(LogAsk(process_guid="web", recent=3), targets, reps.fetch)]
    assert [json.loads(x)["text"] for x in b"".join(last).splitlines()] == ["b", "c", "d"]


async def test_follow_picks_up_new_reps_and_resumes_a_broken_stream_where_it_was() -> None:
    reps = FakeReps()
    one = reps.rep("https://cell-1", [entry(1, 0, "cell-1", "old")])
    two = reps.rep("https://cell-2", [])
    current = [one]

    async def targets() -> list[Rep]:
        return list(current)

    stream = relay(LogAsk(process_guid="web", follow=True), targets, reps.fetch, reorder_s=0.05, poll_s=0.05)
    assert [line["text"] for line in await read_lines(stream, 1)] == ["old"]
    await reps.live["https://cell-1"].put(entry(10, 0, "cell-1", "first"))
    assert [line["text"] for line in await read_lines(stream, 1)] == ["first"]
    reading = asyncio.create_task(read_lines(stream, 1))  # a reader reads on, as a client does
    current.append(two)  # a new instance, on another cell (a restart elsewhere, a rolling update)
    await eventually(lambda: reps.open == 2, DEADLINE_S, "the new cell's rep followed", lambda: reps.asked)
    await reps.live["https://cell-2"].put(entry(11, 1, "cell-2", "new"))
    assert [(line["text"], line["index"]) for line in await reading] == [("new", 1)]
    # cell-1's stream breaks (its rep restarted): followed again from its last line, nothing twice.
    reading = asyncio.create_task(read_lines(stream, 1))
    reps.history["https://cell-1"].append(entry(12, 0, "cell-1", "while away"))
    await reps.live["https://cell-1"].put(None)
    await eventually(lambda: len([a for a in reps.asked if a[0] == "https://cell-1"]) == 2, DEADLINE_S,
                     "cell-1 asked again", lambda: reps.asked)
    assert reps.asked[-1][1]["since_ns"] == "10"
    assert [line["text"] for line in await reading] == ["while away"]
    await stream.aclose()
    assert reps.open == 0, "the reader left: every rep stream closed"


async def test_follow_merges_reps_in_time_order_within_the_reorder_window() -> None:
    reps = FakeReps()
    one = reps.rep("https://cell-1", [])
    two = reps.rep("https://cell-2", [])

    async def targets() -> list[Rep]:
        return [one, two]

    stream = relay(LogAsk(process_guid="web", follow=True), targets, reps.fetch, reorder_s=0.3, poll_s=0.05)
    reading = asyncio.create_task(read_lines(stream, 3))
    await eventually(lambda: reps.open == 2, DEADLINE_S, "both reps followed", lambda: reps.asked)
    await reps.live["https://cell-1"].put(entry(30, 0, "cell-1", "third"))
    await reps.live["https://cell-2"].put(entry(10, 1, "cell-2", "first"))
    await reps.live["https://cell-1"].put(entry(20, 0, "cell-1", "second"))
    assert [line["text"] for line in await reading] == ["first", "second", "third"]
    await stream.aclose()


async def test_a_reader_that_falls_behind_is_dropped_and_the_reps_released() -> None:
    reps = FakeReps()
    one = reps.rep("https://cell-1", [])

    async def targets() -> list[Rep]:
        return [one]

    stream = relay(LogAsk(process_guid="web", follow=True), targets, reps.fetch, queue_lines=50,
                   reorder_s=0.01, poll_s=0.01)
    first = asyncio.create_task(anext(stream))  # the reader starts, then reads no more
    await eventually(lambda: reps.open == 1, DEADLINE_S, "the rep followed", lambda: reps.asked)
    for ns in range(1, 201):
        await reps.live["https://cell-1"].put(entry(ns, 0, "cell-1", "x"))
    await eventually(lambda: reps.open == 0, DEADLINE_S, "the rep stream closed once the queue was full",
                     lambda: reps.open)
    chunks = [await first] + [chunk async for chunk in stream]
    lines = [json.loads(x) for x in b"".join(chunks).splitlines() if x.strip()]
    assert lines[-1] == {"end": DROPPED}, lines[-1]
    assert len(lines) - 1 <= 50 + 1, f"at most the queue's worth before the drop, got {len(lines) - 1}"


async def test_a_rep_that_dropped_its_reader_ends_the_relay_too() -> None:
    reps = FakeReps()
    one = reps.rep("https://cell-1", [{"end": DROPPED}])

    async def targets() -> list[Rep]:
        return [one]

    stream = relay(LogAsk(process_guid="web", follow=True), targets, reps.fetch, reorder_s=0.01, poll_s=0.01)
    assert await read_lines(stream, 1) == [{"end": DROPPED}]
