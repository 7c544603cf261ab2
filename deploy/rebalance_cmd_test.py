"""`vendue rebalance`'s table of finished moves: why a move ended is shown unless it simply completed."""

from __future__ import annotations

import pytest

from common.models import RebalanceMove

from .rebalance_cmd import _print


def _move(**finished: str) -> RebalanceMove:
    return RebalanceMove(
        process_guid="web", index=1, from_cell="c1", to_cell="c3", from_zone="z1", to_zone="z1",
        reason="cell_load", detail="c1 memory 0.38 above the mean", gain=0.125, **finished,
    )


@pytest.mark.parametrize(
    ("finished", "shown"),
    [
        ({"outcome": "completed", "why": "the new instance runs; the old one is stopped", "landed_on": "c3"},
         "completed"),
        ({"outcome": "completed", "why": "the new instance runs on c2, not on c3", "landed_on": "c2"},
         "completed: the new instance runs on c2, not on c3"),
        ({"outcome": "abandoned", "why": "the new instance crashed"}, "abandoned: the new instance crashed"),
    ],
)
def test_a_finished_move_says_why_unless_it_completed_as_planned(
    finished: dict[str, str], shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _print([_move()], dry_run=False, finished=[_move(**finished)])
    row = next(line for line in capsys.readouterr().out.splitlines() if "web/1" in line)
    assert row.rstrip(" │|").endswith(shown), row
