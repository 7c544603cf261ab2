"""Dashboard at scale: a local cluster (a BBS, an auctioneer, one rep process hosting --cells simulated
cells in 3 zones, TLS on), --apps apps of --instances instances in all plus --tasks tasks, then the
dashboard in headless Chromium (Debian's chromium), logged in as `vendue dashboard` does.

    python tests/bench/dashboard.py [--instances 10000] [--apps 10] [--cells 100] [--tasks 500]

Measures, in the page: the seconds from opening it to its first rendering of the listed state
(`seconds_to_listed`), how long one rendering of the overview, of the largest app's page and of a cell's
page takes (median of --renders, in ms: the page renders at most every 250 ms while events come), and how
many table rows each has in the DOM (paged: at most 100 whatever the instances). Prints ONE JSON object;
never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
from tests.e2e.chromium import DevTools, headless_chromium  # noqa: E402

ROWS = "document.querySelectorAll('{} tr[data-{}]').length"


def wait(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not within {timeout}s")


def render_ms(browser: DevTools, renders: int) -> float:
    """The median time of one render() (the page's own function: a global of its script)."""
    times = browser.evaluate(f"(() => {{ const t = []; for (let i = 0; i < {renders}; i++) {{ "
                             "const s = performance.now(); render(); t.push(performance.now() - s); } "
                             "return t; })()")
    return round(statistics.median(times), 1)


def measure(cluster: LocalCluster, args: argparse.Namespace, profile: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with cluster.http_client(base_url=cluster.bbs_url, timeout=60.0) as client:
        per_app = args.instances // args.apps
        started = time.monotonic()
        for a in range(args.apps):
            body = {"process_guid": f"bench-app-{a}", "instances": per_app, "memory_mb": 16, "disk_mb": 16,
                    "command": ["sleep", "infinity"]}
            client.post("/v1/desired_lrps", json=body).raise_for_status()
        for t in range(args.tasks):
            body = {"task_guid": f"bench-task-{t}", "command": ["true"], "memory_mb": 16, "disk_mb": 16}
            client.post("/v1/tasks", json=body).raise_for_status()

        def running() -> bool:
            summary = client.get("/v1/actual_lrps/summary").json()
            return bool(summary["by_state"].get("RUNNING", 0) >= per_app * args.apps)

        wait(running, 600.0, f"{per_app * args.apps} instances RUNNING")
        out["seconds_to_all_running_from_the_first_post"] = round(time.monotonic() - started, 2)
        token = {"role": "reader", "name": "bench dashboard", "purpose": "login", "expires_in_s": 600}
        login = client.post("/v1/tokens", json=token).json()["token"]
        cell = client.get("/v1/cells").json()["items"][0]["cell_id"]
    with headless_chromium(profile, "--ignore-certificate-errors") as browser:
        opened = time.monotonic()
        browser.open(f"{cluster.bbs_url}/ui/login?token={login}")
        wait(lambda: browser.evaluate("Number(document.body?.dataset.listed || 0) >= 1 && "
                                      "document.querySelectorAll('#apps tr[data-app]').length > 0"),
             120.0, "the page listing the cluster")
        out["seconds_to_listed"] = round(time.monotonic() - opened, 2)
        out["overview_render_ms"] = render_ms(browser, args.renders)
        out["overview_rows"] = {"apps": browser.evaluate(ROWS.format("#apps", "app")),
                                "tasks": browser.evaluate(ROWS.format("#tasks", "task")),
                                "cell_tiles": browser.evaluate("document.querySelectorAll('.cell').length")}
        browser.evaluate("location.hash = '#/apps/bench-app-0'")
        wait(lambda: browser.evaluate(ROWS.format("#app-instances", "index")), 60.0, "the app's page")
        out["app_page_render_ms"] = render_ms(browser, args.renders)
        out["app_page_rows"] = browser.evaluate(ROWS.format("#app-instances", "index"))
        out["app_instances"] = per_app
        browser.evaluate(f"location.hash = '#/cells/{cell}'")
        wait(lambda: browser.evaluate("document.getElementById('cell-view').dataset.cell") == cell, 60.0,
             "the cell's page")
        out["cell_page_render_ms"] = render_ms(browser, args.renders)
        out["cell_page_rows"] = browser.evaluate(ROWS.format("#cell-instances", "app"))
        out["page_dom_nodes"] = browser.evaluate("document.getElementsByTagName('*').length")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--apps", type=int, default=10)
    parser.add_argument("--cells", type=int, default=100, help="simulated cells (one rep process)")
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--renders", type=int, default=9)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"benchmark": "dashboard", "instances": args.instances, "apps": args.apps,
                           "cells": args.cells, "tasks": args.tasks, "cpus": os.cpu_count(),
                           "load_average_at_start": os.getloadavg()}
    tmp = Path(tempfile.mkdtemp(prefix="vendue-bench-dashboard-"))
    cluster = LocalCluster(tmp / "cluster", cells=args.cells, zones=3, executor="sim",
                           sim_cells_per_process=args.cells, cell_memory_mb=64 * 1024,
                           cell_disk_mb=256 * 1024, cell_containers=250)
    try:
        cluster.start(timeout=120.0)
        out.update(measure(cluster, args, tmp / "profile"))
    except Exception as exc:  # noqa: BLE001 - reported in the JSON, not raised
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_average_at_end"] = os.getloadavg()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
