"""The keep-replicas policy's decisions for an instance on a cell whose presence expired."""

from __future__ import annotations

import pytest

from bbs.cell_loss import CellLossConfig, Keep, keep_on_cell_loss
from bbs.cell_probes import Probe
from bbs.records import KEEP_REPLICAS, RESCHEDULE, CellRecord

CONFIG = CellLossConfig(grace=30.0, check=5.0)
CELL = CellRecord("c1", {"rep_url": "http://c1"}, expires_at=100.0)  # its presence expired at 100


def keep(instances: int = 1, now: float = 110.0, probe: Probe | None = None, policy: str = KEEP_REPLICAS,
         cell: CellRecord | None = CELL) -> Keep | None:
    return keep_on_cell_loss(policy, instances, cell, probe, now, CONFIG)


def test_reschedule_replaces_at_once_whatever_the_cell() -> None:
    assert keep(policy=RESCHEDULE) is None and keep(instances=3, policy=RESCHEDULE) is None


def test_an_unknown_cell_has_nothing_to_wait_for() -> None:  # removed, or forgotten long after its expiry
    assert keep(cell=None) is None and keep(instances=3, cell=None) is None


def test_a_single_instance_waits_out_the_grace_then_the_check() -> None:
    assert keep(now=110.0) == Keep(due=130.0)  # within the grace: a pass is due when it ends
    assert keep(now=130.0) == Keep(probe=True)  # the grace is over: check the cell
    early = Probe(started_at=120.0, lrps=None)  # a probe from before the grace ended does not count
    assert keep(now=131.0, probe=early) == Keep(probe=True)


def test_a_single_instance_moves_once_the_check_finds_the_cell_down() -> None:
    assert keep(now=136.0, probe=Probe(started_at=130.5, lrps=None)) is None


def test_a_cell_whose_rep_answers_is_not_lost_and_is_checked_again_after_another_grace() -> None:
    answered = Probe(started_at=131.0, lrps=frozenset({("web", 0)}))
    assert keep(now=132.0, probe=answered) == Keep(due=161.0)
    assert keep(now=161.0, probe=answered) == Keep(probe=True)


@pytest.mark.parametrize("now", [110.0, 135.0, 10_000.0])
def test_several_replicas_stay_until_the_cell_returns_or_is_removed(now: float) -> None:
    down = Probe(started_at=131.0, lrps=None)
    assert keep(instances=3, now=now, probe=down) == Keep()  # no check, no wake-up: nothing to decide
    assert keep(instances=0, now=now) == Keep()  # scaled to zero: the extra-instance rule removes it anyway
