"""End to end: `vendue rebalance` on real clusters (process executor): a zone drained and
returned gets its share back make-before-break, a move whose new instance crashes on start is abandoned
and the old instance keeps serving, `--dry-run` changes nothing, an instance its strategy would now place
elsewhere moves (the margin rule), and a cell that joins takes load."""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from common.procutil import app_python
from tests.support.running_poller import RunningPoller

from .conftest import (
    APP_SOURCE,
    E2ECluster,
    ask_instance,
    brief,
    expect,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e]

FIRST_PLACEMENT_S = 60.0  # as test_cells.py: the first start may precede the auctioneer's lease


def zones_of(c: E2ECluster) -> dict[str, str]:
    return {cell["cell_id"]: cell["zone"] for cell in c.bbs.cells()}


def zone_counts(c: E2ECluster, guid: str) -> Counter[str]:
    zone = zones_of(c)
    return Counter(zone[a["cell_id"]] for a in c.bbs.actuals(guid) if a["state"] == "RUNNING")


def cli_ok(c: E2ECluster, *args: str, timeout: float = 60.0) -> str:
    result = c.cli(*args, timeout=timeout)
    assert result.code == 0, (
        f"expected `vendue {' '.join(args)}` to succeed, saw {result.code}: {result.output}"
    )
    return result.stdout


def running_poller(c: E2ECluster, guid: str, instances: int) -> RunningPoller:
    """The app's RUNNING indices counted every 100 ms (tests/support/running_poller.py)."""
    return RunningPoller(lambda: c.lc.http_client(base_url=c.lc.bbs_url, timeout=5.0), guid, instances)


@pytest.mark.timeout(300)
def test_a_zone_drained_and_returned_gets_its_share_back_never_below_the_desired_count(make_cluster) -> None:
    c = make_cluster(cells=4, zones=2)
    guid = c.guid("spread")
    c.bbs.desire(guid, 6)
    wait_all_running(c.bbs, guid, 6, timeout=FIRST_PLACEMENT_S)
    zone = zones_of(c)
    gone_zone = sorted(set(zone.values()))[0]
    gone = sorted(cell for cell, z in zone.items() if z == gone_zone)
    for cell in gone:
        cli_ok(c, "cells", "drain", cell, "--wait", "--timeout", "60", timeout=90.0)
    assert zone_counts(c, guid) == {next(z for z in zone.values() if z != gone_zone): 6}, brief(
        c.bbs.actuals(guid)
    )
    for cell in gone:
        cli_ok(c, "cells", "uncordon", cell)

    with running_poller(c, guid, 6) as poller:
        out = cli_ok(c, "rebalance", "--wait", "--timeout", "120", "--json", timeout=150.0)
    plan = json.loads(out)
    assert len(plan["moves"]) == 3 and {m["reason"] for m in plan["moves"]} == {"zone_spread"}, plan
    assert [m["outcome"] for m in plan["finished"]] == ["completed"] * 3, plan["finished"]
    assert sorted(zone_counts(c, guid).values()) == [3, 3], brief(c.bbs.actuals(guid))
    poller.never_below(6, min_polls=11)
    wait_all_running(c.bbs, guid, 6)
    assert "balanced: nothing to move" in cli_ok(c, "rebalance", "--dry-run")


@pytest.mark.timeout(240)
def test_dry_run_changes_nothing_and_a_move_whose_new_instance_crashes_is_abandoned(make_cluster) -> None:
    c = make_cluster(cells=2, zones=2, bbs_args=("--rebalance-move-timeout", "30"))
    # The app exits at once while MARK exists: instances started after it appears crash on start. In a
    # directory the apps' own users may look into.
    shared = Path(tempfile.mkdtemp(prefix="vendue-rebalance-"))
    try:
        shared.chmod(0o755)
        mark = shared / "crash"
        command = [
            app_python(),
            "-c",
            f"import os, sys\nif os.path.exists({str(mark)!r}): sys.exit(3)\n" + APP_SOURCE,
        ]
        cells = sorted(c.reps)
        cli_ok(c, "cells", "cordon", cells[1])
        guid = c.guid("sticky")
        c.bbs.desire(guid, 2, command=command)
        before = wait_all_running(c.bbs, guid, 2, timeout=FIRST_PLACEMENT_S)
        assert {a["cell_id"] for a in before.values()} == {cells[0]}, brief(c.bbs.actuals(guid))
        cli_ok(c, "cells", "uncordon", cells[1])

        dry = cli_ok(c, "rebalance", "--dry-run")
        assert "1 moves (dry run: nothing changed)" in dry and "zone_spread" in dry, dry
        state = sorted(
            (a["index"], a["presence"], a["instance_guid"], a["cell_id"]) for a in c.bbs.actuals(guid)
        )
        assert state == sorted((i, "ORDINARY", a["instance_guid"], cells[0]) for i, a in before.items()), (
            state
        )
        assert json.loads(cli_ok(c, "rebalance", "--dry-run", "--json"))["dry_run"] is True

        mark.write_text("")
        moved = c.cli("rebalance", "--wait", "--timeout", "90", "--json", timeout=120.0)
        assert moved.code == 1, f"expected exit 1 (the move abandoned), saw {moved.code}: {moved.output}"
        [finished] = json.loads(moved.stdout)["finished"]
        assert (finished["outcome"], finished["why"]) == ("abandoned", "the new instance crashed"), finished
        # The old instances keep serving, the same ones, and nothing is left of the replacement.
        wait_for(
            lambda: expect(
                sorted(
                    (a["index"], a["presence"], a["state"], a["instance_guid"]) for a in c.bbs.actuals(guid)
                )
                == sorted((i, "ORDINARY", "RUNNING", a["instance_guid"]) for i, a in before.items()),
                brief(c.bbs.actuals(guid)),
            ),
            20.0,
            "the original two instances, and only them",
        )
        for a in before.values():
            answer = ask_instance(a["address"])
            assert answer.instance_guid == a["instance_guid"], (answer, a)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.timeout(240)
def test_an_instance_its_strategy_would_place_elsewhere_moves_by_the_margin(make_cluster) -> None:
    # one zone: both instances started on one cell while the other was cordoned; Diego's score now puts
    # the second on the other cell (a cell holding none of the app beats one holding the other by 1000)
    c = make_cluster(cells=2, zones=1)
    cells = sorted(c.reps)
    cli_ok(c, "cells", "cordon", cells[1])
    guid = c.guid("margin")
    c.bbs.desire(guid, 2)
    before = wait_all_running(c.bbs, guid, 2, timeout=FIRST_PLACEMENT_S)
    assert {a["cell_id"] for a in before.values()} == {cells[0]}, brief(c.bbs.actuals(guid))
    cli_ok(c, "cells", "uncordon", cells[1])

    dry = json.loads(cli_ok(c, "rebalance", "--dry-run", "--json"))
    assert [(m["from_cell"], m["to_cell"], m["reason"]) for m in dry["moves"]] == [
        (cells[0], cells[1], "strategy_margin")
    ], dry
    assert dry["moves"][0]["gain"] > 1000 and dry["moves"][0]["detail"].startswith("diego score"), dry
    with running_poller(c, guid, 2) as poller:
        moved = json.loads(cli_ok(c, "rebalance", "--wait", "--timeout", "90", "--json", timeout=120.0))
    assert [m["outcome"] for m in moved["finished"]] == ["completed"], moved
    poller.never_below(2)
    after = wait_all_running(c.bbs, guid, 2)
    assert sorted(a["cell_id"] for a in after.values()) == cells, brief(c.bbs.actuals(guid))
    assert "balanced: nothing to move" in cli_ok(c, "rebalance", "--dry-run")


@pytest.mark.timeout(240)
def test_a_cell_that_joins_takes_load_until_within_the_tolerance(make_cluster) -> None:
    c = make_cluster(
        cells=3, zones=1, bbs_args=("--rebalance-interval", "1", "--rebalance-load-tolerance", "0.1")
    )
    joining = sorted(c.reps)[-1]
    c.lc.kill(joining, signal.SIGTERM)
    wait_for(
        lambda: expect(joining not in {x["cell_id"] for x in c.bbs.cells()}, c.bbs.cells()),
        20.0,
        f"{joining} gone from the BBS's present cells",
    )
    guid = c.guid("heavy")
    c.bbs.desire(guid, 6, memory_mb=512)
    wait_all_running(c.bbs, guid, 6, timeout=FIRST_PLACEMENT_S)
    c.lc.restart(joining)

    def even() -> dict[str, float]:
        used = Counter({cell: 0 for cell in c.reps})
        for a in c.bbs.actuals(guid):
            if a["state"] == "RUNNING" and a["presence"] == "ORDINARY":
                used[a["cell_id"]] += 512
        fractions = {cell: n / 4096 for cell, n in used.items()}
        mean = sum(fractions.values()) / len(fractions)
        expect(max(fractions.values()) <= mean + 0.1 and sum(used.values()) == 6 * 512, fractions)
        return fractions

    fractions = wait_for(even, 90.0, "every cell's memory fraction within 0.1 of the mean")
    assert fractions[joining] > 0, fractions
    wait_all_running(c.bbs, guid, 6)
