import pytest
from pydantic import ValidationError

from .desired import DesiredLRP, DesiredLRPCreate


@pytest.mark.parametrize("body", [{"process_guid": "web"}, {"process_guid": "web", "command": []}])
def test_an_lrp_with_no_command_is_refused_naming_the_field(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as refused:
        DesiredLRPCreate.model_validate(body)
    assert [error["loc"] for error in refused.value.errors()] == [("command",)]


def test_a_stored_lrp_with_no_command_still_reads() -> None:
    stored = {"process_guid": "web", "created_at": "2026-01-01T00:00:00Z",
              "modification_tag": {"epoch": "e", "index": 0}}
    assert DesiredLRP.model_validate(stored).command == []
