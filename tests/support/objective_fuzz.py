"""Test support (imports hypothesis): hostile and random input for the objective language's fuzz tests.

- `STREAMS`: texts made of the language's own tokens, hostile words (dunder names, builtins, other
  languages' syntax), numbers of every size, stray characters (lone surrogates too) and deep nestings, in
  any order: what a typo or an attacker sends.
- `TREES` (anything the nodes can express, well-typed or not) and `TYPED_TREES` (only what the grammar
  allows): random trees, printed by `render` as text the parser must read back to the same tree (`shape`).
- `sealed()`: a context in which `eval`, `exec` and `compile` fail, and `getattr` takes only the names
  given: what proves nothing outside the tree walker evaluates the input.
"""

from __future__ import annotations

import builtins
import contextlib
import sys
from collections.abc import Collection, Iterator
from typing import Any
from unittest import mock

import numpy as np
from hypothesis import strategies as st

from common.objective.nodes import (
    ATTRIBUTES,
    BID,
    INSTANCE,
    Attr,
    BinOp,
    Count,
    Neg,
    Node,
    Num,
    ValueType,
    Zones,
)

# --- random token streams ------------------------------------------------------------------------------

LANGUAGE = ["ai", "r", "azs", "mod", "count", ".", "+", "-", "*", "/", "(", ")", ",",
            *(name for _, name in ATTRIBUTES)]
HOSTILE = [
    "__import__",
    "__class__",
    "__globals__",
    "__builtins__",
    "__dict__",
    "__subclasses__",
    "__init__",
    "__",
    "_",
    "eval",
    "exec",
    "compile",
    "open",
    "getattr",
    "lambda",
    "import",
    "os",
    "system",
    "True",
    "None",
    "inf",
    "nan",
    "e",
    "1e10",
    "1e400",
    "0x10",
    "1_000",
    "'os'",
    '"x"',
    "[",
    "]",
    "{",
    "}",
    ";",
    "%",
    "**",
    "//",
    "==",
    "\\",
    "`",
    "$",
    "@",
    "#",
    "\x00",
    "\u00b2",
    "\uff11",
    "\u0661",
]
NUMBERS = st.one_of(
    st.integers(0, 10**12).map(str),
    st.sampled_from(
        ["0.25", "007", "1.", ".5", "0.0000001", "9" * 308, "9" * 309, "9" * 400, "1" + "0" * 400]
    ),
)
TOKENS = st.one_of(
    st.sampled_from(LANGUAGE), st.sampled_from(HOSTILE), NUMBERS,
    st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),  # lone surrogates
)
SEPARATORS = st.sampled_from(["", " ", "  ", "\t", "\n"])
TOKEN_STREAMS = st.lists(st.tuples(TOKENS, SEPARATORS), max_size=60).map(
    lambda parts: "".join(token + separator for token, separator in parts))
# Nesting far past the depth limit, each way the grammar nests (the byte cap stops the deepest first).
NESTINGS = st.tuples(
    st.sampled_from(
        [("(", ")"), ("-", ""), ("count(", ", r.RunningAppIDs)"), ("1 + ", ""), ("(1 mod ", ")")]
    ),
    st.integers(0, 600),
).map(lambda t: t[0][0] * t[1] + "1" + t[0][1] * t[1])
STREAMS = st.one_of(TOKEN_STREAMS, NESTINGS)

# --- random trees ------------------------------------------------------------------------------------------

NUMBER_VALUES = st.one_of(
    st.integers(0, 10**9).map(float),
    st.floats(min_value=0.0, max_value=sys.float_info.max, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.25, 1e308, sys.float_info.max]),
)


def _height(*children: Node) -> int:
    return 1 + max(child.height for child in children)


def _neg(operand: Node) -> Neg:
    return Neg(operand, 0, _height(operand))


def _binop(op: str, left: Node, right: Node) -> BinOp:
    return BinOp(op, left, right, 0, _height(left, right))


def _count(needle: Node, haystack: Node) -> Count:
    return Count(needle, haystack, 0, _height(needle, haystack))


NUMS = NUMBER_VALUES.map(lambda value: Num(value, 0))
ZONES = st.just(Zones(0))
KNOWN_ATTRIBUTES = st.sampled_from([Attr(owner, name, kind, 0) for (owner, name), kind in ATTRIBUTES.items()])
NUMERIC_ATTRIBUTES = st.sampled_from(
    [Attr(o, n, t, 0) for (o, n), t in ATTRIBUTES.items() if t is ValueType.NUMBER]
)
UNKNOWN_ATTRIBUTES = st.builds(
    lambda owner, name: Attr(owner, name, ValueType.NUMBER, 0),
    st.sampled_from([INSTANCE, BID]),
    st.sampled_from(["__class__", "__dict__", "__init__", "_source_blob", "app_id", "Memory", "appid"]),
)
OPERATORS = st.sampled_from(["+", "-", "*", "/", "mod"])


def _any_composite(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    return st.one_of(
        children.map(_neg),
        st.builds(_binop, OPERATORS, children, children),
        st.builds(_count, children, children),
    )


# Anything the nodes can express: ill-typed (a list in arithmetic), non-constant moduli, unknown attributes.
TREES = st.recursive(
    st.one_of(NUMS, ZONES, KNOWN_ATTRIBUTES, UNKNOWN_ATTRIBUTES), _any_composite, max_leaves=24
)

# Moduli: numbers and azs, combined any way.
CONSTANTS = st.recursive(
    st.one_of(NUMS, ZONES),
    lambda children: st.one_of(children.map(_neg), st.builds(_binop, OPERATORS, children, children)),
    max_leaves=4,
)
STRING_COUNTS = st.sampled_from([
    _count(Attr(INSTANCE, needle, ValueType.STRING, 0), Attr(BID, haystack, ValueType.STRING_LIST, 0))
    for needle in ("AppSourceBlobID", "Stack") for haystack in ("CachedBlobIDs", "Stack")
])
RUNNING_APP_IDS = Attr(BID, "RunningAppIDs", ValueType.NUMBER_LIST, 0)


def _typed_composite(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    return st.one_of(
        children.map(_neg),
        st.builds(_binop, st.sampled_from(["+", "-", "*", "/"]), children, children),
        st.builds(lambda left, modulus: _binop("mod", left, modulus), children, CONSTANTS),
        children.map(lambda needle: _count(needle, RUNNING_APP_IDS)),
    )


# Only what the grammar allows: every tree here is a valid objective, within the limits of size and depth.
TYPED_TREES = st.recursive(st.one_of(NUMS, ZONES, NUMERIC_ATTRIBUTES, STRING_COUNTS), _typed_composite,
                           max_leaves=24)


def render(node: Node) -> str:
    """The text of a tree, fully parenthesised: the parser reads a valid one back to the same shape."""
    match node:
        case Num(value=value):
            return np.format_float_positional(value, trim="-")  # the language has no exponents
        case Zones():
            return "azs"
        case Attr(owner=owner, name=name):
            return f"{owner}.{name}"
        case Neg(operand=operand):
            return f"-({render(operand)})"
        case BinOp(op=op, left=left, right=right):
            return f"({render(left)} {op} {render(right)})"
        case Count(needle=needle, haystack=haystack):
            return f"count({render(needle)}, {render(haystack)})"
    raise TypeError(f"not an objective node: {node!r}")


def shape(node: Node) -> Any:
    """A tree as nested tuples, without columns and heights: what two trees must share to be the same."""
    match node:
        case Num(value=value):
            return value
        case Zones():
            return "azs"
        case Attr(owner=owner, name=name):
            return f"{owner}.{name}"
        case Neg(operand=operand):
            return ("neg", shape(operand))
        case BinOp(op=op, left=left, right=right):
            return (op, shape(left), shape(right))
        case Count(needle=needle, haystack=haystack):
            return ("count", shape(needle), shape(haystack))
    raise TypeError(f"not an objective node: {node!r}")


# --- the seal ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def sealed(attributes: Collection[str] | None = None) -> Iterator[list[str]]:
    """Within: `eval`, `exec` and `compile` raise, and (unless `attributes` is None) so does `getattr` of
    any name not in `attributes`. Yields the list of such calls, for a caller that swallows exceptions."""
    calls: list[str] = []
    real_getattr = builtins.getattr

    def tripwire(name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} called while the objective language ran: {args[:1]!r}")
        return refuse

    def checked_getattr(obj: Any, name: str, *default: Any) -> Any:
        if attributes is not None and name not in attributes:
            calls.append(f"getattr {name!r}")
            raise AssertionError(f"getattr of {name!r} while the objective language ran")
        return real_getattr(obj, name, *default)

    patches = {"eval": tripwire("eval"), "exec": tripwire("exec"), "compile": tripwire("compile")}
    if attributes is not None:
        patches["getattr"] = checked_getattr
    with mock.patch.multiple(builtins, **patches):
        yield calls
