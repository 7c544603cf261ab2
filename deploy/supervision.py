"""`vendue up`'s supervision: a component that fails is started again, after a delay that grows while it
keeps failing; one that stops cleanly (exit status 0: a rep evacuated by SIGTERM or POST /evacuate, a
BBS or an auctioneer told to stop) stays down.

It is what a process supervisor does for the same processes elsewhere: systemd's Restart=on-failure with
RestartSec, Docker's `restart: on-failure` (docker-compose.yml here says `unless-stopped`, for
containers a person stops through Docker), BOSH's monit for Diego's jobs. The delays double from
FIRST_DELAY_S to MAX_DELAY_S, as Docker's do, with common/retry.py's jitter (each in the upper half of its
step, so components that failed together do not come back in step), and start again from the first once a
component has stayed up STABLE_AFTER_S: a BBS that dies at once on a bad database is not restarted in a
tight loop, and one that crashed once a day restarts in a second. Pure bookkeeping: the launcher
(cluster_cmd.py) asks it what to do and does it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from common.retry import RESTARTS, Delays

FIRST_DELAY_S = RESTARTS.first_s
MAX_DELAY_S = RESTARTS.max_s
STABLE_AFTER_S = 60.0


@dataclass(slots=True)
class _Supervised:
    started_at: float
    delays: Delays = field(default_factory=RESTARTS.delays)  # failures in a row, and the next wait
    due_at: float | None = None  # when to start it again; None: running, or left down


class RestartPolicy:
    def __init__(self, names: Iterable[str], now: float) -> None:
        self._components = {name: _Supervised(started_at=now) for name in names}

    def exited(self, name: str, status: int, now: float) -> float | None:
        """`name` exited with `status` (-N: killed by signal N): the seconds until it is started again,
        or None when it stays down (it stopped cleanly)."""
        if status == 0:
            return None
        component = self._components.setdefault(name, _Supervised(started_at=now))
        if now - component.started_at >= STABLE_AFTER_S:
            component.delays.reset()
        return self._schedule(component, now)

    def failed_to_start(self, name: str, now: float) -> float:
        """Starting `name` again failed: the seconds until the next try."""
        return self._schedule(self._components[name], now)

    def due(self, now: float) -> list[str]:
        """The components to start again now."""
        return sorted(n for n, c in self._components.items() if c.due_at is not None and c.due_at <= now)

    def started(self, name: str, now: float) -> None:
        component = self._components[name]
        component.started_at, component.due_at = now, None

    @staticmethod
    def _schedule(component: _Supervised, now: float) -> float:
        delay = round(next(component.delays), 1)  # tenths: said to a person ("starting it again in 1.7 s")
        component.due_at = now + delay
        return delay
