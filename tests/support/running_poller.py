"""A poller of an app's RUNNING instances in the BBS (every 100 ms, in a thread): the fewest it saw, for
tests that change an app make-before-break (rollouts, rebalancing) and must never see an outage."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx

POLL_S = 0.1  # the issues' 100 ms


class RunningPoller:
    """Counts the indices of `process_guid` below `instances` with a RUNNING instance (any presence: an
    EVACUATING old one serves until its replacement runs) every POLL_S; `fewest` is the lowest count seen
    and the rows seen then. A poll the BBS does not answer (down, restarting) is not counted."""

    def __init__(self, client: Callable[[], httpx.Client], process_guid: str, instances: int) -> None:
        self._client, self.process_guid, self.instances = client, process_guid, instances
        self.fewest: tuple[int, list[dict[str, Any]]] | None = None
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="running-poller")

    def __enter__(self) -> RunningPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10.0)

    def _run(self) -> None:
        with self._client() as http:
            while not self._stop.is_set():
                try:
                    response = http.get("/v1/actual_lrps", params={"process_guid": self.process_guid})
                    actuals = response.json()["items"]
                except (httpx.HTTPError, ValueError, KeyError):
                    self._stop.wait(POLL_S)
                    continue
                healthy = {
                    a["index"] for a in actuals if a["state"] == "RUNNING" and a["index"] < self.instances
                }
                self.polls += 1
                if self.fewest is None or len(healthy) < self.fewest[0]:
                    self.fewest = (len(healthy), actuals)
                self._stop.wait(POLL_S)

    def never_below(self, expected: int, min_polls: int = 3) -> None:
        """Assert every poll saw at least `expected` healthy indices (and that it polled at all)."""
        assert self.polls >= min_polls, f"expected at least {min_polls} polls, saw {self.polls}"
        assert self.fewest is not None and self.fewest[0] >= expected, (
            f"expected never fewer than {expected} RUNNING indices; the poller saw {self.fewest} "
            f"in {self.polls} polls"
        )
