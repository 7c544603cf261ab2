"""Episodes of a violation: from the first observation that shows it to the last, per key (an app's index).

    episodes = Episodes("real_duplicate")
    episodes.update(now, {("a", 0): "processes ..."}, due=lambda key: settled)   # every observation
    episodes.close_all(now)                                                       # at the end
    episodes.summary()   # {"count", "longest_s", "unhealed": {"count", "longest_s", "examples"}}

An episode is UNHEALED when an observation showed it at a moment it had to be over (`due(key)` true: past
the repair deadline of the last fault, and no recent write to that app): those are the findings; the rest
(while a fault lasts or is being repaired) are what the faults cost, reported beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

EXAMPLES = 5


@dataclass
class Episode:
    key: Hashable
    first_seen: float
    last_seen: float
    seen: str  # what the first observation showed
    unhealed_at: float | None = None  # the first observation at which it had to be over
    seen_unhealed: str = ""

    @property
    def duration_s(self) -> float:
        return self.last_seen - self.first_seen


class Episodes:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.open: dict[Hashable, Episode] = {}
        self.closed: list[Episode] = []

    def update(self, now: float, current: dict[Any, str], due: Callable[[Any], bool]) -> None:
        """One observation: `current` holds every key it shows in violation, with what was seen."""
        for key in [k for k in self.open if k not in current]:
            self.closed.append(self.open.pop(key))
        for key, seen in current.items():
            episode = self.open.get(key)
            if episode is None:
                episode = self.open[key] = Episode(key, now, now, seen)
            episode.last_seen = now
            if episode.unhealed_at is None and due(key):
                episode.unhealed_at, episode.seen_unhealed = now, seen

    def close_all(self) -> None:
        self.closed += self.open.values()
        self.open.clear()

    def all(self) -> list[Episode]:
        return [*self.closed, *self.open.values()]

    def unhealed(self) -> list[Episode]:
        return [e for e in self.all() if e.unhealed_at is not None]

    def summary(self, started: float) -> dict[str, Any]:
        """Times in seconds since `started` (the campaign's start)."""
        episodes, unhealed = self.all(), self.unhealed()
        return {
            "count": len(episodes),
            "longest_s": _longest(episodes),
            "unhealed": {
                "count": len(unhealed),
                "longest_s": _longest(unhealed),
                "examples": [{"key": list(e.key) if isinstance(e.key, tuple) else e.key,
                              "first_seen_s": round(e.first_seen - started, 2),
                              "unhealed_at_s": round((e.unhealed_at or 0.0) - started, 2),
                              "duration_s": round(e.duration_s, 2), "seen": e.seen_unhealed}
                             for e in sorted(unhealed, key=lambda e: -e.duration_s)[:EXAMPLES]],
            },
        }


def _longest(episodes: list[Episode]) -> float:
    return round(max((e.duration_s for e in episodes), default=0.0), 2)
