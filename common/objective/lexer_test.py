import pytest

from .errors import MAX_BYTES, ObjectiveError
from .lexer import Kind, tokenize


def kinds(text):
    return [t.kind for t in tokenize(text)]


def test_tokens_and_their_columns():
    tokens = tokenize("(ai.AppID + 12.5) mod azs")
    assert [(t.kind, t.text, t.column) for t in tokens] == [
        (Kind.LPAREN, "(", 1), (Kind.NAME, "ai", 2), (Kind.DOT, ".", 4), (Kind.NAME, "AppID", 5),
        (Kind.PLUS, "+", 11), (Kind.NUMBER, "12.5", 13), (Kind.RPAREN, ")", 17), (Kind.NAME, "mod", 19),
        (Kind.NAME, "azs", 23), (Kind.END, "", 26),
    ]


def test_whitespace_of_every_kind_separates_tokens():
    assert kinds("1\t+\n2 ,\r3") == [Kind.NUMBER, Kind.PLUS, Kind.NUMBER, Kind.COMMA, Kind.NUMBER, Kind.END]


def test_a_number_keeps_its_fraction_but_not_a_dangling_dot():
    assert [t.text for t in tokenize("1.5 2. .5")] == ["1.5", "2", ".", ".", "5", ""]


@pytest.mark.parametrize("text, column, char", [
    ("1 + 'x'", 5, "'"),
    ("1 % 2", 3, "%"),
    ("r[0]", 2, "["),
    ("1 + ²", 5, "²"),
    ("a;b", 2, ";"),
    ("1 + \ud800", 5, "\ud800"),  # a lone surrogate (JSON can carry one): refused, not an encoding error
])
def test_characters_outside_the_language_are_refused_with_their_column(text, column, char):
    with pytest.raises(ObjectiveError) as err:
        tokenize(text)
    assert err.value.column == column
    assert err.value.reason == f"unexpected character {char!r}"


def test_length_is_capped_in_bytes_and_the_column_is_where_the_cap_is_crossed():
    tokenize("1" * MAX_BYTES)  # exactly at the cap: fine
    with pytest.raises(ObjectiveError) as err:
        tokenize("1" * (MAX_BYTES + 1))
    assert err.value.column == MAX_BYTES + 1
    assert (
        str(err.value)
        == f"objective: column {MAX_BYTES + 1}: expression is {MAX_BYTES + 1} bytes long, the limit is 1024"
    )
    # A two-byte character counts twice: 1023 ASCII bytes and then 'é' crosses at column 1024.
    with pytest.raises(ObjectiveError) as err:
        tokenize("1" * (MAX_BYTES - 1) + "é")
    assert err.value.column == MAX_BYTES
