"""The parsed form of an objective: a small typed tree, built once and evaluated many times.

Values have one of four types. Only numbers take part in arithmetic; strings and lists exist only as
the arguments of `count(x, xs)`, and the parser refuses them anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ValueType(Enum):
    NUMBER = "number"
    STRING = "string"
    NUMBER_LIST = "list of numbers"
    STRING_LIST = "list of strings"


LIST_ELEMENT = {ValueType.NUMBER_LIST: ValueType.NUMBER, ValueType.STRING_LIST: ValueType.STRING}

INSTANCE = "ai"  # the instance being placed
BID = "r"  # the cell's bid

# Every attribute the language knows, with its type. Names follow the published Diego proposal.
ATTRIBUTES: dict[tuple[str, str], ValueType] = {
    (INSTANCE, "InstanceNumber"): ValueType.NUMBER,
    (INSTANCE, "AppID"): ValueType.NUMBER,
    (INSTANCE, "TotalInstances"): ValueType.NUMBER,
    (INSTANCE, "RequiredMemoryMB"): ValueType.NUMBER,
    (INSTANCE, "RequiredDiskMB"): ValueType.NUMBER,
    (INSTANCE, "AppSourceBlobID"): ValueType.STRING,
    (INSTANCE, "Stack"): ValueType.STRING,
    (BID, "AvailableMemoryMB"): ValueType.NUMBER,
    (BID, "AvailableDiskMB"): ValueType.NUMBER,
    (BID, "TotalMemoryMB"): ValueType.NUMBER,
    (BID, "TotalDiskMB"): ValueType.NUMBER,
    (BID, "RunningAppIDs"): ValueType.NUMBER_LIST,
    (BID, "AvailZoneNumber"): ValueType.NUMBER,
    (BID, "CachedBlobIDs"): ValueType.STRING_LIST,
    (BID, "Stack"): ValueType.STRING_LIST,  # a cell offers several stacks
}


@dataclass(frozen=True, slots=True)
class Num:
    value: float
    column: int
    type = ValueType.NUMBER
    height = 1


@dataclass(frozen=True, slots=True)
class Zones:
    """`azs`: how many zones the auction has. Constant for an auction, so it may be a modulus."""

    column: int
    type = ValueType.NUMBER
    height = 1


@dataclass(frozen=True, slots=True)
class Attr:
    owner: str  # INSTANCE or BID
    name: str
    type: ValueType
    column: int
    height = 1


@dataclass(frozen=True, slots=True)
class Neg:
    operand: Node
    column: int
    height: int
    type = ValueType.NUMBER


@dataclass(frozen=True, slots=True)
class BinOp:
    op: str  # "+", "-", "*", "/", "mod"
    left: Node
    right: Node
    column: int  # the operator's
    height: int
    type = ValueType.NUMBER


@dataclass(frozen=True, slots=True)
class Count:
    """`count(x, xs)`: how many entries of the list `xs` equal `x`."""

    needle: Node
    haystack: Node  # a list-typed attribute
    column: int
    height: int
    type = ValueType.NUMBER


Node = Num | Zones | Attr | Neg | BinOp | Count


@dataclass(frozen=True, slots=True)
class Objective:
    """A parsed objective: the text it came from and its tree (always of type NUMBER)."""

    text: str
    root: Node


def first_non_constant(node: Node) -> Node | None:
    """The leftmost part of `node` that varies with the instance or the cell, if any."""
    match node:
        case Num() | Zones():
            return None
        case Neg(operand=operand):
            return first_non_constant(operand)
        case BinOp(left=left, right=right):
            return first_non_constant(left) or first_non_constant(right)
        case _:
            return node

