"""The convergence leader's in-flight mark (bbs/operations/convergence.py, "In flight"): it moves to now
when this BBS takes over, the auctioneer lease changes hands, start requests were not delivered or a cell
reboots; the cell-appeared mark when a cell appears."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bbs.convergence import ConvergenceConfig
from bbs.operations.convergence import Convergence
from bbs.records import CellRecord


def convergence() -> Convergence:
    uow: Any = SimpleNamespace(outbound=SimpleNamespace(cell_detail=None, auction_lost_at=0.0),
                               settings=SimpleNamespace(cell_loss_check=1.0, presence_ttl=10.0),
                               on_wake=lambda: None)
    return Convergence(uow, ConvergenceConfig())


def cells(*specs: tuple[str, str, float]) -> dict[str, CellRecord]:
    return {cell_id: CellRecord(cell_id, {"rep_url": "http://r", "zone": "z", "boot_id": boot}, expires)
            for cell_id, boot, expires in specs}


def test_a_fresh_leader_knows_of_nothing_in_flight() -> None:
    conv = convergence()
    assert conv.pass_config().in_flight_since == 0.0
    conv.took_over(10.0)
    assert conv.pass_config().in_flight_since == 10.0


def test_the_mark_moves_when_a_cell_reboots_the_auctioneer_changes_or_a_cell_appears() -> None:
    conv = convergence()
    conv.notice(cells(("c1", "b1", 100.0)), 3, 1.0)  # the first look: nothing to compare with
    conv.notice(cells(("c1", "b1", 100.0)), 3, 2.0)
    assert conv.in_flight_since == 0.0
    conv.notice(cells(("c1", "b2", 100.0)), 3, 3.0)  # the rep restarted
    assert conv.in_flight_since == 3.0
    conv.notice(cells(("c1", "b2", 100.0)), 4, 4.0)  # another auctioneer holds the lease
    assert conv.in_flight_since == 4.0
    conv.notice(cells(("c1", "b2", 100.0), ("c2", "x", 100.0)), 4, 5.0)  # a cell appeared: the other mark
    assert (conv.in_flight_since, conv.cell_appeared_at) == (4.0, 5.0)
    conv.notice(cells(("c1", "b2", 100.0), ("c2", "x", 100.0)), None, 6.0)  # nothing new; no lease read
    assert (conv.in_flight_since, conv.cell_appeared_at) == (4.0, 5.0)
    assert conv.pass_config().cell_appeared_at == 5.0


def test_the_mark_moves_when_start_requests_were_not_delivered() -> None:
    """No auctioneer answered (none held the lease yet, after a restart): what was sent is not on its way,
    and waiting for the staleness limit would leave it UNCLAIMED that long."""
    conv = convergence()
    conv.notice(cells(("c1", "b1", 100.0)), 3, 1.0)
    conv.uow.outbound.auction_lost_at = 1.5
    conv.notice(cells(("c1", "b1", 100.0)), 3, 2.0)
    assert conv.in_flight_since == 2.0
    conv.notice(cells(("c1", "b1", 100.0)), 3, 3.0)
    assert conv.in_flight_since == 2.0, "the same loss moves it once"


def test_a_new_leader_judges_no_cell_gone_until_it_could_have_heard_it() -> None:
    conv = convergence()
    conv.took_over(100.0)
    # c1's heartbeats failed while no BBS served; c2 is present; c3 was already announced gone.
    gone = CellRecord("c3", {}, 50.0, disappeared=True)
    seen = {**cells(("c1", "b", 95.0), ("c2", "b", 108.0)), "c3": gone}
    during = conv.heard(seen, 101.0)
    assert during["c1"].present(109.9) and during["c1"].expires_at == 110.0, "live until one TTL after"
    assert during["c2"].expires_at == 110.0 and during["c3"] is seen["c3"]
    after = conv.heard(seen, 110.0)
    assert after is seen and not after["c1"].present(110.0), "past the grace, the heartbeats decide"
