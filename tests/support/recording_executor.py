"""An executor for the rep's tests that runs nothing and records every call (RecordingExecutor)."""

from __future__ import annotations

from rep.executor import Executor, ExecutorListener, LRPContainer, TaskContainer


class RecordingExecutor(Executor):
    def __init__(self) -> None:
        self.started: list[LRPContainer] = []
        self.stopped: list[str] = []
        self.tasks: list[TaskContainer] = []
        self.cancelled: list[str] = []

    def start_lrp(self, container: LRPContainer, listener: ExecutorListener) -> None:
        self.started.append(container)

    async def stop_lrp(self, instance_guid: str) -> None:
        self.stopped.append(instance_guid)

    def run_task(self, container: TaskContainer, listener: ExecutorListener) -> None:
        self.tasks.append(container)

    async def cancel_task(self, task_guid: str) -> None:
        self.cancelled.append(task_guid)
