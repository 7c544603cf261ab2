"""What happens to an LRP's instances when their cell's presence expires: the LRP's `on_cell_loss`.

- `reschedule` (Diego, the default): every instance on the cell becomes SUSPECT and a replacement is
  auctioned at once; the suspect is dropped once the replacement runs, or promoted back if its cell
  returns first (bbs/convergence.py).
- `keep-replicas` (the service scheduler of the seeds): the instances become SUSPECT but nothing is
  auctioned while the cell may come back. After the grace (`--cell-loss-grace`, 30 s from the expiry) the
  cell is checked for up to `--cell-loss-check` (5 s): its rep is asked for the cell's state
  (bbs/cell_probes.py). If the rep has not answered by then, the cell is lost, and the instances of apps
  with a single instance are replaced (as Diego would have at once). Instances of apps with several stay
  SUSPECT, without a replacement — the app runs on its other instances — until the cell returns (they are
  ORDINARY again, as any suspect whose cell returns) or is removed (`vendue cells remove CELL`, which places
  everything it held again; the BBS also forgets a cell an hour after its expiry, `forget_cell_after`). A
  cell whose rep answers the check, though it does not heartbeat, is not lost:
  it is checked again after another grace. A cell that returns during the wait keeps its instances.

Suspect instances count as Diego counts them: as the app's instances, in their last state (RUNNING), with
presence SUSPECT.

Plain functions over plain data: convergence asks `keep_on_cell_loss` for each instance on a cell that is
not present, and does the probing and the waking up it asks for.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cell_probes import Probe
from .records import KEEP_REPLICAS, CellRecord


@dataclass(frozen=True, slots=True)
class CellLossConfig:
    grace: float = 30.0  # from the cell's presence expiry to its check
    check: float = 5.0  # how long the check waits for the cell's rep to answer


@dataclass(frozen=True, slots=True)
class Keep:
    """Keep the instance where it is (SUSPECT, no replacement) for now."""

    probe: bool = False  # the cell is due for its check: probe it
    due: float | None = None  # a pass is due then (the grace ends, or the next check)


def keep_on_cell_loss(
    on_cell_loss: str,
    instances: int,
    cell: CellRecord | None,
    probe: Probe | None,
    now: float,
    config: CellLossConfig,
) -> Keep | None:
    """For an instance of an LRP desiring `instances`, on `cell`, whose presence has expired (None: the
    cell is unknown, forgotten or removed): None to replace it now, or Keep."""
    if on_cell_loss != KEEP_REPLICAS or cell is None:
        return None
    if instances != 1:
        return Keep()  # several replicas: the others serve until this cell returns or is removed
    grace_ends = cell.expires_at + config.grace
    if now < grace_ends:
        return Keep(due=grace_ends)
    if probe is None or probe.started_at < grace_ends:
        return Keep(probe=True)  # the check of this outage has not finished yet
    if not probe.answered:
        return None  # still down after the grace and the check: its single instance moves
    # Its rep answers though its heartbeats do not arrive: the host is up. Look again after another grace.
    again = probe.started_at + config.grace
    return Keep(probe=now >= again, due=again if now < again else None)
