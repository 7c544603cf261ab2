"""The faults of the campaign: which one next (seeded), and doing it to the multi-host cluster, then healing.

    fault = plan(rng, targets(cluster))      # Fault("partition_cell", "cell-1", hold_s=4.2)
    inject(cluster, fault)                   # fault.started ... fault.healed: done and undone

Kinds:
- kill9_restart: SIGKILL to a component (each BBS, each auctioneer, a rep, NATS, PostgreSQL: its whole
  process group, postmaster and backends, as a crash of the database), down for `hold_s`, then started
  again with its data (retried until RESTART_DEADLINE_S);
- sigstop: SIGSTOP then, `hold_s` later, SIGCONT to a component (a stalled process: it holds its sockets
  and leases, answers nothing; PostgreSQL: every process of it);
- partition_cell, partition_control: a rep's host or the control host (both BBS, both auctioneers,
  PostgreSQL, NATS) cut off from everything, its link down for `hold_s`, then up;
- control_plane_restart: SIGKILL to every control-plane process at once, down for `hold_s`, then each
  started again: PostgreSQL, NATS, the BBS replicas, the auctioneers.
`healed` is when the fault is undone: the link up, SIGCONT sent, or the last restarted component serving.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from deploy.cluster import ClusterError
from tests.cluster.multihost import CONTROL, MultiHostCluster

# kind -> (weight, the range `hold_s` is drawn from)
KINDS: dict[str, tuple[int, tuple[float, float]]] = {
    "kill9_restart": (3, (0.0, 2.0)),
    "sigstop": (3, (1.0, 6.0)),
    "partition_cell": (2, (1.0, 8.0)),  # past the presence TTL (3 s) about two times in three
    "partition_control": (1, (1.0, 6.0)),
    "control_plane_restart": (1, (0.0, 2.0)),
}
RESTART_DEADLINE_S = 90.0


@dataclass
class Fault:
    kind: str
    target: str  # a component, a host, or "control-plane"
    hold_s: float
    started: float | None = None  # time.monotonic()
    healed: float | None = None
    repaired: float | None = None  # when the checker first saw the cluster repaired after the heal
    unrepaired: str = ""  # what the checker saw last, when not repaired in time
    diagnosis: dict[str, Any] = field(default_factory=dict)  # what the BBS and the reps said of it then
    started_unix: float | None = None  # time.time() at the start: to find it in the components' logs
    restart_errors: int = 0  # restarts that failed and were tried again


def targets(cluster: MultiHostCluster) -> dict[str, list[str]]:
    """What each kind may hit in this cluster."""
    components = [*cluster.control_plane(), *cluster.reps, "postgres", *nats_servers(cluster)]
    return {
        "kill9_restart": components,
        "sigstop": components,
        "partition_cell": sorted(cluster.reps),
        "partition_control": [CONTROL],
        "control_plane_restart": ["control-plane"],
    }


def plan(rng: random.Random, choices: dict[str, list[str]]) -> Fault:
    kinds = [kind for kind in KINDS if choices.get(kind)]
    kind = rng.choices(kinds, weights=[KINDS[k][0] for k in kinds])[0]
    low, high = KINDS[kind][1]
    return Fault(kind, rng.choice(choices[kind]), round(rng.uniform(low, high), 2))


def inject(cluster: MultiHostCluster, fault: Fault) -> None:
    """Do the fault, hold it for `hold_s` (its length: not a synchronisation), undo it."""
    fault.started, fault.started_unix = time.monotonic(), time.time()
    if fault.kind in ("partition_cell", "partition_control"):
        cluster.partition(fault.target)
        try:
            time.sleep(fault.hold_s)
        finally:
            cluster.heal(fault.target)
    elif fault.kind == "sigstop":
        send(cluster, fault.target, signal.SIGSTOP)
        try:
            time.sleep(fault.hold_s)
        finally:
            send(cluster, fault.target, signal.SIGCONT)
    elif fault.kind == "kill9_restart":
        send(cluster, fault.target, signal.SIGKILL)
        time.sleep(fault.hold_s)
        fault.restart_errors += restart(cluster, fault.target)
    elif fault.kind == "control_plane_restart":
        order = control_plane(cluster)
        for component in reversed(order):
            send(cluster, component, signal.SIGKILL)
        time.sleep(fault.hold_s)
        for component in order:
            fault.restart_errors += restart(cluster, component)
    else:
        raise ValueError(f"no fault kind {fault.kind!r}")
    fault.healed = time.monotonic()


def control_plane(cluster: MultiHostCluster) -> list[str]:
    """Every control-plane process, in the order they start: what each needs comes first."""
    return ["postgres", *nats_servers(cluster), *sorted(
        cluster.control_plane(), key=lambda name: (not name.startswith("bbs"), name))]


def nats_servers(cluster: MultiHostCluster) -> list[str]:
    """Every NATS server of the cluster (three on transport nats), none on http."""
    return sorted(cluster.nats_servers) if cluster.nats_servers else (["nats"] if cluster.nats_server else [])


def send(cluster: MultiHostCluster, component: str, sig: int) -> None:
    """`sig` to a component; PostgreSQL: to its whole process group (the postmaster started it in a session
    of its own, its backends with it). SIGKILL waits until it is gone."""
    if component != "postgres":
        cluster.kill(component, sig)
        return
    proc = _postgres_proc(cluster)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    if sig == signal.SIGKILL:
        proc.wait(timeout=30.0)


def _postgres_proc(cluster: MultiHostCluster) -> Any:
    if cluster.postgres is None or cluster.postgres.server.proc is None:
        raise ClusterError("no PostgreSQL server running in this cluster")
    return cluster.postgres.server.proc


def restart(cluster: MultiHostCluster, component: str) -> int:
    """Start the component again, trying again until RESTART_DEADLINE_S; the failed tries."""
    deadline = time.monotonic() + RESTART_DEADLINE_S
    failures = 0
    while True:
        try:
            cluster.restart(component)
            return failures
        except (ClusterError, RuntimeError, OSError) as exc:
            failures += 1
            if time.monotonic() > deadline:
                raise ClusterError(f"{component} did not start again within {RESTART_DEADLINE_S:g}s "
                                   f"({failures} tries): {exc}") from exc
