from __future__ import annotations

import random

from .faults import KINDS, plan

CHOICES = {
    "kill9_restart": ["bbs", "bbs-2", "auctioneer", "auctioneer-2", "cell-0", "postgres"],
    "sigstop": ["bbs", "cell-0"],
    "partition_cell": ["cell-0", "cell-1"],
    "partition_control": ["control"],
    "control_plane_restart": ["control-plane"],
}


def test_a_seed_fixes_the_faults() -> None:
    first = [plan(random.Random("faults-7"), CHOICES) for _ in range(20)]
    again = [plan(random.Random("faults-7"), CHOICES) for _ in range(20)]
    assert first == again


def test_every_kind_comes_with_a_target_of_its_own_and_a_hold_in_its_range() -> None:
    rng = random.Random(1)
    seen = set()
    for _ in range(300):
        fault = plan(rng, CHOICES)
        low, high = KINDS[fault.kind][1]
        assert fault.target in CHOICES[fault.kind] and low <= fault.hold_s <= high, fault
        seen.add(fault.kind)
    assert seen == set(KINDS)


def test_a_kind_with_nothing_to_hit_is_never_chosen() -> None:
    rng = random.Random(2)
    only = {"sigstop": ["bbs"], "partition_cell": []}
    assert {plan(rng, only).kind for _ in range(50)} == {"sigstop"}
