"""The plain-data lifecycle reports accept and refuse what the wire models do, with the same defaults."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from bbs.lifecycle_wire import CELL_REPORT, HOST_REPORT
from common.models import CellLifecycle, HostLifecycle

REF = {"process_guid": "web", "index": 3, "instance_guid": "i1"}
GOOD: list[dict[str, Any]] = [
    {},
    {"claimed": [REF], "running": [REF]},
    {
        "running": [
            {**REF, "host": "10.0.0.5", "ports": [{"container_port": 8080, "host_port": 61000, "x": 1}]}
        ]
    },
    {"crashed": [REF, {**REF, "reason": "exit 137"}], "removed": [REF], "unknown_part": [1]},
    {"tasks_started": ["t1"], "tasks_completed": [{"task_guid": "t1", "exit_status": 0, "result": "hi"}]},
    {"claimed": [{**REF, "index": "4", "newer_field": True}]},  # lax ints, unknown fields ignored
]
BAD: list[tuple[dict[str, Any], tuple[Any, ...]]] = [
    ({"claimed": [{"process_guid": "web", "index": 3}]}, ("claimed", 0, "instance_guid")),
    ({"running": [{**REF, "index": "three"}]}, ("running", 0, "index")),
    ({"running": [{**REF, "ports": [{"container_port": 8080}]}]}, ("running", 0, "ports", 0, "host_port")),
    ({"crashed": [{**REF, "reason": 5}]}, ("crashed", 0, "reason")),
    ({"removed": "all"}, ("removed",)),
    ({"tasks_completed": [{"failed": True}]}, ("tasks_completed", 0, "task_guid")),
]


@pytest.mark.parametrize("body", GOOD)
def test_a_good_report_reads_as_the_model_does(body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    plain = CELL_REPORT.validate_json(raw)
    model = CellLifecycle.model_validate_json(raw)
    assert {
        **plain,
        "tasks_completed": [t.model_dump() for t in plain["tasks_completed"]],
    } == model.model_dump()


@pytest.mark.parametrize(("body", "where"), BAD)
def test_a_bad_report_is_refused_at_the_same_place(body: dict[str, Any], where: tuple[Any, ...]) -> None:
    with pytest.raises(ValidationError) as plain:
        CELL_REPORT.validate_python(body)
    with pytest.raises(ValidationError) as model:
        CellLifecycle.model_validate(body)
    assert [e["loc"] for e in plain.value.errors()] == [e["loc"] for e in model.value.errors()]
    assert plain.value.errors()[0]["loc"] == where
    assert [e["type"] for e in plain.value.errors()] == [e["type"] for e in model.value.errors()]


def test_host_reports_bound_cells_and_their_ids_as_the_model_does() -> None:
    for body in ({"cells": {"not a guid!": {}}}, {"cells": {f"c{i}": {} for i in range(10_001)}}, {}):
        with pytest.raises(ValidationError) as plain:
            HOST_REPORT.validate_python(body)
        with pytest.raises(ValidationError) as model:
            HostLifecycle.model_validate(body)
        assert [(e["loc"], e["type"]) for e in plain.value.errors()] == [
            (e["loc"], e["type"]) for e in model.value.errors()
        ]
    assert HOST_REPORT.validate_python({"cells": {"c1": {"claimed": [REF]}}})["cells"]["c1"]["claimed"] == [
        {**REF, "version": 1}  # a claim from a rep before versions: version 1
    ]


def test_the_plain_report_has_the_models_fields() -> None:
    from bbs import lifecycle_wire as wire
    from common.models import CrashReport, InstanceRef, PortMapping, RunningInstanceReport

    pairs = [
        (wire.CellReport, CellLifecycle),
        (wire.HostReport, HostLifecycle),
        (wire.InstanceRef, InstanceRef),
        (wire.RunningReport, RunningInstanceReport),
        (wire.CrashReport, CrashReport),
        (wire.PortMapping, PortMapping),
    ]
    for plain, model in pairs:
        assert set(plain.__required_keys__) | set(plain.__optional_keys__) == set(model.model_fields), plain
