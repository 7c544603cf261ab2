"""The objective language fuzzed: whatever text arrives, the lexer and the parser answer with a
tree
or with the language's own error (ObjectiveError, naming a column), never another exception, and nothing
evaluates the text on the way (`sealed`: eval, exec and compile fail, getattr is never called).

Random trees go the other way: printed, a valid one parses back to itself; an invalid one is refused with
the language's error. Bounded examples, so CI runs them every time."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings

from tests.support.objective_fuzz import STREAMS, TREES, TYPED_TREES, render, sealed, shape

from . import MAX_BYTES, MAX_DEPTH, ObjectiveError, compile_objective, parse_objective
from .nodes import BinOp, Count, Neg, Node
from .parser import TOO_DEEP, folded

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def compiled_or_refused(text: str) -> object:
    """The tree for `text`, or the ObjectiveError refusing it; any other exception fails the test, and so
    does any evaluation outside the tree walker (getattr: no name at all)."""
    with sealed(attributes=()) as escapes:
        try:
            result: object = compile_objective(text)
        except ObjectiveError as exc:
            assert 1 <= exc.column <= len(text) + 1, (text, exc)
            result = exc
    assert escapes == [], f"{text!r} reached {escapes}"
    return result


@FUZZ
@given(text=STREAMS)
def test_any_text_gives_a_tree_or_the_languages_error_and_nothing_else(text: str) -> None:
    event("refused" if isinstance(compiled_or_refused(text), ObjectiveError) else "parsed")


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "__import__",
        "ai.__class__",
        "ai.__class__.__mro__",
        "r.__dict__",
        "ai.InstanceNumber.__class__",
        "__builtins__",
        "eval('1')",
        "exec",
        "compile",
        "open('/etc/passwd')",
        "lambda: 1",
        "getattr(ai, 'AppID')",
        "ai._source_blob",
        "r.__init__",
        "count.__globals__",
        "azs.real",
        "1e400",
        "1e10",
        "0x10",
        "1_000",
        "9" * 309,
        "9" * 400,
        "1" + "0" * 400 + ".5",
        "9" * (MAX_BYTES + 1),
        "(" * 200 + "1" + ")" * 200,
        "-" * 200 + "1",
        "count(" * 100 + "1" + ", r.RunningAppIDs)" * 100,
        " + ".join(["1"] * 300),
        "1 mod " * 100 + "1",
        "((((((((((" * 10 + "1",
        "\x00",
        "1 + \x00",
        "\ud800",
        "1 + \udfff",
        "\uff11",
        "\u0661",
        "1 \u00b2",
        "'1'",
        '"1"',
        "[1]",
        "{}",
        "1;2",
        "ai . InstanceNumber . AppID",
        "mod mod mod",
        "count(,)",
        ",",
        ")",
        "(",
        ".",
        "r.",
        "ai..AppID",
    ],
)
def test_hostile_text_is_refused_with_the_languages_error(text: str) -> None:
    result = compiled_or_refused(text)
    assert isinstance(result, ObjectiveError), f"expected {text[:60]!r} refused, it parsed to {result!r}"


def test_nesting_and_size_limits_answer_before_python_recursion_or_overflow() -> None:
    for deep in ("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1), "-" * (MAX_DEPTH + 1) + "1",
                 " + ".join(["1"] * (MAX_DEPTH + 1))):
        result = compiled_or_refused(deep)
        assert isinstance(result, ObjectiveError) and result.reason == TOO_DEEP, result
    huge = compiled_or_refused("9" * 309)
    assert isinstance(huge, ObjectiveError) and huge.reason.startswith("number too large"), huge


@FUZZ
@given(tree=TREES)
def test_a_printed_tree_parses_back_to_itself_or_is_refused_with_the_languages_error(tree) -> None:
    text = render(tree)
    with sealed(attributes=()) as escapes:
        try:
            parsed = parse_objective(text)
        except ObjectiveError:
            parsed = None
    assert escapes == []
    event("refused" if parsed is None else "parsed")
    if parsed is not None:
        assert shape(parsed.root) == shape(tree), text


def has_zero_divisor(node: Node) -> bool:
    """Whether a `/` or a `mod` in `node` divides by what the text alone says is 0 (refused: parser.py)."""
    match node:
        case BinOp(op=op, left=left, right=right):
            zero = op in ("/", "mod") and folded(right) == 0.0
            return zero or has_zero_divisor(left) or has_zero_divisor(right)
        case Neg(operand=operand):
            return has_zero_divisor(operand)
        case Count(needle=needle, haystack=haystack):
            return has_zero_divisor(needle) or has_zero_divisor(haystack)
    return False


@FUZZ
@given(tree=TYPED_TREES)
def test_every_valid_tree_parses_back_to_itself_unless_it_is_too_big(tree) -> None:
    text = render(tree)
    try:
        parsed = parse_objective(text)
    except ObjectiveError as exc:
        too_long = len(text.encode()) > MAX_BYTES
        assert too_long or exc.reason == TOO_DEEP or has_zero_divisor(tree), (text, exc)
        return
    assert shape(parsed.root) == shape(tree), text


def test_the_seal_holds() -> None:
    with sealed(attributes=("AppID",)) as escapes:
        for forbidden in (lambda: eval("1"), lambda: exec("1"), lambda: compile("1", "x", "eval"),
                          lambda: getattr(1, "real")):  # noqa: B009 - the builtin is what is sealed
            with pytest.raises(AssertionError):
                forbidden()
        assert getattr(type("Facts", (), {"AppID": 3.0}), "AppID") == 3.0  # noqa: B009 - a name it allows
    assert escapes == ["eval", "exec", "compile", "getattr 'real'"]
    assert eval("1") == 1  # unsealed again
