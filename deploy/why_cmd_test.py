"""`vendue why` against a real `vendue bbs` process (conftest.py's `bbs`, HTTPS): the auctioneer's report is
played by this test with an auctioneer certificate of the module's CA; the CLI reads it as the admin and as
a reader."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from rich.console import Console

from common.models import PlacementExplanation
from common.tls import TLSFiles, client_context, issue

from .why_cmd import breakdown, candidates

pytestmark = pytest.mark.timeout(120)

DETAIL = "0/3 cells fit: 1 stack mismatch, 2 insufficient memory (largest free 1024 MB, need 4096)"


def rendered(table) -> str:
    out = Console(width=200, record=True)
    out.print(table)
    return out.export_text()


def test_the_breakdown_is_a_table_of_cells_per_filter():
    text = rendered(breakdown(DETAIL + "; 1 cells left out: 1 evacuating"))
    assert "0/3 cells fit; 1 cells left out: 1 evacuating" in text
    rows = [line.split("│")[1:3] for line in text.splitlines() if line.count("│") == 3]
    assert [(cells.strip(), why.strip()) for cells, why in rows] == [
        ("1", "stack mismatch"), ("2", "insufficient memory (largest free 1024 MB, need 4096)")]
    assert breakdown("cell a: insufficient resources (after 3 attempts)") is None


def test_the_candidates_say_whether_each_cell_caches_the_apps_blob():
    parts = {"memory_used": 0.5, "disk_used": 0.1}
    why = PlacementExplanation.model_validate({
        "process_guid": "web", "index": 0, "placed": True, "cell_id": "warm", "decided_by": "score",
        "candidates": [
            {"cell_id": "warm", "zone": "z1", "zone_index": 1, "chosen": True,
             "components": {**parts, "cached": 1.0, "cache_locality": -0.5, "score": -0.2}},
            {"cell_id": "cold", "zone": "z1", "zone_index": 0,
             "components": {**parts, "cached": 0.0, "cache_locality": 0.0, "score": 0.3}}]})
    text = rendered(candidates(why))
    assert "cached" in text and "+ cache;" in text, text
    cells = {line.split("│")[2].strip(): line for line in text.splitlines() if line.count("│") > 3}
    assert "yes" in cells["warm"] and "-0.5" in cells["warm"], cells
    assert "no" in cells["cold"].split("│")[-2], cells


@pytest.fixture(scope="module")
def auctioneer(bbs) -> httpx.Client:
    issue(bbs.pki, role="auctioneer", name="auctioneer")
    with httpx.Client(base_url=bbs.url, timeout=10,
                      verify=client_context(TLSFiles.in_dir(bbs.pki, "auctioneer"))) as client:
        yield client


def test_why_shows_the_candidates_and_the_breakdown_and_json(bbs, auctioneer):
    name = f"web-{uuid.uuid4().hex[:6]}"
    assert bbs.vendue("push", name, "-i", "3", "-m", "64", "--", "true").exit_code == 0
    placed = {"process_guid": name, "index": 0, "placed": True, "cell_id": "cell-2", "decided_by": "score",
              "zone_order": f"z1 first: fewest instances of {name} (0; z2: 1)",
              "zones": [{"zone": "z1", "group": 0, "instances": 0, "room": 9}, {"zone": "z2", "group": 1,
                                                                                "instances": 1, "room": 9}],
              "candidates": [{"cell_id": "cell-2", "zone": "z1", "zone_index": 1, "chosen": True,
                              "components": {"memory_used": 0.25, "disk_used": 0.1, "score": 0.2}},
                             {"cell_id": "cell-1", "zone": "z1", "zone_index": 0,
                              "components": {"memory_used": 0.5, "disk_used": 0.1, "score": 0.3}}]}
    unplaced = {"process_guid": name, "index": 1, "placed": False, "error": "insufficient resources: memory",
                "detail": DETAIL}
    report = {"duration_s": 0.2, "fetch_states_s": 0.05, "lrps_placed": 1, "lrps_failed": 1,
              "explanations": [placed, unplaced]}
    assert auctioneer.post("/v1/auctions", json=report).status_code == 204

    shown = bbs.vendue("why", name)
    assert shown.exit_code == 0, shown.output
    assert f"{name}/0 placed on cell-2: decided by score; z1 first: fewest instances" in shown.stdout
    assert "→" in shown.stdout and "cell-1" in shown.stdout and "0.3000" in shown.stdout
    assert f"{name}/1 not placed: insufficient resources: memory" in shown.stdout
    assert "insufficient memory (largest free 1024 MB, need 4096)" in shown.stdout
    assert f"no explanation known for {name} index 2" in shown.stdout

    listed = bbs.vendue("why", name, "--json", env=bbs.tls_env("viewer"))  # a reader may ask
    assert listed.exit_code == 0, listed.output
    # auctioned_at is RFC 3339 in the CLI's JSON (one time format), epoch seconds on the wire.
    rows = [PlacementExplanation.model_validate({**row, "auctioned_at": 0})
            for row in json.loads(listed.stdout)]
    assert [(r.index, r.placed, r.cell_id) for r in rows] == [(0, True, "cell-2"), (1, False, None)]
    one = json.loads(bbs.vendue("why", name, "0", "--json").stdout)
    assert [c["cell_id"] for c in one["candidates"]] == ["cell-2", "cell-1"]
    assert one["auctioned_at"].endswith("Z")


@pytest.mark.parametrize(("args", "code", "says"), [
    (["why", "nosuch-app"], 1, "no app named 'nosuch-app'"),
    (["why", "nosuch-app", "0"], 1, "no app named 'nosuch-app'"),
    (["why", "bad app!"], 2, "process_guid"),
    (["why", "web", "x"], 2, "INDEX"),
])
def test_errors_are_one_line_with_the_exit_status(bbs, args, code, says):
    result = bbs.vendue(*args)
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines


def test_an_instance_never_auctioned_is_not_found(bbs):
    name = f"idle-{uuid.uuid4().hex[:6]}"
    assert bbs.vendue("push", name, "-i", "1", "--", "true").exit_code == 0
    result = bbs.vendue("why", name, "0")
    assert result.exit_code == 1
    assert "no placement explanation" in result.stderr and len(result.stderr.splitlines()) == 1
    every = bbs.vendue("why", name)
    assert every.exit_code == 1 and "for any instance" in every.stderr
