"""Parses objective text into a typed tree, or refuses it with the column and the reason.

    expression := term (("+" | "-") term)*
    term       := unary (("*" | "/" | "mod") unary)*
    unary      := "-" unary | primary
    primary    := NUMBER | "azs" | ("ai" | "r") "." ATTRIBUTE
                | "count" "(" expression "," expression ")" | "(" expression ")"

`mod` binds like `*` and `/` (Python's `%`), so `(a + b) mod azs + 1` is `((a + b) mod azs) + 1`; all
binary operators are left-associative. A recursive-descent parser over a whitelist of tokens: nothing
here reaches eval/exec, and every name is looked up in a fixed table.
"""

from __future__ import annotations

import math
import sys

from .errors import MAX_DEPTH, ObjectiveError
from .lexer import Kind, Token, iter_tokens
from .nodes import (
    ATTRIBUTES,
    BID,
    INSTANCE,
    LIST_ELEMENT,
    Attr,
    BinOp,
    Count,
    Neg,
    Node,
    Num,
    Objective,
    ValueType,
    Zones,
    first_non_constant,
)

MOD = "mod"
ZONES = "azs"
COUNT = "count"
TOO_DEEP = f"expression is nested too deeply (the limit is {MAX_DEPTH} levels)"


def parse_objective(text: str) -> Objective:
    """The tree for `text`, which must be an expression (presets are resolved by `presets.resolve`)."""
    return Objective(text, _Parser(text).parse())


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = iter_tokens(text)
        self.tok: Token = next(self.tokens)
        self.depth = 0

    # --- plumbing -----------------------------------------------------------------------------------

    def advance(self) -> Token:
        tok = self.tok
        if tok.kind is not Kind.END:
            self.tok = next(self.tokens)
        return tok

    def expect(self, kind: Kind, reason: str) -> Token:
        if self.tok.kind is not kind:
            raise ObjectiveError(self.tok.column, f"{reason}, found {self.tok.describe()}")
        return self.advance()

    def enter(self, column: int) -> None:
        # Bounds the parser's own recursion before any tree is built.
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ObjectiveError(column, TOO_DEEP)

    def leave(self) -> None:
        self.depth -= 1

    @staticmethod
    def height(column: int, *children: Node) -> int:
        height = 1 + max(child.height for child in children)
        if height > MAX_DEPTH:
            raise ObjectiveError(column, TOO_DEEP)
        return height

    # --- grammar ------------------------------------------------------------------------------------

    def parse(self) -> Node:
        if self.tok.kind is Kind.END:
            raise ObjectiveError(1, "expression is empty")
        root = self.expression()
        if self.tok.kind is not Kind.END:
            raise ObjectiveError(
                self.tok.column, f"unexpected {self.tok.describe()} after a complete expression"
            )
        require_number(root)
        return root

    def expression(self) -> Node:
        left = self.term()
        while self.tok.kind in (Kind.PLUS, Kind.MINUS):
            op = self.advance()
            right = self.term()
            left = self.binop(op, left, right)
        return left

    def term(self) -> Node:
        left = self.unary()
        while self.tok.kind in (Kind.STAR, Kind.SLASH) or (
            self.tok.kind is Kind.NAME and self.tok.text == MOD
        ):
            op = self.advance()
            right = self.unary()
            left = self.binop(op, left, right)
        return left

    def binop(self, op: Token, left: Node, right: Node) -> BinOp:
        require_number(left)
        require_number(right)
        if op.text == MOD:
            varying = first_non_constant(right)
            if varying is not None:
                raise ObjectiveError(varying.column, "mod needs a constant modulus (numbers and azs only)")
        if op.text in ("/", MOD) and folded(right) == 0.0:
            raise ObjectiveError(op.column, f"division by zero: the divisor of this {op.text!r} is always 0")
        return BinOp(op.text, left, right, op.column, self.height(op.column, left, right))

    def unary(self) -> Node:
        if self.tok.kind is not Kind.MINUS:
            return self.primary()
        sign = self.advance()
        self.enter(sign.column)
        operand = self.unary()
        self.leave()
        require_number(operand)
        return Neg(operand, sign.column, self.height(sign.column, operand))

    def primary(self) -> Node:
        tok = self.tok
        if tok.kind is Kind.NUMBER:
            self.advance()
            value = float(tok.text)
            if not math.isfinite(value):  # a literal is what it says, never silently infinity
                raise ObjectiveError(tok.column, f"number too large ({len(tok.text)} digits): the largest is "
                                                 f"about {sys.float_info.max:.1e}")
            return Num(value, tok.column)
        if tok.kind is Kind.LPAREN:
            self.advance()
            self.enter(tok.column)
            inner = self.expression()
            self.leave()
            self.expect(Kind.RPAREN, f"expected ')' to close the '(' at column {tok.column}")
            return inner
        if tok.kind is Kind.NAME:
            if tok.text in (INSTANCE, BID):
                return self.attribute()
            if tok.text == ZONES:
                self.advance()
                return Zones(tok.column)
            if tok.text == COUNT:
                return self.count()
            if tok.text == MOD:
                raise ObjectiveError(tok.column, "mod needs a number on its left")
            raise ObjectiveError(tok.column, f"unknown name {tok.text!r}")
        if tok.kind is Kind.END:
            raise ObjectiveError(tok.column, "expression ends too early")
        raise ObjectiveError(tok.column, f"unexpected {tok.describe()}")

    def attribute(self) -> Attr:
        owner = self.advance()
        self.expect(Kind.DOT, f"expected '.' and an attribute after {owner.text!r}")
        name = self.expect(Kind.NAME, f"expected an attribute name after '{owner.text}.'")
        kind = ATTRIBUTES.get((owner.text, name.text))
        if kind is None:
            known = ", ".join(n for (o, n) in ATTRIBUTES if o == owner.text)
            raise ObjectiveError(name.column, f"unknown attribute {owner.text}.{name.text} (known: {known})")
        return Attr(owner.text, name.text, kind, owner.column)

    def count(self) -> Count:
        call = self.advance()
        self.enter(call.column)
        usage = "count takes two arguments: count(x, xs)"
        self.expect(Kind.LPAREN, f"expected '(' after count ({usage})")
        needle = self.expression()
        self.expect(Kind.COMMA, f"expected ',' ({usage})")
        haystack = self.expression()
        self.expect(Kind.RPAREN, f"expected ')' ({usage})")
        self.leave()
        if haystack.type not in LIST_ELEMENT:
            raise ObjectiveError(
                haystack.column,
                "count's second argument must be a list: "
                + ", ".join(f"{o}.{n}" for (o, n), t in ATTRIBUTES.items() if t in LIST_ELEMENT),
            )
        wanted = LIST_ELEMENT[haystack.type]
        if needle.type is not wanted:
            raise ObjectiveError(needle.column, f"count cannot look for a {needle.type.value} in "
                                 f"{describe(haystack)}, a {haystack.type.value}")
        return Count(needle, haystack, call.column, self.height(call.column, needle, haystack))


def shape(node: Node) -> object:
    """`node` without its columns: two spellings of one expression have one shape."""
    match node:
        case Num(value=value):
            return ("num", value)
        case Zones():
            return ("azs",)
        case Attr(owner=owner, name=name):
            return ("attr", owner, name)
        case Neg(operand=operand):
            return ("neg", shape(operand))
        case BinOp(op=op, left=left, right=right):
            return ("op", op, shape(left), shape(right))
        case Count(needle=needle, haystack=haystack):
            return ("count", shape(needle), shape(haystack))
    raise AssertionError(node)


def folded(node: Node) -> float | None:
    """The value of `node` when the text alone decides it (its numbers, or `e - e`), else None. A zero
    divisor known at parse time is a mistake worth a refusal; one only known at run time gives 0
    (docs/placement.md)."""
    match node:
        case Num(value=value):
            return value
        case Neg(operand=operand):
            inner = folded(operand)
            return None if inner is None else -inner
        case BinOp(op="-", left=left, right=right) if shape(left) == shape(right):
            return 0.0
        case BinOp(op=op, left=left, right=right):
            a, b = folded(left), folded(right)
            if a is None or b is None:
                return None
            if op in ("/", MOD) and b == 0:
                return None  # refused where it was parsed
            if op == "+":
                value = a + b
            elif op == "-":
                value = a - b
            elif op == "*":
                value = a * b
            elif op == "/":
                value = a / b
            else:
                value = a % b  # Python's floor modulo, as the evaluators
            return value if math.isfinite(value) else None
    return None


def describe(node: Node) -> str:
    return f"{node.owner}.{node.name}" if isinstance(node, Attr) else "this value"


def require_number(node: Node) -> None:
    """Strings and lists are only valid as count's arguments; everywhere else a number is needed."""
    if node.type is ValueType.NUMBER:
        return
    role = "first" if node.type is ValueType.STRING else "second"
    raise ObjectiveError(
        node.column, f"{describe(node)} is a {node.type.value}: allowed only as count's {role} argument"
    )
