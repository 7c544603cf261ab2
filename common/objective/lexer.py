"""Splits objective text into tokens, refusing any character the language has no use for.

Tokens: numbers (`12`, `0.25`), names (`ai`, `r`, `azs`, `mod`, `count`, attribute names), and
`. + - * / ( ) ,`. Whitespace separates tokens and is otherwise ignored. Quotes, brackets, `_`-led
dunder tricks and the like never reach the parser as anything but a refusal or an unknown name.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from .errors import MAX_BYTES, ObjectiveError


class Kind(Enum):
    NUMBER = "number"
    NAME = "name"
    DOT = "'.'"
    PLUS = "'+'"
    MINUS = "'-'"
    STAR = "'*'"
    SLASH = "'/'"
    LPAREN = "'('"
    RPAREN = "')'"
    COMMA = "','"
    END = "end of expression"


PUNCTUATION = {
    ".": Kind.DOT, "+": Kind.PLUS, "-": Kind.MINUS, "*": Kind.STAR, "/": Kind.SLASH,
    "(": Kind.LPAREN, ")": Kind.RPAREN, ",": Kind.COMMA,
}
WHITESPACE = " \t\r\n"


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str
    column: int  # 1-based

    def describe(self) -> str:
        return "end of expression" if self.kind is Kind.END else repr(self.text)


def _is_digit(ch: str) -> bool:
    return "0" <= ch <= "9"  # ASCII only: str.isdigit would take '²' and friends


def _is_name_start(ch: str) -> bool:
    return "a" <= ch <= "z" or "A" <= ch <= "Z" or ch == "_"


def check_length(text: str) -> None:
    # surrogatepass: a lone surrogate (JSON may carry "\ud800") is counted, then refused by the lexer as
    # the character it is, rather than failing the encoding with a UnicodeEncodeError.
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= MAX_BYTES:
        return
    used = 0
    for i, ch in enumerate(text):
        used += len(ch.encode("utf-8", "surrogatepass"))
        if used > MAX_BYTES:
            raise ObjectiveError(i + 1, f"expression is {size} bytes long, the limit is {MAX_BYTES}")
    raise AssertionError("unreachable")  # pragma: no cover


def tokenize(text: str) -> list[Token]:
    return list(iter_tokens(text))


def iter_tokens(text: str) -> Iterator[Token]:
    """Tokens one at a time, so the parser reports the first problem in reading order."""
    check_length(text)
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in WHITESPACE:
            i += 1
        elif ch in PUNCTUATION:
            yield Token(PUNCTUATION[ch], ch, i + 1)
            i += 1
        elif _is_digit(ch):
            start = i
            while i < n and _is_digit(text[i]):
                i += 1
            if i + 1 < n and text[i] == "." and _is_digit(text[i + 1]):
                i += 1
                while i < n and _is_digit(text[i]):
                    i += 1
            yield Token(Kind.NUMBER, text[start:i], start + 1)
        elif _is_name_start(ch):
            start = i
            while i < n and (_is_name_start(text[i]) or _is_digit(text[i])):
                i += 1
            yield Token(Kind.NAME, text[start:i], start + 1)
        else:
            raise ObjectiveError(i + 1, f"unexpected character {ch!r}")
    yield Token(Kind.END, "", n + 1)
