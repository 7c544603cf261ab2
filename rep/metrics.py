"""Prometheus metrics of one rep process: read from its cells at scrape time, so nothing to keep in step.

Beside Vendue's own series, Diego's rep metrics under the names of the README's table, one series per cell
(a Diego rep is one cell): RepCapacityRemainingMemory and RepCapacityRemainingDisk (MiB, Diego's
rep.CapacityRemainingMemory/Disk), RepCapacityRemainingContainers, and ContainerCount (containers the
cell holds: LRP instances, reserved to stopping, and tasks).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .artifact_cache import CacheCounters
from .health_monitor import HealthMonitor
from .host import RepHost


class CellCollector(Collector):
    def __init__(self, host: RepHost) -> None:
        self.host = host

    def collect(self) -> Iterator[Metric]:
        available = GaugeMetricFamily(
            "vendue_rep_available", "What a cell has left", labels=["cell", "resource"]
        )
        total = GaugeMetricFamily("vendue_rep_total", "What a cell offers", labels=["cell", "resource"])
        lrps = GaugeMetricFamily(
            "vendue_rep_lrps", "LRP instances a cell holds, by state", labels=["cell", "state"]
        )
        tasks = GaugeMetricFamily("vendue_rep_tasks", "Tasks a cell holds", labels=["cell"])
        evacuating = GaugeMetricFamily("vendue_rep_evacuating", "1 while a cell evacuates", labels=["cell"])
        diego = {
            "memory_mb": GaugeMetricFamily("RepCapacityRemainingMemory", "MiB of memory a cell has left",
                                           labels=["cell"]),
            "disk_mb": GaugeMetricFamily("RepCapacityRemainingDisk", "MiB of disk a cell has left",
                                         labels=["cell"]),
            "containers": GaugeMetricFamily("RepCapacityRemainingContainers",
                                            "Containers a cell has room for", labels=["cell"]),
        }
        containers = GaugeMetricFamily("ContainerCount", "Containers a cell holds (instances and tasks)",
                                       labels=["cell"])
        for cell in self.host.cells.values():
            # From the cell's own records, not cell.state(): that builds a model per instance held.
            left, offered = cell.available(), cell.total()
            for resource in ("memory_mb", "disk_mb", "containers"):
                available.add_metric([cell.cell_id, resource], getattr(left, resource))
                total.add_metric([cell.cell_id, resource], getattr(offered, resource))
                diego[resource].add_metric([cell.cell_id], getattr(left, resource))
            containers.add_metric([cell.cell_id], offered.containers - left.containers)
            by_state = cell.instance_states()
            for lrp_state in ("reserved", "starting", "running", "stopping"):
                lrps.add_metric([cell.cell_id, lrp_state], by_state.get(lrp_state, 0))
            tasks.add_metric([cell.cell_id], cell.task_count)
            evacuating.add_metric([cell.cell_id], 1 if cell.evacuating else 0)
        yield from (available, total, lrps, tasks, evacuating, *diego.values(), containers)
        yield from _cache_metrics(self.host)


def _cache_metrics(host: RepHost) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The host's artifact cache (rep/artifact_cache.py), one for all its cells: no cell label."""
    cache = next((c for e in host.executors if (c := getattr(e, "artifacts", None)) is not None), None)
    counted = cache.counters if cache is not None else CacheCounters()  # the simulator's: zeros
    for name, text, value in (
        ("hits", "Artifacts placed from what the host held", counted.hits),
        ("misses", "Artifacts the host had to fetch (or awaited a fetch of)", counted.misses),
        ("downloaded_bytes", "Bytes the host's cache downloaded", counted.downloaded_bytes),
        ("evictions", "Blobs evicted to make room", counted.evictions),
    ):
        yield CounterMetricFamily(f"vendue_artifact_cache_{name}", text, value=value)
    yield GaugeMetricFamily("vendue_artifact_cache_bytes", "Bytes the host's cache holds",
                            value=cache.used_bytes() if cache is not None else 0)
    yield GaugeMetricFamily("vendue_artifact_cache_blobs", "Blobs the host's cache holds",
                            value=len(cache.held()) if cache is not None else 0)


class HealthCollector(Collector):
    """The continuous health checks of the host's instances (rep/health_monitor.py), one monitor shared by
    its cells."""

    def __init__(self, host: RepHost) -> None:
        self.host = host

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        monitors = {id(m): m for e in self.host.executors if isinstance(m := getattr(e, "health", None),
                                                                         HealthMonitor)}.values()
        yield GaugeMetricFamily("vendue_rep_health_watched", "Instances whose health the rep checks",
                                value=sum(len(m) for m in monitors))
        yield CounterMetricFamily("vendue_rep_health_checks", "Continuous health checks run",
                                  value=sum(m.checks for m in monitors))
        yield CounterMetricFamily(
            "vendue_rep_health_checks_inconclusive",
            "Checks not counted: their timeout fired late, the event loop was blocked",
            value=sum(m.inconclusive for m in monitors))


def metrics_registry(host: RepHost) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(CellCollector(host))
    registry.register(HealthCollector(host))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
