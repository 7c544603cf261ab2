"""End to end: `vendue why` on a real cluster (TLS on), over both transports — the auctioneer's explanation
of each placement reaches the BBS with its auction's report, and the CLI shows it: the candidates and the
winner for an app that fits, the per-filter breakdown for one that fits nowhere."""

from __future__ import annotations

import json

import pytest

from .conftest import E2ECluster, expect, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

CLUSTER = {"cells": 4, "zones": 2}  # LocalCluster's cells: 4096 MB each


def explained(c: E2ECluster, guid: str, instances: int, placed: bool) -> list[dict]:
    """`vendue why GUID --json` once it explains every index as (un)placed; raises Unmet until then."""
    result = c.cli("why", guid, "--json")
    expect(result.code == 0, f"exit {result.code}: {result.output}")
    rows = json.loads(result.stdout)
    expect(len(rows) == instances and all(r["placed"] is placed for r in rows), rows)
    return rows


def test_why_shows_the_candidates_scored_and_the_winner_of_an_app_that_fits(shared_cluster):
    c = shared_cluster
    events = c.follow_events()
    guid = c.guid("fits")
    c.bbs.desire(guid, 3, memory_mb=64)
    running = wait_all_running(c.bbs, guid, 3)

    rows = wait_for(
        lambda: explained(c, guid, 3, placed=True), 30.0, f"an explanation of each instance of {guid}"
    )
    cell_ids = set(c.reps)
    for row in rows:
        assert row["cell_id"] == running[row["index"]]["cell_id"], (row, running[row["index"]])
        chosen = [x["cell_id"] for x in row["candidates"] if x["chosen"]]
        assert chosen == [row["cell_id"]] and row["candidates"][0]["chosen"], row["candidates"]
        assert len(row["candidates"]) >= 2, f"expected the winner and others it beat, saw {row['candidates']}"
        assert {x["cell_id"] for x in row["candidates"]} <= cell_ids
        scores = [x["components"]["score"] for x in row["candidates"]]
        assert scores == sorted(scores), scores
        assert row["decided_by"] in ("score", "zone order", "cell index"), row
    # The second instance went to the zone the first did not: the zone order says why.
    second = next(r for r in rows if r["index"] == 1)
    assert "first: fewest instances of" in second["zone_order"], second

    table = c.cli("why", guid, "0")
    assert table.code == 0, table.output
    assert f"{guid}/0 placed on {rows[0]['cell_id']}: decided by" in table.stdout, table.stdout
    assert "score" in table.stdout and "same app" in table.stdout and "→" in table.stdout, table.stdout

    completed = wait_for(lambda: [e.data for e in events.snapshot() if e.type == "auction_completed"], 20.0,
                         "an auction_completed event")
    assert set(completed[0]) == {"duration_s", "fetch_states_s", "lrps_placed", "lrps_failed", "tasks_placed",
                                 "tasks_failed"}, completed[0]
    assert sum(e["lrps_placed"] for e in completed) >= 3, completed


def test_why_shows_the_per_filter_breakdown_of_an_app_too_big_for_any_cell(shared_cluster):
    c = shared_cluster
    guid = c.guid("huge")
    c.bbs.desire(guid, 2, memory_mb=100_000)

    rows = wait_for(
        lambda: explained(c, guid, 2, placed=False), 30.0, f"{guid}'s instances explained as unplaced"
    )
    for row in rows:
        assert row["error"] == "insufficient resources: memory", row
        assert row["detail"].startswith("0/4 cells fit: 4 insufficient memory (largest free"), row
        assert row["detail"].endswith("need 100000)"), row

    table = c.cli("why", guid)
    assert table.code == 0, table.output
    assert f"{guid}/0 not placed: insufficient resources: memory" in table.stdout, table.stdout
    rows_of_table = [
        line for line in table.stdout.splitlines() if "insufficient memory (largest free" in line
    ]
    assert len(rows_of_table) == 2 and all(line.split("│")[1].strip() == "4" for line in rows_of_table), (
        table.stdout
    )
