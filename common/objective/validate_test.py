import pytest

from . import MAX_BYTES, ObjectiveError, compile_objective, validate_objective
from .presets import DIEGO_BLOG


@pytest.mark.parametrize("text", [None, "", "diego-blog", " diego-blog ", "azs-1", "r.AvailableMemoryMB",
                                  DIEGO_BLOG])
def test_valid_objectives_pass(text):
    assert validate_objective(text) is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("diego-blg", "objective: column 1: unknown preset 'diego-blg' (presets: diego-blog)"),
        ("  my-preset", "objective: column 3: unknown preset 'my-preset' (presets: diego-blog)"),
        (
            "ai.AppID mod r.AvailZoneNumber",
            "objective: column 14: mod needs a constant modulus (numbers and azs only)",
        ),
        ("__import__('os').system('rm -rf /')", "objective: column 1: unknown name '__import__'"),
        (
            "x" * (MAX_BYTES + 1),
            f"objective: column {MAX_BYTES + 1}: expression is {MAX_BYTES + 1} bytes long, "
            f"the limit is {MAX_BYTES}",
        ),
    ],
)
def test_invalid_objectives_raise_a_value_error_with_column_and_reason(text, message):
    with pytest.raises(ObjectiveError) as err:
        validate_objective(text)
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)


def test_compile_resolves_presets_to_the_same_tree_as_their_text():
    assert compile_objective("diego-blog").root == compile_objective(DIEGO_BLOG).root
    assert compile_objective(None).text == DIEGO_BLOG
