"""The order in which the suite's modules reach xdist's workers: `--dist loadfile` hands out whole modules in
collection order, so a two-minute module collected last runs alone at the end while the other workers have
run out of work. The longest go first (longest-processing-time-first scheduling), then the other modules
that start processes, then the in-process ones, which fill the gaps at the end in small pieces.

LONGEST_MODULES: every variant's setup, call and teardown together, seconds on the 2-core machine with four
workers (2026-11-29); a module missing from it only loses its head start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

Item = TypeVar("Item")

LONGEST_MODULES = (
    "tests/e2e/test_rollout.py",  # 299 s
    "tests/e2e/test_lrps.py",  # 250 s
    "tests/bbs/key_rotation_test.py",  # 238 s
    "tests/e2e/test_cell_loss.py",  # 230 s
    "tests/e2e/test_cells.py",  # 218 s
    "tests/e2e/test_rebalance.py",  # 205 s
    "tests/e2e/test_health_checks.py",  # 196 s, one test of 130 s
    "tests/cluster/test_partial_partitions.py",  # 155 s
    "tests/bbs/bbs_replicas_test.py",  # 154 s
    "tests/security/test_hardened_input.py",  # 145 s
    "deploy/cluster_cmd_test.py",  # 141 s
    "tests/e2e/test_containers.py",  # 134 s
    "tests/e2e/test_faults.py",  # 133 s
    "tests/cluster/test_nats_partitions.py",  # 133 s
    "tests/chaos/test_campaign.py",  # 128 s, one test
    "tests/bbs/blob_replicas_test.py",  # 120 s
    "tests/e2e/test_isolation.py",  # 110 s
    "tests/e2e/test_events.py",  # 105 s
    "tests/e2e/test_artifacts.py",  # 98 s
    "tests/cluster/test_partitions.py",  # 95 s
    "deploy/cluster_test.py",  # 93 s
    "tests/cluster/multihost_test.py",  # 86 s
)


def longest_first(items: Sequence[Item], module_of: Callable[[Item], str],
                  starts_processes: Callable[[Item], bool]) -> list[Item]:
    """`items` reordered: the listed modules in their order, then those with a test that starts processes,
    then the rest; each module's items stay together (in the order the modules were collected) and in their
    order (a stable sort), as the module fixtures need."""
    listed = {module: i for i, module in enumerate(LONGEST_MODULES)}
    unlisted_e2e, in_process = len(listed), len(listed) + 1
    rank: dict[str, tuple[int, int]] = {}  # module -> (its group, where it was first collected)
    for seen, item in enumerate(items):
        module = module_of(item)
        group = listed.get(module, unlisted_e2e if starts_processes(item) else in_process)
        known_group, first_seen = rank.get(module, (group, seen))
        rank[module] = (min(known_group, group), first_seen)
    return sorted(items, key=lambda item: rank[module_of(item)])
