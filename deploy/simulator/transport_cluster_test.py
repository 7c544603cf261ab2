"""`--transport http|nats`: cell groups and prefill planning; then real clusters of `vendue rep --sim`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.polling import wait_for

from ..cluster import PROJECT_ROOT
from .scenarios import SCENARIOS
from .sim_input import SimInput, app, cell
from .transport_cluster import MAX_REP_PROCESSES, plan


def test_cells_alike_share_a_rep_process_and_prefilled_groups_are_pinned() -> None:
    the_plan = plan(SCENARIOS["imbalanced"].build(0))
    sizes = sorted((len(g.cells), g.pinned) for g in the_plan.groups)
    assert sizes == [(2, False), (3, False), (47, True), (48, True)]  # by zone, preloaded or empty
    assert len(the_plan.scenario_id) == 100 and set(the_plan.scenario_id.values()) == {
        f"cell-{i}" for i in range(100)
    }
    assert the_plan.prefill_instances == 95 * 50
    for body in the_plan.prefill:  # the anonymous prefill goes to its own group only, spread by diego
        group = next(g for g in the_plan.groups if g.pin_tag in body["placement_tags"])
        assert body["instances"] == 50 * len(group.cells) and body["strategy"] == "diego"
        assert group.pin_tag in group.rep_args()[group.rep_args().index("--optional-tag") + 1]
    assert len(the_plan.apps) == 500 and the_plan.notes == []


def test_rep_arguments_carry_the_cells_sizes_zone_and_tags() -> None:
    sim = SimInput("t", [cell("x", "z9", 2048, 4096, 7, stacks=["a", "b"], placement_tags=["iso"],
                              labels={"tier": "web"})], [app("web", 1, 64, 64, placement_tags=["iso"])])
    [group] = plan(sim).groups
    args = group.rep_args()
    assert args[:4] == ["--cell-id", "g0", "--zone", "z9"] and "--cells" not in args  # one cell: named g0
    pairs = list(zip(args[::2], args[1::2], strict=True))
    for pair in (("--memory-mb", "2048"), ("--disk-mb", "4096"), ("--containers", "7"), ("--stack", "a"),
                 ("--stack", "b"), ("--tag", "iso"), ("--label", "tier=web"), ("--sim-start-delay", "0")):
        assert pair in pairs


def test_cells_of_too_many_kinds_fall_back_to_coarse_groups_then_refuse() -> None:
    mixed = plan(SCENARIOS["mixed"].build(0))  # prefill differs cell by cell: grouped without it
    assert len(mixed.groups) <= MAX_REP_PROCESSES
    assert any("spread evenly" in note for note in mixed.notes)
    many = SimInput("many", [cell(f"c{i}", f"z{i}", 1000, 1000, 10) for i in range(MAX_REP_PROCESSES + 1)],
                    [app("web", 1, 1, 1)])
    with pytest.raises(ValueError, match="at most 12 rep processes"):
        plan(many)


def test_what_sim_reps_cannot_offer_is_noted() -> None:
    assert any("host metrics" in note for note in plan(SCENARIOS["loadmark-example"].build(0)).notes)


def test_one_desired_lrp_per_app_over_the_api() -> None:
    sim = SimInput("t", [cell("x", "z0", 1000, 1000, 10)],
                   [app("web", 1, 64, 64), app("web", 1, 128, 64)])
    with pytest.raises(ValueError, match="'web' has instances with different placement fields"):
        plan(sim)
    bad_guid = SimInput("t", [cell("x", "z0", 1000, 1000, 10)], [app("web/1", 1, 64, 64)])
    with pytest.raises(ValueError, match=r"^lrps\[web/1\]\.process_guid: "):
        plan(bad_guid)


# --- real clusters --------------------------------------------------------------------------------------


def _survivors(marker: str) -> list[str]:
    """Command lines of live processes mentioning `marker` (our cluster's temporary directory)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{pid}: {cmdline[:200]}")
    return found


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_cli_over_http_places_a_scenario_on_real_sim_reps(tmp_path: Path) -> None:
    """`vendue simulate --transport http` on low-memory: a BBS, an auctioneer, two `vendue rep --sim`."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(PROJECT_ROOT)}
    argv = [sys.executable, "-m", "deploy.cli", "simulate", "--scenario", "low-memory",
            "--strategy", "diego", "--transport", "http", "--timeout", "90", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=200)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"vendue simulate --transport http did not finish: {err.decode()[-2000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(AssertionError):  # stragglers are killed, then reported, below
            wait_for(lambda: not _survivors(str(tmp_path)), 15.0, "the cluster's processes gone",
                     interval=0.1)
        leftover = _survivors(str(tmp_path))
        for line in leftover:  # never leave a cluster behind, even when the test fails
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert leftover == [], leftover
    report = json.loads(out)
    assert (report["transport"], report["cells"], report["instances"]) == ("http", 20, 90)
    [diego] = report["strategies"]
    # Real counts from the auctioneer: every auction asks the BBS for its cell list and each of the two rep
    # processes for the states of the 10 cells it hosts (one request per process: the one rep API), and sends
    # each winning process its cells' work in one request.
    kinds = diego["communications_by_kind"]
    assert diego["rounds"] >= 1 and kinds["rep_state"] == 2 * diego["rounds"]
    assert kinds["bbs"] >= diego["rounds"] and 1 <= kinds["rep_work"] <= 2 * diego["rounds"]
    assert diego["communications"] == sum(kinds.values())
    # Placements from the BBS, on the scenario's cells: each cell's 14 running instances stayed on it
    # (pinned to its group, spread exactly), and what did not fit failed with Diego's error.
    cells = {c.id for c in SCENARIOS["low-memory"].build(0).cells}
    assert {c["cell_id"] for c in diego["per_cell"]} == cells
    assert {c["prefill_mb"] for c in diego["per_cell"]} == {14 * 256}
    assert all(c["allocated_mb"] <= c["memory_mb"] for c in diego["per_cell"])
    assert diego["placed"] + diego["failed"] == 90 and diego["placed"] > 0 and diego["failed"] > 0
    assert set(diego["failures_by_error"]) == {"insufficient resources: memory"}
    assert 0 < diego["wait_s"]["max"] <= diego["seconds"] + 0.5  # from the BBS's RUNNING timestamps


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_az_distribution_over_nats() -> None:
    """az-distribution over NATS: three rep processes, one per zone; diego keeps every app balanced."""
    from .compare import compare

    report = compare(SCENARIOS["az-distribution"].build(0), ["diego"], transport="nats", timeout=90)
    [diego] = report["strategies"]
    assert (diego["placed"], diego["failed"]) == (232, 0), diego["failures"][:3]
    assert sum(c["instances"] for c in diego["per_cell"]) == 232
    assert diego["worst_az_skew"] <= 1
    kinds = diego["communications_by_kind"]
    # One state request and reply per rep process per round (14 cells in 3 processes), one work request per
    # winning process.
    assert kinds["state_request"] == kinds["state_reply"] == 3 * diego["rounds"]
    assert kinds["work_request"] == kinds["work_reply"] >= 3
