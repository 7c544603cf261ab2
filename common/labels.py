"""Host label match expressions, the service strategy's selector language.

Grammar (Kubernetes' set-based label selectors, which operators already know):

    expression  := "" | requirement ("," requirement)*        -- "," means and
    requirement := key "=" value | key "==" value | key "!=" value
                 | key "in" "(" value ("," value)* ")"
                 | key "notin" "(" value ("," value)* ")"
                 | key                                         -- the label exists
                 | "!" key                                     -- the label does not exist

Keys are letters, digits and `._/-`, starting and ending with a letter or digit; values the same
without `/`, and may be empty (`key=` matches an empty value). As in Kubernetes, `key!=value` and
`key notin (...)` also match cells that lack the key. The empty expression matches every cell.
Parsing is cached: the same expression is compiled once however many cells it is matched against.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

KEY_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9])?")
VALUE_RE = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)?")
SET_RE = re.compile(r"(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One `,`-separated term of an expression."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == "exists":
            return self.key in labels
        if op == "!exists":
            return self.key not in labels
        value = labels.get(self.key)
        if op in ("=", "in"):
            return value is not None and value in self.values
        return value is None or value not in self.values  # "!=", "notin"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def _refuse(text: str, reason: str) -> ValueError:
    return ValueError(f"invalid label expression {text!r}: {reason}")


def _split_terms(text: str) -> list[str]:
    """Split on the commas that join requirements, not those inside an `in (...)` value list."""
    terms: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
            if depth > 1:
                raise _refuse(text, f"nested '(' at position {i}")
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise _refuse(text, f"unbalanced ')' at position {i}")
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    if depth:
        raise _refuse(text, "unbalanced '(': missing ')'")
    terms.append(text[start:])
    return terms


def _key(text: str, key: str) -> str:
    key = key.strip()
    if not key:
        raise _refuse(text, "missing label key")
    if not KEY_RE.fullmatch(key):
        raise _refuse(text, f"invalid label key {key!r} (letters, digits and ._/- expected)")
    return key


def _value(text: str, value: str) -> str:
    value = value.strip()
    if not VALUE_RE.fullmatch(value):
        raise _refuse(text, f"invalid label value {value!r} (letters, digits and ._- expected)")
    return value


def _requirement(text: str, term: str) -> Requirement:
    term = term.strip()
    if not term:
        raise _refuse(text, "empty requirement (a stray ',')")
    set_match = SET_RE.fullmatch(term)
    if set_match:
        raw = set_match["values"].split(",")
        values = [_value(text, v) for v in raw]
        if any(not v for v in values):
            raise _refuse(text, f"empty value in the list of {term!r}")
        return Requirement(_key(text, set_match["key"]), set_match["op"], frozenset(values))
    if "(" in term or ")" in term:
        raise _refuse(text, f"{term!r}: a value list must follow 'in' or 'notin'")
    for op, sep in (("!=", "!="), ("=", "=="), ("=", "=")):
        if sep in term:
            key, _, value = term.partition(sep)
            if "=" in value or "!" in value:
                raise _refuse(text, f"{term!r}: more than one operator")
            return Requirement(_key(text, key), op, frozenset({_value(text, value)}))
    if term.startswith("!"):
        return Requirement(_key(text, term[1:]), "!exists")
    if any(ch.isspace() for ch in term):
        raise _refuse(
            text, f"{term!r}: expected key=value, key!=value, key in (a,b), key notin (a,b), key or !key"
        )
    return Requirement(_key(text, term), "exists")


@lru_cache(maxsize=4096)
def parse_label_expression(text: str) -> LabelSelector:
    """Compile an expression; raises ValueError naming the expression and what is wrong with it."""
    if not isinstance(text, str):
        raise ValueError(f"invalid label expression {text!r}: a string is required")
    if not text.strip():
        return LabelSelector(text, ())
    return LabelSelector(text, tuple(_requirement(text, term) for term in _split_terms(text)))


def validate_label_expression(text: str) -> None:
    parse_label_expression(text)


def labels_match(text: str, labels: Mapping[str, str]) -> bool:
    return parse_label_expression(text).matches(labels)
