"""The placement engine: pure code, no I/O. See scheduler.schedule."""

from .ask import Ask
from .cell_offer import CellOffer, Resources
from .scheduler import schedule
from .types import AuctionResult, Failure, LRPAssignment, SchedulerConfig, TaskAssignment
from .work import LRPStart, TaskStart

__all__ = [
    "Ask", "AuctionResult", "CellOffer", "Failure", "LRPAssignment", "LRPStart", "Resources",
    "SchedulerConfig", "TaskAssignment", "TaskStart", "schedule",
]
