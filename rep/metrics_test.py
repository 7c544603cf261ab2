"""The rep's prometheus metrics, read from its cells at scrape time."""

from __future__ import annotations

from tests.support.rep_host import answer_outbox, desired, make_host

from .health_monitor import HealthMonitor
from .metrics import metrics_registry, render


def test_metrics_count_what_each_cell_holds_by_state() -> None:
    host, executor = make_host(["c0", "c1"], memory_mb=4096)
    c0 = host.cells["c0"]
    c0.awaiting_registration = False
    c0.take([(desired("web", memory_mb=256), 0), (desired("web", memory_mb=256), 1)], [], 1)
    answer_outbox(c0)
    c0.lrp_running(executor.started[0].instance_guid, [])
    c0.evacuating = True

    text = render(metrics_registry(host)).decode()

    for line in (
        'vendue_rep_lrps{cell="c0",state="starting"} 1.0',
        'vendue_rep_lrps{cell="c0",state="running"} 1.0',
        'vendue_rep_lrps{cell="c1",state="running"} 0.0',
        'vendue_rep_available{cell="c0",resource="memory_mb"} 3584.0',
        'vendue_rep_available{cell="c0",resource="containers"} 248.0',
        'vendue_rep_total{cell="c1",resource="memory_mb"} 4096.0',
        'vendue_rep_tasks{cell="c0"} 0.0',
        'vendue_rep_evacuating{cell="c0"} 1.0',
        'vendue_rep_evacuating{cell="c1"} 0.0',
        'RepCapacityRemainingMemory{cell="c0"} 3584.0',
        'RepCapacityRemainingContainers{cell="c0"} 248.0',
        'RepCapacityRemainingMemory{cell="c1"} 4096.0',
        'ContainerCount{cell="c0"} 2.0',
        'ContainerCount{cell="c1"} 0.0',
    ):
        assert line in text, line


def test_a_simulated_host_exports_the_cache_series_as_zeros() -> None:
    """A process executor's host reads them from its cache (tests/e2e/test_artifacts.py); every rep
    exports them, so a dashboard needs no case for the simulator."""
    host, _executor = make_host(["c0"], memory_mb=4096)
    text = render(metrics_registry(host)).decode()
    for line in ("vendue_artifact_cache_hits_total 0.0", "vendue_artifact_cache_misses_total 0.0",
                 "vendue_artifact_cache_downloaded_bytes_total 0.0",
                 "vendue_artifact_cache_evictions_total 0.0",
                 "vendue_artifact_cache_bytes 0.0", "vendue_artifact_cache_blobs 0.0"):
        assert line in text, line


def test_metrics_count_the_health_checks_of_the_hosts_one_monitor() -> None:
    host, executor = make_host(["c0", "c1"], memory_mb=4096)
    monitor = HealthMonitor()
    monitor.checks, monitor.inconclusive = 7, 2
    executor.health = monitor  # type: ignore[attr-defined]  # as every ProcessExecutor of a rep shares it

    text = render(metrics_registry(host)).decode()

    for line in ("vendue_rep_health_watched 0.0", "vendue_rep_health_checks_total 7.0",
                 "vendue_rep_health_checks_inconclusive_total 2.0"):
        assert line in text, line
