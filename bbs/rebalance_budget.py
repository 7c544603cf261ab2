"""How fast rebalancing moves start: at most `rebalance_in_flight` moves at once (5), one per
app, and at most so many started a minute (`rebalance_moves_per_minute`).

The per-minute budget scales with the cluster unless the operator fixes it: by default (the setting's 0)
one move per present schedulable cell a minute, never fewer than 60. Why: what keeps a move safe is that
only as many run at once as the moves in flight allow, each until its replacement runs. Nomad migrates
an allocation group `max_parallel` (1) at a time and has no rate; the Kubernetes descheduler has none
either: it evicts in runs every few minutes, with optional caps per node, per namespace and per run
(Harvester's add-on, for one, sets 5 per node every 5 minutes: one per node a minute). A fixed 60 a
minute left the moves in flight idle on a large cluster (20,000 moves after a zone returned to 1,000
cells: 5.5 hours), where one per cell a minute does not bind before the moves in flight do and still
keeps a cell's churn near one start and one stop a minute. The floor keeps a small cluster as fast as it
was. A positive setting is a fixed cap, as before.
"""

from __future__ import annotations

MIN_MOVES_PER_MINUTE = 60


def moves_per_minute(setting: int, present_cells: int) -> int:
    """The moves that may start within a minute: `setting` when positive, else one per present cell (at
    least MIN_MOVES_PER_MINUTE)."""
    return setting if setting > 0 else max(MIN_MOVES_PER_MINUTE, present_cells)
