"""Usage per instance, as an operator reads it: a real cluster (TLS on, the process executor isolating with
cgroups), an app that allocates and touches 200 MB and an idle one; `vendue instances --json`, the API
(GET /v1/usage) and `vendue cells` show what they use. Skipped, with the reason, where the rep cannot
isolate (no cgroup memory controller it may use, not root)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from common.procutil import app_python
from rep.isolation import isolation_problem
from rep.settings import RepSettings
from tests.support.polling import Unmet, expect

from .conftest import APP_COMMAND, E2ECluster, all_running, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PROBLEM = isolation_problem(RepSettings(executor="process", isolation="cgroups"))
MIB = 1024 * 1024
HOG_MB = 200
# Allocates HOG_MB and writes a byte in every page, so that each is really in memory; then waits.
HOG = f"""
import time
block = bytearray({HOG_MB} * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
print("touched", flush=True)
time.sleep(600)
"""


@pytest.fixture
def transport() -> str:
    """Usage is the rep's and the BBS's business: one transport is enough."""
    return "http"


def usage_of(c: E2ECluster, guid: str) -> dict:
    """The one instance's `usage` in `vendue instances GUID --json`, once it has a CPU figure (two
    samples)."""
    listed = c.cli("instances", guid, "--json")
    if listed.code != 0:
        raise Unmet(f"`vendue instances {guid} --json` exited {listed.code}: {listed.output}")
    [row] = json.loads(listed.stdout)
    usage = row.get("usage")
    return expect(usage is not None and usage["cpu"] is not None and usage, f"usage {usage}")


@pytest.mark.skipif(PROBLEM is not None, reason=f"this machine cannot isolate: {PROBLEM}")
def test_an_instance_that_touches_200_mb_shows_about_200_mb_and_an_idle_one_little(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    c = make_cluster(cells=1, zones=1)
    assert c.bbs is not None
    hog, idle = c.guid("hog"), c.guid("idle")
    c.bbs.desire(hog, 1, command=[app_python(), "-c", HOG], memory_mb=256, disk_mb=1024, ports=[],
                 health_check={"type": "process"})
    c.bbs.desire(idle, 1, command=APP_COMMAND, memory_mb=128)
    wait_for(lambda: all_running(c.bbs, hog, 1, answer=False) and all_running(c.bbs, idle, 1), 60,
             "both apps running")

    def hog_touched_all() -> dict:
        usage = usage_of(c, hog)
        return expect(usage["memory_bytes"] >= 0.85 * HOG_MB * MIB and usage,
                      f"{usage['memory_bytes'] / MIB:.0f} MiB")

    usage = wait_for(hog_touched_all, 60, f"the hog's memory at {HOG_MB} MB at least -15%")
    print("hog", usage)
    assert 0.85 * HOG_MB * MIB <= usage["memory_bytes"] <= 1.15 * HOG_MB * MIB, usage
    assert (usage["memory_limit_bytes"], usage["disk_limit_bytes"]) == (256 * MIB, 1024 * MIB), usage
    assert 0 <= usage["cpu"] < 2.0 and usage["disk_bytes"] >= 0, usage
    assert usage["sampled_at"].endswith("Z"), usage

    quiet = wait_for(lambda: usage_of(c, idle), 60, "the idle app's usage")
    print("idle", quiet)
    assert quiet["memory_bytes"] < 60 * MIB, f"an idle app uses little memory, saw {quiet}"
    assert quiet["cpu"] < 0.5, f"an idle app uses little CPU, saw {quiet}"

    # The API answers the same figures (admin's client, TLS), with the cell that holds the instance.
    answer = c.bbs.http.get("/v1/usage", params={"process_guid": hog})
    assert answer.status_code == 200, answer.text
    [item] = answer.json()["items"]
    assert 0.85 * HOG_MB * MIB <= item["memory_bytes"] <= 1.15 * HOG_MB * MIB, item
    assert item["cell_id"] == "cell-0" and answer.json()["unreachable"] == [], answer.json()

    table = c.cli("instances", hog)
    assert table.code == 0 and "/256M" in table.stdout and "/1G" in table.stdout, table.output
    [cell] = json.loads(c.cli("cells", "--json").stdout)
    assert cell["memory_used_bytes"] >= 0.85 * HOG_MB * MIB, cell
    cells = c.cli("cells")
    assert "alloc" in cells.stdout, cells.output
    print(table.stdout, cells.stdout, sep="\n")
