"""The end-to-end benchmark on both transports in one run: HTTP, then NATS (the launcher's embedded
nats-server: TLS, a user per certificate, like every component's HTTPS).

    python tests/bench/transports.py [--instances N] [--apps A] [--cells C] [--fetches K] [--quick]

For each transport: a local cluster (BBS on SQLite, auctioneer, one `vendue rep --sim --cells C` process),
A apps x N/A instances desired at once (default 100 x 100 = 10,000 over 100 cells), then
- seconds until every instance is RUNNING (tests/bench/e2e.py's `measure`, progress from /v1/events),
- seconds per state fetch: K fetches of every cell's state, made from this process with the auctioneer's
  own fetcher for that transport against the loaded cells (the BBS's cell list read once beforehand, so
  only the transport is timed), and the auctioneer's own mean over the run (its histogram),
- HTTP requests and NATS messages per auction (the auctioneer's /v1/stats).
Prints ONE JSON object. Targets (reported, not asserted): a NATS state fetch of 100 cells at least twice
as fast as the HTTP one, and the NATS run no slower than HTTP end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from auctioneer.cells import CellFetcher  # noqa: E402
from auctioneer.clients import RepClients  # noqa: E402
from auctioneer.metrics import Metrics  # noqa: E402
from auctioneer.nats_cells import NatsCellStateSource  # noqa: E402
from common.models import CellPresence  # noqa: E402
from common.tls import TLSFiles  # noqa: E402
from common.transport.nats_connection import NatsConnection  # noqa: E402
from deploy.cluster import LocalCluster  # noqa: E402
from tests.bench.e2e import auctioneer_stats, measure, parse_metrics  # noqa: E402

STATE_TIMEOUT_S = 10.0


class _CachedCells(CellFetcher):
    """The HTTP fetcher with the cell list read once: the timing is the state fetch alone."""

    def __init__(self, cells: list[CellPresence], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cells = cells

    async def present_cells(self) -> list[CellPresence]:
        return self._cells


async def time_state_fetches(cluster: LocalCluster, transport: str, fetches: int) -> dict[str, Any]:
    """Over NATS the harness speaks as the auctioneer (its certificate: the one role that may ask every
    cell for its state); over HTTP as the cluster's admin."""
    async with cluster.async_http_client(base_url=cluster.bbs_url, timeout=30) as bbs:
        response = await bbs.get("/v1/cells")
        cells = [CellPresence.model_validate(c) for c in response.json()["items"]]
        metrics = Metrics()
        nats: NatsConnection | None = None
        reps: RepClients | None = None
        if transport == "nats":
            nats = NatsConnection(
                cluster.nats_url,
                name="bench",
                tls=None if cluster.insecure else TLSFiles.in_dir(cluster.certs_dir, "auctioneer"),
            )
            nats.start()
            await nats.wait_connected(10)

            async def listed() -> list[CellPresence]:
                return cells

            source: Any = NatsCellStateSource(nats, listed, metrics, timeout=STATE_TIMEOUT_S)
        else:
            reps = RepClients(
                256, timeout=STATE_TIMEOUT_S, ssl_context=None if cluster.insecure else cluster.verify
            )
            source = _CachedCells(cells, bbs, reps, metrics, timeout=STATE_TIMEOUT_S)
        try:
            await source.fetch()  # warm: connections, the inbox, imports
            seconds, answered, instances = [], [], 0
            for _ in range(fetches):
                started = time.perf_counter()
                fetched = await source.fetch()
                seconds.append(time.perf_counter() - started)
                answered.append(len(fetched.states))
                instances = sum(sum(s.lrp_counts.values()) for s in fetched.states)  # the bids count them
        finally:
            if nats is not None:
                await nats.close()
            if reps is not None:
                await reps.aclose()
    return {
        "cells": len(cells), "cells_answered_min": min(answered), "instances_reported": instances,
        "fetches": fetches, "mean_s": round(statistics.mean(seconds), 5),
        "median_s": round(statistics.median(seconds), 5), "min_s": round(min(seconds), 5),
        "messages_per_fetch": round(sum(metrics.messages.values()) / (fetches + 1), 1),
        "requests_per_fetch": round(sum(metrics.requests_made.values()) / (fetches + 1), 1),
    }


def auctioneer_fetch_mean(cluster: LocalCluster) -> float | None:
    samples = parse_metrics(
        httpx.get(f"{cluster.auctioneer_url}/metrics", timeout=10, verify=cluster.verify).text
    )
    count = samples.get("vendue_auctioneer_state_fetch_seconds_count", 0.0)
    total = samples.get("vendue_auctioneer_state_fetch_seconds_sum", 0.0)
    return round(total / count, 5) if count else None


def traffic(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    auctions = after.get("auctions", 0) - before.get("auctions", 0)

    def diff(key: str) -> dict[str, int]:
        b = before.get(key) or {}
        return {k: v - b.get(k, 0) for k, v in (after.get(key) or {}).items()}

    requests, messages = diff("requests_made"), diff("messages")
    per = (lambda d: {k: round(v / auctions, 2) for k, v in d.items()}) if auctions else (lambda d: None)
    return {
        "auctions": auctions,
        "requests_made": requests, "requests_per_auction": per(requests),
        "messages": messages, "messages_per_auction": per(messages),
        "bad_replies": after.get("bad_replies", 0) - before.get("bad_replies", 0),
    }


def run_transport(transport: str, args: argparse.Namespace, apps: int, per_app: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"vendue-bench-{transport}-") as tmp:
        timings = ["--presence-ttl", str(args.presence_ttl)]
        cluster = LocalCluster(
            Path(tmp) / "cluster",
            cells=args.cells,
            zones=args.zones,
            executor="sim",
            sim_cells_per_process=args.cells,
            cell_memory_mb=64 * 1024,
            cell_disk_mb=256 * 1024,
            cell_containers=250,
            bbs_args=[*timings, "--convergence-interval", str(args.convergence_interval)],
            rep_args=timings,
            transport=transport,
        )
        try:
            started = time.perf_counter()
            cluster.start(timeout=120.0)
            startup_s = time.perf_counter() - started
            before = asyncio.run(_stats(cluster))
            report = asyncio.run(measure(cluster, apps, per_app, args.timeout))
            after = asyncio.run(_stats(cluster))
            fetch = asyncio.run(time_state_fetches(cluster, transport, args.fetches))
            return {
                "transport": transport,
                "instances": report.get("instances"),
                "cells": report.get("cells"),
                "all_running": report.get("all_running"),
                "seconds_to_all_running": report.get("seconds_to_all_running"),
                "seconds_to_first_running": report.get("seconds_to_first_running"),
                "state_fetch_loaded": fetch,
                "auctioneer_state_fetch_mean_s": auctioneer_fetch_mean(cluster),
                "auctioneer": traffic(before, after),
                "cluster_start_seconds": round(startup_s, 3),
            }
        finally:
            cluster.stop()


async def _stats(cluster: LocalCluster) -> dict[str, Any]:
    async with cluster.async_http_client() as client:
        return await auctioneer_stats(client, cluster.auctioneer_url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--apps", type=int, default=100)
    parser.add_argument("--cells", type=int, default=100)
    parser.add_argument("--zones", type=int, default=3)
    parser.add_argument("--fetches", type=int, default=20, help="timed state fetches per transport")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true", help="a tenth the size (1,000 instances)")
    parser.add_argument("--presence-ttl", type=float, default=10.0)
    parser.add_argument("--convergence-interval", type=float, default=5.0)
    args = parser.parse_args(argv)
    apps = max(1, args.apps // 10) if args.quick else args.apps
    per_app = args.instances // args.apps
    runs: dict[str, Any] = {}
    for transport in ("http", "nats"):
        try:
            runs[transport] = run_transport(transport, args, apps, per_app)
        except Exception as exc:  # noqa: BLE001 - reported in the JSON, not raised
            runs[transport] = {"transport": transport, "error": f"{type(exc).__name__}: {exc}"}
    http, nats_run = runs["http"], runs["nats"]
    comparison: dict[str, Any] = {}
    try:
        http_fetch = http["state_fetch_loaded"]["mean_s"]
        nats_fetch = nats_run["state_fetch_loaded"]["mean_s"]
        comparison["state_fetch_speedup"] = round(http_fetch / nats_fetch, 2)
        comparison["state_fetch_target_met"] = http_fetch >= 2 * nats_fetch
        comparison["e2e_nats_over_http"] = round(
            nats_run["seconds_to_all_running"] / http["seconds_to_all_running"], 3
        )
        comparison["e2e_target_met"] = nats_run["seconds_to_all_running"] <= http["seconds_to_all_running"]
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        comparison["error"] = f"incomplete runs: {exc!r}"
    print(json.dumps({"benchmark": "e2e-transports", "database": "sqlite", "instances": apps * per_app,
                      "runs": runs, "comparison": comparison}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
