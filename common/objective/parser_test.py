import pytest

from tests.support.objective_fuzz import shape

from .errors import MAX_DEPTH, ObjectiveError
from .nodes import Num, ValueType
from .parser import parse_objective


def tree(text):
    return parse_objective(text).root


def refusal(text):
    with pytest.raises(ObjectiveError) as err:
        parse_objective(text)
    return err.value.column, err.value.reason


@pytest.mark.parametrize("text, expected", [
    ("1 + 2 * 3", ("+", 1.0, ("*", 2.0, 3.0))),
    ("(1 + 2) * 3", ("*", ("+", 1.0, 2.0), 3.0)),
    ("10 - 4 - 3", ("-", ("-", 10.0, 4.0), 3.0)),  # left-associative
    ("8 / 4 / 2", ("/", ("/", 8.0, 4.0), 2.0)),
    ("2 * 3 mod 4", ("mod", ("*", 2.0, 3.0), 4.0)),  # mod binds like * and /
    ("1 + 5 mod 3", ("+", 1.0, ("mod", 5.0, 3.0))),
    ("-2 * 3", ("*", ("neg", 2.0), 3.0)),
    ("--1", ("neg", ("neg", 1.0))),
    ("1 - -1", ("-", 1.0, ("neg", 1.0))),
    ("((((7))))", 7.0),
    ("0.25", 0.25),
])
def test_precedence_associativity_and_parentheses(text, expected):
    assert shape(tree(text)) == expected


def test_the_published_proposal_parses_with_the_zone_term_first():
    root = tree("(ai.InstanceNumber + ai.AppID + r.AvailZoneNumber) mod azs + 1")
    assert shape(root) == (
        "+", ("mod", ("+", ("+", "ai.InstanceNumber", "ai.AppID"), "r.AvailZoneNumber"), "azs"), 1.0)


def test_count_takes_a_number_or_a_string_of_the_list_element_type():
    assert shape(tree("count(ai.AppID + 1, r.RunningAppIDs)")) == (
        "count", ("+", "ai.AppID", 1.0), "r.RunningAppIDs")
    assert shape(tree("count(ai.AppSourceBlobID, (r.CachedBlobIDs))")) == (
        "count", "ai.AppSourceBlobID", "r.CachedBlobIDs")
    assert tree("count(ai.Stack, r.Stack)").type is ValueType.NUMBER


def test_columns_point_at_the_operator_and_the_attribute():
    root = tree("ai.AppID  *  r.AvailZoneNumber")
    assert root.column == 11
    assert (root.left.column, root.right.column) == (1, 14)


def test_a_constant_modulus_may_combine_numbers_and_azs():
    assert shape(tree("ai.AppID mod (azs * 2 - 1)")) == ("mod", "ai.AppID", ("-", ("*", "azs", 2.0), 1.0))


@pytest.mark.parametrize(
    "text, column, reason",
    [
        ("", 1, "expression is empty"),
        ("   ", 1, "expression is empty"),
        ("ai.AppID mod r.AvailZoneNumber", 14, "mod needs a constant modulus (numbers and azs only)"),
        ("1 mod (azs + ai.AppID)", 14, "mod needs a constant modulus (numbers and azs only)"),
        ("1 mod count(ai.AppID, r.RunningAppIDs)", 7, "mod needs a constant modulus (numbers and azs only)"),
        (
            "ai.Memory",
            4,
            "unknown attribute ai.Memory (known: InstanceNumber, AppID, TotalInstances, "
            "RequiredMemoryMB, RequiredDiskMB, AppSourceBlobID, Stack)",
        ),
        (
            "1 + r.availablememorymb",
            7,
            "unknown attribute r.availablememorymb (known: AvailableMemoryMB, "
            "AvailableDiskMB, TotalMemoryMB, TotalDiskMB, RunningAppIDs, AvailZoneNumber, "
            "CachedBlobIDs, Stack)",
        ),
        (
            "ai.__class__",
            4,
            "unknown attribute ai.__class__ (known: InstanceNumber, AppID, TotalInstances, "
            "RequiredMemoryMB, RequiredDiskMB, AppSourceBlobID, Stack)",
        ),
        ("__import__('os')", 1, "unknown name '__import__'"),
        ("eval(1)", 1, "unknown name 'eval'"),
        ("1 + os", 5, "unknown name 'os'"),
        ("ai", 3, "expected '.' and an attribute after 'ai', found end of expression"),
        ("r.", 3, "expected an attribute name after 'r.', found end of expression"),
        ("r.1", 3, "expected an attribute name after 'r.', found '1'"),
        ("1 2", 3, "unexpected '2' after a complete expression"),
        ("ai.AppID )", 10, "unexpected ')' after a complete expression"),
        ("1 + 2 ai.AppID", 7, "unexpected 'ai' after a complete expression"),
        ("(1 + 2", 7, "expected ')' to close the '(' at column 1, found end of expression"),
        ("1 +", 4, "expression ends too early"),
        ("* 2", 1, "unexpected '*'"),
        ("mod 2", 1, "mod needs a number on its left"),
        ("count(ai.AppID)", 15, "expected ',' (count takes two arguments: count(x, xs)), found ')'"),
        (
            "count ai.AppID",
            7,
            "expected '(' after count (count takes two arguments: count(x, xs)), found 'ai'",
        ),
        (
            "count(1, r.RunningAppIDs, 2)",
            25,
            "expected ')' (count takes two arguments: count(x, xs)), found ','",
        ),
        (
            "count(1, 2)",
            10,
            "count's second argument must be a list: r.RunningAppIDs, r.CachedBlobIDs, r.Stack",
        ),
        (
            "count(ai.Stack, r.RunningAppIDs)",
            7,
            "count cannot look for a string in r.RunningAppIDs, a list of numbers",
        ),
        (
            "count(ai.AppID, r.CachedBlobIDs)",
            7,
            "count cannot look for a number in r.CachedBlobIDs, a list of strings",
        ),
        (
            "count(r.Stack, r.Stack)",
            7,
            "count cannot look for a list of strings in r.Stack, a list of strings",
        ),
        (
            "r.RunningAppIDs",
            1,
            "r.RunningAppIDs is a list of numbers: allowed only as count's second argument",
        ),
        (
            "1 + r.CachedBlobIDs",
            5,
            "r.CachedBlobIDs is a list of strings: allowed only as count's second argument",
        ),
        ("ai.Stack * 2", 1, "ai.Stack is a string: allowed only as count's first argument"),
        ("-ai.AppSourceBlobID", 2, "ai.AppSourceBlobID is a string: allowed only as count's first argument"),
        ("(r.Stack)", 2, "r.Stack is a list of strings: allowed only as count's second argument"),
        ("1 + " + "9" * 309, 5, "number too large (309 digits): the largest is about 1.8e+308"),
    ],
)
def test_every_refusal_names_its_column_and_reason(text, column, reason):
    assert refusal(text) == (column, reason)


def test_the_message_carries_column_and_reason():
    with pytest.raises(ObjectiveError, match=r"^objective: column 14: mod needs a constant modulus"):
        parse_objective("ai.AppID mod r.AvailZoneNumber")
    assert issubclass(ObjectiveError, ValueError)


def test_nesting_is_capped_where_it_crosses_the_limit():
    fine = "(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH
    assert tree(fine) == Num(1.0, MAX_DEPTH + 1)
    assert refusal("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1)) == (
        MAX_DEPTH + 1, f"expression is nested too deeply (the limit is {MAX_DEPTH} levels)")
    assert refusal("-" * (MAX_DEPTH + 1) + "1")[0] == MAX_DEPTH + 1


def test_the_tree_height_is_capped_too():
    # A flat chain nests no parentheses but still builds a tree one level taller per operator.
    assert tree(" + ".join(["1"] * MAX_DEPTH)).height == MAX_DEPTH
    column, reason = refusal(" + ".join(["1"] * (MAX_DEPTH + 1)))
    assert reason.startswith("expression is nested too deeply")
    assert column == 4 * MAX_DEPTH - 1  # the operator that would make the tree too tall


def test_the_largest_literal_is_the_largest_float():
    assert tree("9" * 308) == Num(float("9" * 308), 1)


def test_refusals_report_the_first_problem_in_reading_order():
    # The unknown name comes before the stray quote, so that is what is reported.
    assert refusal("foo + 'bar'")[0] == 1
    assert refusal("1 + 'bar' + foo") == (5, "unexpected character \"'\"")


@pytest.mark.parametrize(("text", "column"), [
    ("1 / 0", 3),
    ("ai.AppID mod 0", 10),
    ("ai.AppID mod (azs - azs)", 10),
    ("r.AvailableMemoryMB / (2 - 2)", 21),
    ("r.AvailableMemoryMB / (r.TotalDiskMB - r.TotalDiskMB)", 21),
    ("1 / -(3 * 0)", 3),
    ("ai.AppID mod (1 - 1 + 0)", 10),
    ("1 / (0 / 5)", 3),
])
def test_a_constant_zero_divisor_is_refused_where_it_stands(text: str, column: int) -> None:
    with pytest.raises(ObjectiveError, match="division by zero") as refused:
        parse_objective(text)
    assert refused.value.column == column


@pytest.mark.parametrize("text", ["1 / r.TotalDiskMB", "ai.AppID mod azs", "1 / (azs - 1)",
                                  "1 / (r.TotalDiskMB - r.AvailableDiskMB)", "1 / 0.5"])
def test_a_divisor_not_known_to_be_zero_is_taken(text: str) -> None:
    parse_objective(text)
