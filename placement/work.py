"""What an auction places: LRP instances and tasks, each carrying its app's (or its own) `Ask`."""

from __future__ import annotations

from dataclasses import dataclass

from .ask import Ask


# Not frozen, though never changed once made: a frozen dataclass sets each field through
# object.__setattr__, several times a plain store, and an auction makes one of these per instance
# (250,000 at full scale). Without `frozen` they are not hashable either.
@dataclass(slots=True)
class LRPStart:
    """A request to start one instance (index) of a long-running process. Treat as immutable: every
    instance of an app shares its one `ask`."""

    process_guid: str
    index: int
    ask: Ask
    total_instances: int = 0  # the LRP's desired instance count (0: unknown, the engine counts the batch)
    previous_cell: str | None = None  # a restarting instance stays here while the cell still fits

    @property
    def key(self) -> tuple[str, int]:
        return (self.process_guid, self.index)


@dataclass(slots=True, frozen=True)
class TaskStart:
    task_guid: str
    ask: Ask  # resources and what the cell must be; a task asks nothing of the request filters


Work = LRPStart | TaskStart
