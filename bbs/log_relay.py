"""GET /v1/logs/{process_guid} and GET /v1/tasks/{task_guid}/logs: the output of an app's instances (or of a
task), relayed from the reps that hold them (GET {rep_url}/logs: rep/instance_logs.py), merged in time order.

Nothing is copied to the BBS's disk, and nothing waits on a reader: each rep's lines go into one bounded
queue per reader (`queue_lines`, and QUEUE_BYTES); a reader that falls so far behind that the
queue is full is dropped (its rep streams closed, its answer ended with a line that says so), and so is
one a rep dropped for the same reason; one that takes nothing for SEND_TIMEOUT_S has its connection closed
(common/streaming.py). Following, lines are held for `reorder_s` so that those of several reps come out
in time order; the actual set is read again every `poll_s` for instances on cells not followed yet (a
restart elsewhere, a scale-up, a rolling update's new instances); on a cell already followed the rep
follows the app's next instances itself. Without `follow`, every present cell's rep is asked: a crashed
instance's logs stay on its cell (until its directory goes) while the BBS no longer records where it ran.

Each line is JSON: time (RFC 3339, UTC, nanoseconds), ns, index, cell, instance_guid, stream, text (a
task's: task_guid instead of index and instance_guid); the last may be {"end": reason}.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from .outbound import EXPECTED_REP_CELLS

log = logging.getLogger("bbs.logs")

QUEUE_LINES = 30_000  # lines a reader may be behind before it is dropped (3 s of 10,000 lines a second)...
QUEUE_BYTES = 16 * 1024 * 1024  # ...or bytes, their text and ENTRY_OVERHEAD each
ENTRY_OVERHEAD = 512  # what a queued line costs besides its text (its dict of seven fields)
REORDER_S = 0.1
POLL_S = 1.0
REP_TIMEOUT_S = 10.0  # a rep's answer to a request that does not follow
FOLLOW_ALL = 100_000  # recent records asked of a rep on resuming a stream (since its last one)
DROPPED = "dropped: the reader fell behind"


@dataclass(frozen=True, slots=True)
class LogAsk:
    """What a reader asks (the query of GET /v1/logs/{process_guid}, or a task's guid)."""

    process_guid: str = ""
    index: int | None = None
    task_guid: str = ""
    recent: int = 100
    since_ns: int = 0
    stream: str | None = None  # "stdout", "stderr", or both
    follow: bool = False

    def rep_params(self, since_ns: int | None = None, recent: int | None = None) -> dict[str, str]:
        params = {"recent": str(self.recent if recent is None else recent),
                  "since_ns": str(self.since_ns if since_ns is None else since_ns)}
        if self.task_guid:
            params["task_guid"] = self.task_guid
        else:
            params["process_guid"] = self.process_guid
        if self.index is not None:
            params["index"] = str(self.index)
        if self.stream:
            params["stream"] = self.stream
        if self.follow:
            params["follow"] = "1"
        return params


@dataclass(frozen=True, slots=True)
class Rep:
    """A rep process to ask: its URL and the cells of it the answer is about (its certificate must be
    theirs)."""

    url: str
    cells: tuple[str, ...]


# The reps to ask now; None: nothing more will come (a task that ended), the follow ends once drained.
Targets = Callable[[], Awaitable[list[Rep] | None]]
Fetch = Callable[[Rep, dict[str, str], bool], AsyncGenerator[dict[str, Any], None]]


def rfc3339(ns: int) -> str:
    """Unix nanoseconds as RFC 3339 in UTC, to the nanosecond: 2026-11-29T05:00:00.123456789Z."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction:09d}Z"


def client_line(entry: dict[str, Any]) -> bytes:
    """A rep's line as the BBS serves it."""
    ns = int(entry.get("ns", 0))
    line: dict[str, Any] = {"time": rfc3339(ns), "ns": ns}
    if entry.get("process_guid"):
        line["index"] = entry.get("index")
        line["instance_guid"] = entry.get("guid", "")
    else:
        line["task_guid"] = entry.get("guid", "")
    line.update(cell=entry.get("cell_id", ""), stream=entry.get("stream", ""), text=entry.get("text", ""))
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def end_line(reason: str) -> bytes:
    return json.dumps({"end": reason}).encode() + b"\n"


async def relay(ask: LogAsk, targets: Targets, fetch: Fetch, *, queue_lines: int = QUEUE_LINES,
                reorder_s: float = REORDER_S, poll_s: float = POLL_S) -> AsyncGenerator[bytes, None]:
    """The lines `ask` names, from the reps `targets()` lists (read again every `poll_s` when following)."""
    # Closed explicitly (aclosing): a reader that leaves closes every rep stream at once, not at some
    # later garbage collection.
    if not ask.follow:
        async with contextlib.aclosing(_recent(ask, await targets() or [], fetch)) as lines:
            async for chunk in lines:
                yield chunk
        return
    async with contextlib.aclosing(_follow(ask, targets, fetch, queue_lines, reorder_s, poll_s)) as lines:
        async for chunk in lines:
            yield chunk


async def _recent(ask: LogAsk, reps: list[Rep], fetch: Fetch) -> AsyncGenerator[bytes, None]:
    async def collect(rep: Rep) -> list[dict[str, Any]]:
        lines = []
        try:
            async with contextlib.aclosing(fetch(rep, ask.rep_params(), False)) as entries:
                async for entry in entries:
                    if "ns" in entry:
                        lines.append(entry)
        except (httpx.HTTPError, ValueError) as exc:
            log.info("a rep's logs could not be read",
                     extra={"data": {"rep_url": rep.url, "error": repr(exc)}})
        return lines

    answers = await asyncio.gather(*(collect(rep) for rep in reps))
    merged = list(heapq.merge(*answers, key=lambda entry: int(entry["ns"])))
    merged = merged[-ask.recent:] if ask.recent > 0 else []
    for first in range(0, len(merged), 1000):
        yield b"".join(client_line(entry) for entry in merged[first : first + 1000])


class _Following:
    """One reader's follow: a pump per rep process into one bounded queue."""

    def __init__(self, ask: LogAsk, fetch: Fetch, queue_lines: int, queue_bytes: int = QUEUE_BYTES) -> None:
        self.ask = ask
        self.fetch = fetch
        self.queue: asyncio.Queue[tuple[float, dict[str, Any]]] = asyncio.Queue(maxsize=queue_lines)
        self.queue_bytes = queue_bytes
        self.queued_bytes = 0
        self.pumps: dict[str, asyncio.Task[None]] = {}
        self.last_ns: dict[str, int] = {}
        self.dropped = ""

    def ensure(self, rep: Rep) -> None:
        if rep.url not in self.pumps and not self.dropped:
            self.pumps[rep.url] = asyncio.create_task(self._pump(rep), name=f"logs-{rep.url}")

    async def _pump(self, rep: Rep) -> None:
        params = self.ask.rep_params()
        if rep.url in self.last_ns:  # followed before: what came since, all of it
            params = self.ask.rep_params(since_ns=max(self.ask.since_ns, self.last_ns[rep.url]),
                                         recent=FOLLOW_ALL)
        try:
            async with contextlib.aclosing(self.fetch(rep, params, True)) as entries:
                async for entry in entries:
                    if "end" in entry:
                        if entry["end"] == DROPPED:
                            self.dropped = DROPPED
                        return
                    self.last_ns[rep.url] = max(self.last_ns.get(rep.url, 0), int(entry.get("ns", 0)))
                    size = len(entry.get("text", "")) + ENTRY_OVERHEAD
                    if self.queued_bytes + size > self.queue_bytes:
                        self.dropped = DROPPED
                        return
                    try:
                        self.queue.put_nowait((time.monotonic(), entry))
                    except asyncio.QueueFull:
                        self.dropped = DROPPED
                        return
                    self.queued_bytes += size
        except (httpx.HTTPError, ValueError) as exc:
            log.info("a rep's log stream ended", extra={"data": {"rep_url": rep.url, "error": repr(exc)}})
        finally:
            self.last_ns.setdefault(rep.url, 0)
            self.pumps.pop(rep.url, None)

    def take(self, queued: tuple[float, dict[str, Any]]) -> tuple[float, dict[str, Any]]:
        self.queued_bytes -= len(queued[1].get("text", "")) + ENTRY_OVERHEAD
        return queued

    async def close(self) -> None:
        pumps = list(self.pumps.values())
        for pump in pumps:
            pump.cancel()
        for pump in pumps:
            with contextlib.suppress(BaseException):
                await pump


async def _follow(ask: LogAsk, targets: Targets, fetch: Fetch, queue_lines: int, reorder_s: float,
                  poll_s: float) -> AsyncGenerator[bytes, None]:
    following = _Following(ask, fetch, queue_lines)
    held: list[tuple[int, int, float, dict[str, Any]]] = []  # (ns, arrival number, arrived at, entry)
    numbers = itertools.count()
    polled_at = float("-inf")
    over = False
    try:
        while True:
            now = time.monotonic()
            if now - polled_at >= poll_s:
                polled_at = now
                reps = await targets()
                over = reps is None
                for rep in reps or []:
                    following.ensure(rep)
            if over and not (following.pumps or held) and following.queue.empty():
                break  # the task ended: nothing more comes
            if following.dropped:
                yield end_line(following.dropped)
                return
            # Wake on the first line when none is held; else only when the oldest held is due (the lines
            # that came meanwhile wait in the queue: one wake-up per window under load, not one a line).
            until_poll = max(0.001, poll_s - (time.monotonic() - polled_at))
            if held:
                await asyncio.sleep(max(0.0, min(held[0][2] + reorder_s - time.monotonic(), until_poll)))
            else:
                with contextlib.suppress(TimeoutError):
                    first = await asyncio.wait_for(following.queue.get(), until_poll)
                    arrived, entry = following.take(first)
                    heapq.heappush(held, (int(entry.get("ns", 0)), next(numbers), arrived, entry))
            while not following.queue.empty():
                arrived, entry = following.take(following.queue.get_nowait())
                heapq.heappush(held, (int(entry.get("ns", 0)), next(numbers), arrived, entry))
            ready = []
            cutoff = time.monotonic() - reorder_s
            while held and held[0][2] <= cutoff:
                ready.append(heapq.heappop(held)[3])
            if ready:
                yield b"".join(client_line(entry) for entry in ready)
        for _, _, _, entry in sorted(held):
            yield client_line(entry)
    finally:
        await following.close()


def rep_fetcher(client: httpx.AsyncClient) -> Fetch:
    """GET {rep_url}/logs with the BBS's own client: only to a server whose certificate is the rep of the
    cells asked about (bbs/outbound.py)."""

    async def fetch(rep: Rep, params: dict[str, str], follow: bool) -> AsyncGenerator[dict[str, Any], None]:
        EXPECTED_REP_CELLS.set(rep.cells)
        timeout = httpx.Timeout(REP_TIMEOUT_S, read=None if follow else REP_TIMEOUT_S)
        async with client.stream("GET", f"{rep.url}/logs", params=params, timeout=timeout) as response:
            if response.status_code == 404:
                return
            response.raise_for_status()
            async for line in response.aiter_lines():
                if line.strip():
                    yield json.loads(line)

    return fetch
