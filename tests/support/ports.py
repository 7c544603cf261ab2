"""Each test worker's share of listening ports (VENDUE_PORT_RANGE, common/procutil.py)."""

from __future__ import annotations

from common.procutil import LISTEN_PORTS_FROM, ephemeral_ports_from


def worker_port_range(worker: int, workers: int) -> str:
    """Worker `worker`'s (0-based) of `workers` equal shares of the ports below the ephemeral range."""
    low, high = LISTEN_PORTS_FROM, ephemeral_ports_from() or 32_768
    share = (high - low) // workers
    return f"{low + worker * share}-{low + (worker + 1) * share - 1}"
