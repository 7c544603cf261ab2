"""The `multihost` fixture: start a MultiHostCluster (real hosts in network namespaces, see multihost.py);
closed when the test ends, also when it fails: every process gone, the namespaces, veths, bridge and files
removed, nothing of a container rep's containers left (runc's state, mounts, namespaces), and no process
left to kill (a clean stop leaves none). Skipped, saying why, where network
namespaces cannot be made (not root, no `ip`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rep.isolation import isolation_leftovers
from tests.e2e.conftest import _print_log_tails
from tests.support.containers import container_leftovers

from .multihost import MultiHostCluster, unavailable_reason


@pytest.fixture
def multihost() -> Iterator[Callable[..., MultiHostCluster]]:
    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    started: list[MultiHostCluster] = []

    def make(**options: Any) -> MultiHostCluster:
        cluster = MultiHostCluster(**options)
        started.append(cluster)
        return cluster.start(timeout=60.0)

    yield make
    leftovers: dict[str, list[int]] = {}
    networks = [c.network for c in started if c.network is not None]  # as they were before closing
    for cluster in started:
        _print_log_tails(cluster)  # captured: pytest shows it only when the test failed
        if killed := cluster.close():
            leftovers[str(cluster.data_dir)] = killed
    assert not leftovers, f"expected no process left after the cluster stopped, killed {leftovers}"
    left = [path for c in started for data_dir in c.rep_data_dirs() for path in isolation_leftovers(data_dir)]
    assert not left, f"expected no cgroup or instance directory left after the cluster stopped, saw {left}"
    left = [path for c in started if c.executor == "container" for data_dir in c.rep_data_dirs()
            for path in container_leftovers(data_dir)]
    assert not left, f"expected nothing of the containers left after the cluster stopped, saw {left}"
    left = [name for network in networks for name in network.leftovers()]
    assert not left, f"expected no namespace or bridge left after the cluster closed, saw {left}"
