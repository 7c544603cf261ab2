"""The placement engine: pure code, no I/O. See scheduler.schedule."""

from .scheduler import schedule
from .types import (
    AuctionResult,
    Cell,
    Failure,
    LRPAssignment,
    LRPStart,
    Resources,
    SchedulerConfig,
    TaskAssignment,
    TaskStart,
)

__all__ = [
    "AuctionResult", "Cell", "Failure", "LRPAssignment", "LRPStart", "Resources", "SchedulerConfig",
    "TaskAssignment", "TaskStart", "schedule",
]
