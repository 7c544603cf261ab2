"""What an objective means: the scalar evaluation of its tree for one instance on one cell.

Values:
- numbers are floats; integers from the instance or cell are converted exactly (a guid's trailing
  number too large for a float becomes +inf);
- `x / 0` and `x mod 0` are 0: a cell with no disk, or an app with no instances, adds nothing rather
  than failing the auction;
- `count(x, xs)` is how many entries of `xs` equal `x` (`r.CachedBlobIDs` and `r.Stack` hold each
  entry once, so it is 0 or 1 there); an instance without a source blob counts 0;
- a result that is not a number (NaN, e.g. from inf - inf) ranks below every number.

The arithmetic helpers here are the only definition of each operator: the vectorised evaluator must
reproduce them bit for bit, and its tests compare the two.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from common.objective.nodes import INSTANCE, Attr, BinOp, Count, Neg, Node, Num, Objective, Zones


def as_number(n: int) -> float:
    try:
        return float(n)
    except OverflowError:
        return math.inf


def divide(a: float, b: float) -> float:
    return a / b if b != 0 else 0.0


def modulo(a: float, m: float) -> float:
    return a % m if m != 0 else 0.0  # Python's floor modulo: the result has the sign of m


def ranked(value: float) -> float:
    """The value a cell is ranked by: NaN sorts below everything."""
    return -math.inf if value != value else value


@dataclass(frozen=True, slots=True)
class InstanceFacts:
    """`ai`: the instance being placed."""

    instance_number: float
    app_id: float
    total_instances: float
    memory_mb: float
    disk_mb: float
    source_blob: str | None
    stack: str


class Bid(Protocol):
    """`r`: one cell's bid as the objective sees it (what is left after this auction's reservations)."""

    @property
    def available_memory_mb(self) -> float: ...
    @property
    def available_disk_mb(self) -> float: ...
    @property
    def total_memory_mb(self) -> float: ...
    @property
    def total_disk_mb(self) -> float: ...
    @property
    def zone_number(self) -> float: ...
    @property
    def running_app_ids(self) -> Sequence[float]: ...
    @property
    def cached_blobs(self) -> Collection[str]: ...
    @property
    def stacks(self) -> Collection[str]: ...


@dataclass(frozen=True, slots=True)
class BidFacts:
    """A plain `Bid`, for tests and callers that have the numbers at hand."""

    available_memory_mb: float
    available_disk_mb: float
    total_memory_mb: float
    total_disk_mb: float
    zone_number: float
    running_app_ids: Sequence[float] = ()
    cached_blobs: Collection[str] = frozenset()
    stacks: Collection[str] = ()


INSTANCE_FIELDS = {
    "InstanceNumber": "instance_number",
    "AppID": "app_id",
    "TotalInstances": "total_instances",
    "RequiredMemoryMB": "memory_mb",
    "RequiredDiskMB": "disk_mb",
    "AppSourceBlobID": "source_blob",
    "Stack": "stack",
}
BID_FIELDS = {
    "AvailableMemoryMB": "available_memory_mb",
    "AvailableDiskMB": "available_disk_mb",
    "TotalMemoryMB": "total_memory_mb",
    "TotalDiskMB": "total_disk_mb",
    "AvailZoneNumber": "zone_number",
    "RunningAppIDs": "running_app_ids",
    "CachedBlobIDs": "cached_blobs",
    "Stack": "stacks",
}


def evaluate(node: Node, ai: InstanceFacts, r: Bid, azs: float):
    """The value of `node` (a float, or for attributes a string or list) for `ai` on `r`."""
    match node:
        case Num(value=value):
            return value
        case Zones():
            return azs
        case Attr(owner=owner, name=name):
            if owner == INSTANCE:
                return getattr(ai, INSTANCE_FIELDS[name])
            return getattr(r, BID_FIELDS[name])
        case Neg(operand=operand):
            return -evaluate(operand, ai, r, azs)
        case BinOp(op=op, left=left, right=right):
            a = evaluate(left, ai, r, azs)
            b = evaluate(right, ai, r, azs)
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                return divide(a, b)
            return modulo(a, b)
        case Count(needle=needle, haystack=haystack):
            x = evaluate(needle, ai, r, azs)
            if x is None:
                return 0.0
            return float(sum(1 for entry in evaluate(haystack, ai, r, azs) if entry == x))
    raise TypeError(f"not an objective node: {node!r}")  # pragma: no cover - the parser builds only these


def score(objective: Objective, ai: InstanceFacts, r: Bid, azs: float) -> float:
    """The value `r` is ranked by for `ai`: higher wins."""
    return ranked(evaluate(objective.root, ai, r, azs))
