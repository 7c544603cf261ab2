"""End to end, on a real cluster (BBS, auctioneer and reps as processes, TLS on) that NOBODY watched: no event
stream follower, no NATS publisher, so the BBS built no event at all. An app crashes, another cannot be
placed, a cell is cordoned; then GET /v1/events/recent, and the dashboard opened afterwards in headless
Chromium, still show those changes: from the apps' stories and the cluster's kept events (bbs/recent_past.py),
not from the stream's replay buffer, which is empty.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from .chromium import headless_chromium
from .conftest import E2ECluster, expect, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240),
              pytest.mark.parametrize("module_cluster", ["http"], indirect=True)]

CLUSTER = {"cells": 2, "zones": 1}


def test_the_recent_past_of_a_cluster_nobody_watched(module_cluster: E2ECluster,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    c = module_cluster
    huge, crashing = c.guid("huge"), c.guid("crashing")
    c.bbs.desire(huge, 1, memory_mb=100_000)  # more than any cell has (LocalCluster's: 4096 MB)
    c.bbs.desire(crashing, 1, command=["sh", "-c", "exit 1"])
    wait_for(lambda: expect(c.bbs.actuals(huge)[0]["placement_error"], c.bbs.actuals(huge)), 30.0,
             f"{huge} refused by the auction")
    wait_for(lambda: expect(c.bbs.actuals(crashing)[0]["crash_count"] >= 1, c.bbs.actuals(crashing)), 30.0,
             f"{crashing} crashed")
    cordoned = sorted(cell["cell_id"] for cell in c.bbs.cells())[0]
    result = c.cli("cells", "cordon", cordoned)
    assert result.code == 0, result.output

    def recent(**params: Any) -> list[dict[str, Any]]:
        answer = c.bbs.http.get("/v1/events/recent", params={"limit": 1000, **params})
        answer.raise_for_status()
        return list(answer.json()["items"])

    def kinds(items: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {(e["type"], e["data"].get("process_guid") or e["data"].get("cell_id", ""), e["data"]["kind"])
                for e in items}

    items = recent()
    streamed = [e for e in items if "id" in e]
    assert not streamed, f"expected no event built (nobody followed the stream), saw {streamed[:3]}"
    seen = kinds(items)
    expected = {("actual_lrp_changed", huge, "unplaceable"), ("actual_lrp_changed", crashing, "crashed"),
                ("cell_changed", cordoned, "cordoned"), ("cell_appeared", cordoned, "appeared")}
    assert expected <= seen, f"expected {sorted(expected - seen)} among {sorted(seen)}"
    crash = next(e for e in items
                 if e["data"].get("process_guid") == crashing and e["data"]["kind"] == "crashed")
    assert crash["source"] == "story" and crash["text"].endswith(": exited with status 1"), crash
    assert [e["at"] for e in items] == sorted(e["at"] for e in items), "oldest first"
    # The filters hold for the kept past as for the stream.
    assert {e["data"]["process_guid"] for e in recent(app=crashing)} == {crashing}
    only_cells = recent(type="cell_changed")
    assert only_cells and {e["type"] for e in only_cells} == {"cell_changed"}, only_cells
    assert {e["data"].get("cell_id") for e in recent(cell=cordoned)} == {cordoned}

    # The dashboard opened now (its first follower) lists that past on load.
    login = c.cli("dashboard", "--json")
    assert login.code == 0, login.output
    with headless_chromium(tmp_path_factory.mktemp("profile"), "--ignore-certificate-errors") as browser:
        browser.open(json.loads(login.stdout)["url"])

        def listed() -> set[tuple[str, str]]:
            rows = browser.evaluate("JSON.stringify([...document.querySelectorAll("
                                    "'#events li[data-from=\"recent\"]')].map((li) => "
                                    "[li.dataset.kind, li.dataset.app || li.dataset.cell || '', "
                                    "li.dataset.source, li.textContent]))")
            shown = json.loads(rows or "[]")
            found = {(kind, subject) for kind, subject, source, _ in shown if source in ("story", "cluster")}
            want = {("unplaceable", huge), ("crashed", crashing), ("cordoned", cordoned)}
            return expect(want <= found and found,
                          f"expected {sorted(want)} listed from before, page: {shown}")

        wait_for(listed, 30.0, "the dashboard listing the changes from before anyone watched")
        texts = browser.evaluate("[...document.querySelectorAll('#events li')].map((li) => li.textContent)")
        assert any(f"{crashing}/0 crashed" in t and "exited with status 1" in t for t in texts), texts
