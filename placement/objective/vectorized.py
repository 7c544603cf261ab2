"""An objective compiled once into numpy operations that value every cell of an auction at once.

The tree becomes a tree of closures; each takes the instance's facts and the cells' columns and returns
either a Python float (a part that is the same for every cell, such as `ai.AppID + 1` or `azs`) or an
array with one float64 per cell. Every operator is applied elementwise in the same order as the scalar
evaluator (evaluate.py), and IEEE arithmetic on float64 is the same in numpy as in Python, so each cell's
value is bit-for-bit the scalar one; `x / 0`, `x mod 0` and NaN follow the same rules.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from common.objective.nodes import INSTANCE, Attr, BinOp, Count, Neg, Node, Num, Objective, Zones

from .evaluate import BID_FIELDS, INSTANCE_FIELDS, Bid, InstanceFacts, divide, modulo, ranked

Value = float | np.ndarray
Needle = float | str | None | np.ndarray
Compiled = Callable[[InstanceFacts, "BidColumns", float], Value]


class BidColumns(Protocol):
    """Every cell's bid as columns, in the cells' input order."""

    size: int

    def column(self, name: str) -> np.ndarray:
        """A numeric attribute of `r` (`AvailableMemoryMB`, ...) for every cell, as float64."""
        ...

    def count(self, name: str, needle: Needle) -> np.ndarray:
        """`count(needle, r.<name>)` for every cell (`needle` may differ per cell), as float64."""
        ...


_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def compile_columns(objective: Objective) -> Callable[[InstanceFacts, BidColumns, float], np.ndarray]:
    """A function giving every cell's ranking value (as `evaluate.score` would) for one instance."""
    root = _compile(objective.root)

    def values(ai: InstanceFacts, cells: BidColumns, azs: float) -> np.ndarray:
        with np.errstate(all="ignore"):  # inf and NaN are values here, as in Python
            result = root(ai, cells, azs)
        if not isinstance(result, np.ndarray):
            return np.full(cells.size, ranked(result), dtype=np.float64)
        return np.where(np.isnan(result), -np.inf, result)

    return values


def _compile(node: Node) -> Compiled:
    match node:
        case Num(value=value):
            return lambda ai, cells, azs: value
        case Zones():
            return lambda ai, cells, azs: azs
        case Attr(owner=owner, name=name):
            if owner == INSTANCE:
                get = operator.attrgetter(INSTANCE_FIELDS[name])
                return lambda ai, cells, azs: get(ai)
            return lambda ai, cells, azs: cells.column(name)
        case Neg(operand=operand):
            inner = _compile(operand)
            return lambda ai, cells, azs: -inner(ai, cells, azs)
        case BinOp(op=op, left=left, right=right):
            a, b = _compile(left), _compile(right)
            if op in _ARITHMETIC:
                apply = _ARITHMETIC[op]
                return lambda ai, cells, azs: apply(a(ai, cells, azs), b(ai, cells, azs))
            if op == "/":
                return lambda ai, cells, azs: divide_columns(a(ai, cells, azs), b(ai, cells, azs), cells.size)
            return lambda ai, cells, azs: modulo_columns(a(ai, cells, azs), b(ai, cells, azs))
        case Count(needle=needle, haystack=Attr(name=name)):
            find = _compile(needle)
            return lambda ai, cells, azs: cells.count(name, find(ai, cells, azs))
    raise TypeError(f"not an objective node: {node!r}")  # pragma: no cover - the parser builds only these


def divide_columns(a: Value, b: Value, size: int) -> Value:
    if isinstance(b, np.ndarray):
        out = np.zeros(size, dtype=np.float64)
        np.divide(a, b, out=out, where=b != 0)
        return out
    if isinstance(a, np.ndarray):
        return a / b if b != 0 else 0.0
    return divide(a, b)


def modulo_columns(a: Value, m: Value) -> Value:
    assert not isinstance(m, np.ndarray)  # the modulus is a constant (the parser insists): a float
    if isinstance(a, np.ndarray):
        return np.mod(a, m) if m != 0 else 0.0  # np.mod is Python's floor modulo, sign of m
    return modulo(a, m)


class BidTable:
    """`BidColumns` over a fixed list of bids: for tests, and callers valuing a snapshot."""

    def __init__(self, bids: Sequence[Bid]) -> None:
        self.bids = list(bids)
        self.size = len(self.bids)

    def column(self, name: str) -> np.ndarray:
        field = BID_FIELDS[name]
        return np.array([getattr(bid, field) for bid in self.bids], dtype=np.float64)

    def count(self, name: str, needle: Needle) -> np.ndarray:
        field = BID_FIELDS[name]
        needles = needle if isinstance(needle, np.ndarray) else [needle] * self.size
        return np.array(
            [0.0 if x is None else float(sum(1 for e in getattr(bid, field) if e == x))
             for bid, x in zip(self.bids, needles, strict=True)],
            dtype=np.float64,
        )
