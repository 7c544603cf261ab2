"""What an executor reported, for the executor tests: the rep's Listener protocol, recorded."""

from __future__ import annotations

from collections.abc import Callable

from common.models import PortMapping, TaskCompletion


class Listener:
    """Records each running, crashed and finished report (`on_running` also sees each running one)."""

    def __init__(self, on_running: Callable[[str, list[PortMapping]], None] | None = None) -> None:
        self.running: list[tuple[str, list[PortMapping]]] = []
        self.crashed: list[tuple[str, str]] = []
        self.finished: list[TaskCompletion] = []
        self._on_running = on_running

    def lrp_running(self, instance_guid: str, ports: list[PortMapping]) -> None:
        if self._on_running is not None:
            self._on_running(instance_guid, ports)
        self.running.append((instance_guid, ports))

    def lrp_crashed(self, instance_guid: str, reason: str) -> None:
        self.crashed.append((instance_guid, reason))

    def task_finished(self, completion: TaskCompletion) -> None:
        self.finished.append(completion)
