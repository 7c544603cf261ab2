"""Diego's largest published scale through the real services: 250,000 instances of 5,000 apps on 1,000
simulated cells in 3 zones (32 GiB memory, 64 GiB disk, 250 containers each), BBS on SQLite, auctioneer
over HTTP, the cells hosted by `vendue rep --sim` processes.

    python tests/bench/scale.py [--instances 250000] [--apps 5000] [--cells 1000] [--cells-per-rep 250]
                                [--tls on|off|both] [--encryption on|off|both]

Prints ONE JSON object (never asserts on time):
- seconds from the first desire until every instance is RUNNING in the BBS (its own counts, polled);
- the auctioneer's state fetch of every cell once they are full (an auction for one more app, which
  cannot fit: it fetches 1,000 states of 250 instances each, then fails the app);
- convergence pass seconds at 250,000 actual LRPs (the BBS's own histogram, over passes made once
  everything runs);
- each app's split over zones (max - min instances per zone; target within 1);
- peak RSS (VmHWM) of the BBS and the auctioneer, and of the rep processes;
- CPU seconds each process used until everything ran (where the time goes, whatever else ran);
- requests made per component (the auctioneer's /v1/stats, the BBS's /metrics), and the connections the
  auctioneer opened to reps per auction (`handshakes_per_auction`, its /v1/stats `rep_connections_opened`).

`--tls on` (the default, as `vendue up`): HTTPS with a certificate per component, the harness acting as
the cluster's admin; `off`: the cluster runs `--insecure`; `both`: off then on, with both reports and the
ratio on/off of the seconds to all RUNNING and of the state fetch.

`--encryption on` (the default, as `vendue up`): the BBS seals each app's command and env (a few values, as
e2e.py's) at rest; `off`: in the clear; `both`: off then on, with the ratio on/off of the seconds to all
RUNNING (target <= 1.1) and the BBS's peak RSS of each (target: no larger). One comparison at a time.

Targets (reported, not asserted): all RUNNING within 60 s; state fetch under 1 s; a convergence pass
under 2 s; every app's zone split within 1; BBS and auctioneer peak RSS under 2 GiB each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e import (  # noqa: E402
    BENCH_ENV,
    TARGET_ENCRYPTION_RATIO,
    auctioneer_stats,
    by_route,
    delta,
    handshakes,
    light_session,
    metrics_of,
    parse_metrics,
    peak_rss_mb,
    ratio,
    summary_running,
)

from deploy.cluster import LocalCluster  # noqa: E402

TARGETS = {"seconds_to_all_running": 60.0, "state_fetch_seconds": 1.0, "convergence_pass_seconds": 2.0,
           "zone_skew": 1, "peak_rss_mb": 2048}
CELL_MEMORY_MB, CELL_DISK_MB, CELL_CONTAINERS = 32 * 1024, 64 * 1024, 250
POLL_S = 0.25
DESIRES_IN_FLIGHT = (
    64  # a deploy tool pushing 5,000 apps (--desires-in-flight); the BBS group-commits what waits
)
GiB = 1024


def app_sizes(apps: int, instances: int) -> list[int]:
    """`apps` sizes between 1 and 2*mean-1 that add up to `instances` (deterministic)."""
    mean = instances // apps
    sizes = [mean + ((i * 37) % mean) - mean // 2 for i in range(apps)]
    sizes = [max(1, s) for s in sizes]
    diff = instances - sum(sizes)
    i = 0
    while diff:
        step = 1 if diff > 0 else -1
        if sizes[i % apps] + step >= 1:
            sizes[i % apps] += step
            diff -= step
        i += 1
    return sizes


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (what it cost, whatever else ran)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)


def convergence(samples: dict[str, float]) -> tuple[float, float]:
    return samples.get("vendue_bbs_convergence_seconds_sum", 0.0), samples.get(
        "vendue_bbs_convergence_seconds_count", 0.0)


async def bbs_samples(client: httpx.AsyncClient, bbs: str) -> dict[str, float]:
    return parse_metrics((await client.get(f"{bbs}/metrics", timeout=60)).text)


async def measure(
    cluster: LocalCluster, apps: int, instances: int, timeout: float, in_flight: int = DESIRES_IN_FLIGHT
) -> dict[str, Any]:
    bbs, auctioneer = cluster.bbs_url, cluster.auctioneer_url
    sizes = app_sizes(apps, instances)
    rep_procs = {f"rep:{r.component or cid}": r.url for cid, r in cluster.reps.items()}
    component_urls = {"bbs": bbs, "auctioneer": auctioneer, **rep_procs}
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with cluster.async_http_client(limits=limits) as client:
        stats_before = await auctioneer_stats(client, auctioneer)
        metrics_before = await metrics_of(client, component_urls)
        light = light_session(cluster, in_flight + 8)  # room for the progress polls beside the desires
        t0 = time.perf_counter()
        sem = asyncio.Semaphore(in_flight)

        async def desire(i: int) -> None:
            body = {"process_guid": f"scale-{i}", "instances": sizes[i], "memory_mb": 64 + 32 * (i % 3),
                    "disk_mb": 128 + 64 * (i % 3), "command": ["sleep", "infinity"], "env": BENCH_ENV}
            async with sem, light.post(f"{bbs}/v1/desired_lrps", json=body,
                                       timeout=aiohttp.ClientTimeout(total=120)) as r:
                if r.status != 201:
                    raise RuntimeError(f"desiring scale-{i}: HTTP {r.status} {(await r.text())[:300]}")

        desires = asyncio.gather(*(desire(i) for i in range(apps)))
        desired_s = None
        done_s = None
        timeline: list[tuple[float, int]] = []
        running = 0
        while time.perf_counter() - t0 < timeout:
            await asyncio.sleep(POLL_S)
            if desired_s is None and desires.done():
                desires.result()
                desired_s = round(time.perf_counter() - t0, 3)
            try:
                running = await summary_running(light, bbs)
            except (aiohttp.ClientError, TimeoutError):
                continue
            print(f"{time.perf_counter() - t0:7.1f} s: {running:,} running, desires done: {desires.done()}",
                  file=sys.stderr, flush=True)
            now = round(time.perf_counter() - t0, 3)
            if not timeline or timeline[-1][1] != running:
                timeline.append((now, running))
            if running >= instances:
                done_s = now
                break
        if desired_s is None:
            desires.cancel()
            await asyncio.gather(desires, return_exceptions=True)
        await light.close()
        stats_placed = await auctioneer_stats(client, auctioneer)
        cpu_at_all_running = {name: cpu_seconds(pid) for name, pid in cluster.pids().items()}

        # Convergence at full size: the BBS's own pass durations, over passes made from now on.
        conv_before = convergence(await bbs_samples(client, bbs))
        deadline = time.perf_counter() + 60
        conv_after = conv_before
        while time.perf_counter() < deadline and conv_after[1] - conv_before[1] < 2:
            await asyncio.sleep(1.0)
            conv_after = convergence(await bbs_samples(client, bbs))
        passes = conv_after[1] - conv_before[1]
        pass_s = round((conv_after[0] - conv_before[0]) / passes, 3) if passes else None

        # State fetch of every (full) cell: one more app, which cannot fit anywhere.
        auctions_before = stats_placed.get("auctions", 0)
        r = await client.post(f"{bbs}/v1/desired_lrps", json={
            "process_guid": "scale-probe", "instances": 1, "memory_mb": 64, "disk_mb": 64,
            "command": ["sleep", "infinity"]}, timeout=60)
        r.raise_for_status()
        probe_stats: dict[str, Any] = {}
        deadline = time.perf_counter() + 60
        while time.perf_counter() < deadline:
            probe_stats = await auctioneer_stats(client, auctioneer)
            if probe_stats.get("auctions", 0) > auctions_before:
                break
            await asyncio.sleep(0.2)

        # Each app's split over zones, from the BBS's listing (once, untimed).
        listing = (await client.get(f"{bbs}/v1/actual_lrps", params={"state": "RUNNING"}, timeout=300)).json()
        per_app: dict[str, Counter[str]] = defaultdict(Counter)
        per_cell: Counter[str] = Counter()
        for actual in listing["items"]:
            per_app[actual["process_guid"]][actual["zone"]] += 1
            per_cell[actual["cell_id"]] += 1
        zones = sorted({z for c in per_app.values() for z in c})
        skews = {
            guid: max(c.get(z, 0) for z in zones) - min(c.get(z, 0) for z in zones)
            for guid, c in per_app.items()
        }
        worst = max(skews.items(), key=lambda kv: kv[1]) if skews else ("", 0)
        metrics_after = await metrics_of(client, component_urls)

    zone_containers: Counter[str] = Counter()
    for rep in cluster.reps.values():
        zone_containers[rep.zone] += CELL_CONTAINERS
    pids = cluster.pids()
    made_before = stats_before.get("requests_made", {}) or {}
    made = {k: v - made_before.get(k, 0) for k, v in (stats_placed.get("requests_made", {}) or {}).items()}
    auctions = stats_placed.get("auctions", 0) - stats_before.get("auctions", 0)
    bbs_counts = delta(metrics_after.get("bbs", {}), metrics_before.get("bbs", {}))
    rss = {name: peak_rss_mb(pid) for name, pid in pids.items()}
    return {
        "apps": apps,
        "instances": instances,
        "cells": len(cluster.reps),
        "zones": cluster.zones,
        "rep_processes": len(rep_procs),
        "all_running": done_s is not None,
        "seconds_to_all_running": done_s,
        "running_at_end": running,
        "seconds_to_desire_all": desired_s,
        "desires_in_flight": in_flight,
        "running_timeline": timeline[:: max(1, len(timeline) // 25)],
        "auctions": auctions,
        "lrps_placed": stats_placed.get("lrps_placed", 0) - stats_before.get("lrps_placed", 0),
        "lrps_failed": stats_placed.get("lrps_failed", 0) - stats_before.get("lrps_failed", 0),
        "auctioneer_requests": made,
        "auctioneer_requests_per_auction": {k: round(v / auctions, 1) for k, v in made.items()}
        if auctions
        else None,
        **handshakes(stats_before, stats_placed, auctions),
        "bbs_requests_served": by_route(bbs_counts, "vendue_http_request_duration_seconds_count"),
        "state_fetch_seconds_full_cells": probe_stats.get("last_state_fetch_seconds"),
        "probe_auction_seconds": probe_stats.get("last_auction_seconds"),
        "convergence_pass_seconds": pass_s,
        "convergence_passes_measured": passes,
        "zone_skew": {
            "worst": worst[1],
            "worst_app": worst[0],
            "apps_within_1": sum(1 for s in skews.values() if s <= 1),
            "apps": len(skews),
            # every app within 1 puts at least n // zones in each zone: a zone with fewer
            # containers than that sum makes the target unreachable, whatever the placement
            "containers_per_zone": dict(sorted(zone_containers.items())),
            "each_zone_must_hold": sum(n // max(1, len(zone_containers)) for n in sizes),
        },
        "instances_per_cell": {
            "min": min(per_cell.values(), default=0),
            "max": max(per_cell.values(), default=0),
        },
        "peak_rss_mb": rss,
        "cpu_seconds_to_all_running": cpu_at_all_running,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=250_000)
    parser.add_argument("--apps", type=int, default=5_000)
    parser.add_argument("--cells", type=int, default=1_000)
    parser.add_argument("--zones", type=int, default=3)
    parser.add_argument("--cells-per-rep", type=int, default=250, help="simulated cells per rep process")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--explanations", type=int, default=None,
                        help="the auctioneer's --explanations (instances explained per auction for "
                             "`vendue why`; default: the auctioneer's own)")
    parser.add_argument("--convergence-interval", type=float, default=5.0)
    parser.add_argument("--desires-in-flight", type=int, default=DESIRES_IN_FLIGHT,
                        help="desire requests the harness keeps open at once")
    parser.add_argument("--tls", choices=("on", "off", "both"), default="on",
                        help="HTTPS with certificates (default), plain HTTP (--insecure), or both compared")
    parser.add_argument("--encryption", choices=("on", "off", "both"), default="on",
                        help="command and env sealed at rest (default), in the clear, or both compared")
    args = parser.parse_args(argv)
    if args.apps < 1 or args.instances < args.apps:
        parser.error("--instances must be at least --apps, and --apps at least 1")
    if args.tls == "both" and args.encryption == "both":
        parser.error("one comparison at a time: --tls both or --encryption both, not both")
    insecure, encryption = args.tls == "off", args.encryption != "off"
    if args.tls == "both":
        by_tls = {"off": run(args, insecure=True, encryption=encryption),
                  "on": run(args, insecure=False, encryption=encryption)}
        print(
            json.dumps(
                {"benchmark": "scale", "tls": "both", "suites": by_tls, "tls_on_vs_off": compared(by_tls)}
            )
        )
    elif args.encryption == "both":
        by_encryption = {
            "off": run(args, insecure, encryption=False),
            "on": run(args, insecure, encryption=True),
        }
        on_vs_off = compared(by_encryption)
        rss = {name: by_encryption[name].get("peak_rss_mb", {}).get("bbs") for name in ("off", "on")}
        seconds_ratio = on_vs_off["seconds_to_all_running"]["ratio_on_over_off"]
        on_vs_off["bbs_peak_rss_mb"] = rss
        on_vs_off["met"] = {
            "ratio_at_most_1.1": seconds_ratio <= TARGET_ENCRYPTION_RATIO if seconds_ratio else None,
            "bbs_memory_no_larger": rss["on"] <= rss["off"] if rss["on"] and rss["off"] else None,
        }
        print(json.dumps({"benchmark": "scale", "encryption": "both", "suites": by_encryption,
                          "encryption_on_vs_off": on_vs_off}))
    else:
        print(json.dumps(run(args, insecure, encryption)))
    return 0


def compared(suites: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The off and on runs' seconds to all RUNNING and state fetch, and their ratio on/off."""
    return {key: {"off": suites["off"].get(key), "on": suites["on"].get(key),
                  "ratio_on_over_off": ratio(suites["on"].get(key), suites["off"].get(key))}
            for key in ("seconds_to_all_running", "state_fetch_seconds_full_cells")}


def run(args: argparse.Namespace, insecure: bool, encryption: bool = True) -> dict[str, Any]:
    """One cluster of the size `args` give, measured; the report (an "error" in it when it failed)."""
    timings = ["--presence-ttl", "30"]
    with tempfile.TemporaryDirectory(prefix="vendue-scale-", ignore_cleanup_errors=True) as tmp:
        cluster = LocalCluster(
            Path(tmp), cells=args.cells, zones=args.zones, executor="sim",
            sim_cells_per_process=args.cells_per_rep,
            cell_memory_mb=CELL_MEMORY_MB, cell_disk_mb=CELL_DISK_MB, cell_containers=CELL_CONTAINERS,
            bbs_args=[*timings, "--convergence-interval", str(args.convergence_interval)], rep_args=timings,
            auctioneer_args=[] if args.explanations is None else ["--explanations", str(args.explanations)],
            insecure=insecure, encryption=encryption,
        )
        started = time.perf_counter()
        try:
            cluster.start(timeout=300.0)
            startup_s = round(time.perf_counter() - started, 3)
            report = asyncio.run(
                measure(cluster, args.apps, args.instances, args.timeout, args.desires_in_flight)
            )
        except Exception as exc:  # noqa: BLE001 - reported in the JSON
            report = {"error": f"{type(exc).__name__}: {exc}"}
            startup_s = None
        finally:
            cluster.stop()
    rss = report.get("peak_rss_mb", {})
    return {
        "benchmark": "scale",
        "transport": "http",
        "database": "sqlite",
        "tls": "off" if insecure else "on",
        "encryption": "on" if encryption else "off",
        "cluster_start_seconds": startup_s,
        **report,
        "targets": TARGETS,
        "met": {
            "all_running_within_60s": (report.get("seconds_to_all_running") or 1e9)
            <= TARGETS["seconds_to_all_running"],
            "state_fetch_under_1s": (report.get("state_fetch_seconds_full_cells") or 1e9)
            <= TARGETS["state_fetch_seconds"],
            "convergence_pass_under_2s": (report.get("convergence_pass_seconds") or 1e9)
            <= TARGETS["convergence_pass_seconds"],
            "zone_split_within_1": (report.get("zone_skew") or {}).get("worst", 1e9) <= TARGETS["zone_skew"],
            "bbs_and_auctioneer_rss_under_2GiB": all(
                (rss.get(name) or 1e9) <= TARGETS["peak_rss_mb"] for name in ("bbs", "auctioneer")
            ),
        },
    }


if __name__ == "__main__":
    sys.exit(main())
