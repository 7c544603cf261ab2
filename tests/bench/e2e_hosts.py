"""The end-to-end placement benchmark on real network hosts, next to the same cluster on loopback.

    python tests/bench/e2e_hosts.py [--instances N] [--apps A] [--cells C] [--cells-per-rep K]
                                    [--zones Z] [--rounds R] [--timeout S]

The cluster of tests/cluster/multihost.py (needs root and `ip`): two BBS replicas and two auctioneers on
an embedded PostgreSQL on the control host, and C simulated cells hosted K per rep process, each rep
process on a host of its own (network namespaces on one bridge, addresses from 198.18.0.0/15), every
component on its host's address with TLS on. Then the same cluster (same components, same PostgreSQL, same
arguments) with everything on loopback, so that the ratio shows what the hosts cost: veths, a bridge,
and TLS to a host address instead of 127.0.0.1. Each round measures both, alternating which goes first.

Desires A apps x N/A instances (default 100 x 100 = 10,000) and measures the seconds until every one is
RUNNING in the BBS, as tests/bench/e2e.py does (its `measure`: the BBS's own counts polled, then a full
listing). Prints ONE JSON object; never asserts on time. The single-BBS SQLite figure of tests/bench/e2e.py
is the project's headline number; this one runs the HA layout, which is what a multi-host cluster runs.
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

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deploy.cluster import LocalCluster  # noqa: E402
from tests.bench.e2e import measure, peak_rss_mb  # noqa: E402
from tests.cluster.multihost import MultiHostCluster, unavailable_reason  # noqa: E402


def cluster_options(args: argparse.Namespace) -> dict[str, Any]:
    timings = ["--presence-ttl", str(args.presence_ttl)]
    return {
        "cells": args.cells, "zones": args.zones, "sim_cells_per_process": args.cells_per_rep,
        # Room for a full load of 128 MB / 256 MB instances, as tests/bench/e2e.py.
        "cell_memory_mb": 64 * 1024, "cell_disk_mb": 256 * 1024, "cell_containers": 250,
        "bbs_args": [*timings, "--convergence-interval", str(args.convergence_interval)],
        "rep_args": timings,
    }


def follow_the_leader(cluster: LocalCluster) -> None:
    """Point the harness's auctioneer statistics at the lease holder: with two auctioneers the first one
    started is not always the one that auctions."""
    with cluster.http_client(base_url=cluster.bbs_url, timeout=10.0) as http:
        deadline = time.monotonic() + 30.0
        while (lease := http.get("/v1/leases/auctioneer")).status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no auctioneer holds the lease after 30 s: HTTP {lease.status_code}")
            time.sleep(0.2)
    cluster.auctioneer_url = lease.json()["url"]


def started_and_measured(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    """Start `cluster`, desire the run and measure it (the caller tears the cluster down)."""
    started = time.perf_counter()
    cluster.start(timeout=120.0)
    startup_s = time.perf_counter() - started
    follow_the_leader(cluster)
    report = asyncio.run(measure(cluster, args.apps, args.instances // args.apps, args.timeout))
    report["bbs_peak_rss_mb"] = peak_rss_mb(cluster.pids()["bbs"])
    report["cluster_start_seconds"] = round(startup_s, 3)
    return report


def run_hosts(args: argparse.Namespace) -> dict[str, Any]:
    cluster = MultiHostCluster(**cluster_options(args))
    try:
        return {**started_and_measured(cluster, args), "hosts": sorted(cluster.hosts)}
    finally:
        leftovers = cluster.close()
        if leftovers:
            print(f"warning: killed leftover processes {leftovers}", file=sys.stderr)


def run_loopback(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vendue-bench-", ignore_cleanup_errors=True) as tmp:
        cluster = LocalCluster(Path(tmp), executor="sim", ha=True, **cluster_options(args))
        try:
            return started_and_measured(cluster, args)
        finally:
            cluster.stop()


def guarded(run: Any, args: argparse.Namespace) -> dict[str, Any]:
    try:
        return run(args)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON, not raised
        return {"error": f"{type(exc).__name__}: {exc}"}


def median_seconds(runs: list[dict[str, Any]]) -> float | None:
    seconds = [r["seconds_to_all_running"] for r in runs if r.get("seconds_to_all_running") is not None]
    return round(statistics.median(seconds), 3) if len(seconds) == len(runs) and seconds else None


def summary(run: dict[str, Any]) -> dict[str, Any]:
    keys = ("all_running", "seconds_to_all_running", "seconds_to_desire_all", "seconds_to_first_running",
            "seconds_to_fraction_running", "cells", "bbs_peak_rss_mb", "cluster_start_seconds", "hosts",
            "error")
    auctioneer = run.get("auctioneer") or {}
    return {
        **{k: run[k] for k in keys if k in run},
        "auctions": auctioneer.get("auctions"),
        "requests_per_auction": auctioneer.get("requests_per_auction"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--apps", type=int, default=100)
    parser.add_argument("--cells", type=int, default=100)
    parser.add_argument(
        "--cells-per-rep", type=int, default=25, help="simulated cells per rep process (host)"
    )
    parser.add_argument("--zones", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="hosts and loopback runs each, alternating")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--presence-ttl", type=float, default=10.0)
    parser.add_argument("--convergence-interval", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.apps < 1 or args.instances < args.apps or args.cells_per_rep < 1 or args.rounds < 1:
        parser.error("--instances >= --apps >= 1, --cells-per-rep >= 1 and --rounds >= 1")
    if (reason := unavailable_reason()) is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    hosts: list[dict[str, Any]] = []
    loopback: list[dict[str, Any]] = []
    for i in range(args.rounds):
        order = [(run_hosts, hosts), (run_loopback, loopback)]
        for run, into in order if i % 2 == 0 else order[::-1]:
            into.append(guarded(run, args))
    hosts_s, loopback_s = median_seconds(hosts), median_seconds(loopback)
    print(json.dumps({
        "benchmark": "e2e_hosts",
        "instances": args.instances, "apps": args.apps, "cells": args.cells,
        "rep_processes": -(-args.cells // args.cells_per_rep), "zones": args.zones,
        "layout": "2 BBS + 2 auctioneers on embedded PostgreSQL, TLS on, simulated cells",
        "median_seconds_to_all_running": {"hosts": hosts_s, "loopback": loopback_s},
        "ratio_hosts_to_loopback": round(hosts_s / loopback_s, 3) if hosts_s and loopback_s else None,
        "hosts": [summary(r) for r in hosts],
        "loopback": [summary(r) for r in loopback],
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
