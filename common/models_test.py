from pathlib import Path

import pytest
from pydantic import ValidationError

from common.models import DesiredLRPCreate


@pytest.mark.parametrize(
    "fields, location",
    [
        ({"labels_match": "disk in (ssd"}, ("labels_match",)),
        ({"objective": "ai.Nope + 1"}, ("objective",)),
        ({"objective": "(ai.AppID + 1) mod r.AvailableMemoryMB"}, ("objective",)),
        ({"affinity": [{"expression": "=x"}]}, ("affinity", 0, "expression")),
        ({"volumes": [{"name": "data", "label_match": "!"}]}, ("volumes", 0, "label_match")),
        ({"memory_mb": 0}, ("memory_mb",)),
        ({"instances": 10_001}, ("instances",)),
        ({"process_guid": "-bad"}, ("process_guid",)),
        ({"colour": "blue"}, ("colour",)),
    ],
)
def test_bad_requests_name_the_field(fields, location):
    with pytest.raises(ValidationError) as caught:
        DesiredLRPCreate(**{"process_guid": "web", "command": ["true"], **fields})
    assert caught.value.errors()[0]["loc"] == location


def test_valid_expressions_and_presets_are_kept_as_written():
    lrp = DesiredLRPCreate(process_guid="web", objective="diego-blog", labels_match="disk=ssd,!spot",
                           affinity=[{"expression": "zone in (a,b)", "weight": -2}], command=["true"])
    assert (lrp.objective, lrp.labels_match, lrp.affinity[0].expression) == \
        ("diego-blog", "disk=ssd,!spot", "zone in (a,b)")


def test_lazy_model_table_matches_what_type_checkers_see() -> None:
    # common.models imports a module on first use of one of its names: the table that says where each name
    # lives must list exactly the names imported for type checkers, each from the module it names.
    import ast
    import importlib

    import common.models as models

    tree = ast.parse(Path(models.__file__).read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    for_type_checkers = {
        alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert for_type_checkers == models._MODULE_OF
    assert sorted(models.__all__) == sorted(for_type_checkers)
    for name, module in for_type_checkers.items():
        assert getattr(models, name) is getattr(importlib.import_module(f"common.models.{module}"), name)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = models.Nope
