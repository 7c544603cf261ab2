"""Hand-written exponential backoff, found in the source with `ast` (nothing is imported or run).

The project's retries take their delays from one policy, common/retry.py (jittered, from tenacity). A
delay grown by hand is the shape this finds, whatever the variable is called:

- a constant raised to a variable power: `2 ** attempt`, `base * 4 ** n`, `1 << n`;
- a name multiplied by a constant into itself: `delay *= 2`, `delay = min(delay * 2, cap)`,
  `self._retry_s = min(2 * self._retry_s, limit)`;
- a product with a constant into a name that says it is a wait: `next_delay_s = min(2 * delay, cap)`.

A square (`x ** 2`), a constant limit (`2**31 - 1`) or a scale by a constant into another name
(`size = count * 2`) is not growth and is not reported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GROWTH_FACTOR_MIN = 1.5  # a constant at least this large, multiplied in again and again, is a backoff
WAIT_WORDS = ("delay", "backoff", "retry", "wait", "sleep")  # in a target's name: it holds a wait


@dataclass(frozen=True, slots=True)
class Growth:
    line: int
    source: str


def _is_growth_constant(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
        and node.value >= GROWTH_FACTOR_MIN
    )


def _target_key(node: ast.AST) -> str | None:
    """A comparable key of an assignment target that can grow (a name or an attribute), else None."""
    if isinstance(node, ast.Name | ast.Attribute):
        return ast.dump(node, annotate_fields=False).replace("Store()", "Load()")
    return None


def _says_wait(target: ast.AST) -> bool:
    name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
    return any(word in name.lower() for word in WAIT_WORDS)


def _grows(value: ast.AST, target: ast.AST) -> bool:
    """Whether `value` holds `<target> * <constant>` (either order) somewhere inside it, or any product with
    a constant when the target's name says it holds a wait."""
    key = _target_key(target)
    for node in ast.walk(value):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            sides = (node.left, node.right)
            if any(_is_growth_constant(s) for s in sides) and (
                _says_wait(target) or any(_target_key(s) == key for s in sides)
            ):
                return True
    return False


def growths(source: str, filename: str = "<source>") -> Iterator[Growth]:
    """Every hand-written geometric growth in `source`."""
    tree = ast.parse(source, filename)
    lines = source.splitlines()

    def found(node: ast.AST) -> Growth:
        line = getattr(node, "lineno", 0)
        return Growth(line, lines[line - 1].strip() if 0 < line <= len(lines) else "")

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            if (isinstance(node.op, ast.Pow) and _is_growth_constant(node.left)
                    and not isinstance(node.right, ast.Constant)):  # 2**31 - 1 is a limit, not a growth
                yield found(node)
            elif (isinstance(node.op, ast.LShift) and isinstance(node.left, ast.Constant)
                  and node.left.value == 1 and not isinstance(node.right, ast.Constant)):
                yield found(node)
        elif isinstance(node, ast.AugAssign):
            if isinstance(node.op, ast.Mult | ast.Pow) and _is_growth_constant(node.value):
                yield found(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if value is None:
                continue
            for target in targets:
                if _target_key(target) is not None and _grows(value, target):
                    yield found(node)


def growths_in(path: Path) -> list[Growth]:
    return list(growths(path.read_text(), str(path)))
