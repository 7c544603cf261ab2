"""The one error the objective language raises, and the limits it enforces.

Every refusal names a 1-based column (a character offset into the text, newlines counted as characters)
and a reason, so a boundary (REST API, workload loader) can hand it straight back to whoever wrote the
expression: `objective: column 14: mod needs a constant modulus`.
"""

from __future__ import annotations

MAX_BYTES = 1024  # an objective is a short formula, not a program
MAX_DEPTH = 64  # nesting of parentheses, signs and calls, and the height of the parsed tree


class ObjectiveError(ValueError):
    def __init__(self, column: int, reason: str) -> None:
        super().__init__(f"objective: column {column}: {reason}")
        self.column = column
        self.reason = reason
