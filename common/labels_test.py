import pytest

from .labels import labels_match, parse_label_expression, validate_label_expression

CELL = {"gpu": "true", "tier": "web", "zone.name/x": "a-1", "empty": ""}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("", True),
        ("   ", True),
        ("gpu=true", True),
        ("gpu==true", True),
        ("gpu=false", False),
        ("gpu != false", True),
        ("gpu!=true", False),
        ("missing!=x", True),  # Kubernetes: != also matches a cell without the key
        ("tier in (web,db)", True),
        ("tier in (db, batch)", False),
        ("tier notin (db)", True),
        ("tier notin (web,db)", False),
        ("missing notin (a)", True),
        ("missing in (a)", False),
        ("gpu", True),
        ("missing", False),
        ("!missing", True),
        ("!gpu", False),
        ("gpu=true,tier in (web, db),!missing", True),
        ("gpu=true,tier=db", False),
        ("zone.name/x=a-1", True),
        ("empty=", True),
        ("gpu=", False),
    ],
)
def test_grammar_matches_like_kubernetes_selectors(expression, expected):
    assert labels_match(expression, CELL) is expected


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("gpu=true,", "empty requirement"),
        (",gpu", "empty requirement"),
        ("=true", "missing label key"),
        ("tier in (web", "missing ')'"),
        ("tier in web)", "unbalanced ')'"),
        ("tier in ((a))", "nested"),
        ("tier in ()", "empty value"),
        ("tier in (a,,b)", "empty value"),
        ("tier (a)", "value list must follow"),
        ("gpu=true=false", "more than one operator"),
        ("gpu = has space", "invalid label value"),
        ("bad key=1", "invalid label key"),
        ("-gpu", "invalid label key"),
        ("tier between (a)", "value list must follow"),
        ("tier on", "expected key=value"),
        ("!", "missing label key"),
    ],
)
def test_refusals_name_the_expression_and_the_problem(expression, reason):
    with pytest.raises(ValueError) as excinfo:
        validate_label_expression(expression)
    message = str(excinfo.value)
    assert repr(expression) in message
    assert reason in message


def test_parse_is_cached_and_structured():
    selector = parse_label_expression("a=1,b in (x,y),!c")
    assert selector is parse_label_expression("a=1,b in (x,y),!c")
    assert [(r.key, r.op, sorted(r.values)) for r in selector.requirements] == [
        ("a", "=", ["1"]), ("b", "in", ["x", "y"]), ("c", "!exists", []),
    ]
