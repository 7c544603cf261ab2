"""deploy/manifest_plan.py: create, a new version naming the fields that differ, scale only, or nothing."""

from __future__ import annotations

from typing import Any

from common.models import DesiredLRPCreate

from .manifest_plan import MASKED, definition_fields, plan_app, plan_apps


def wire(**fields: Any) -> dict[str, Any]:
    return DesiredLRPCreate.model_validate({"process_guid": "web", "command": ["x"], **fields}).model_dump(
        mode="json")


def stored(**fields: Any) -> dict[str, Any]:
    return {**wire(**fields), "created_at": "2026-01-01T00:00:00Z", "version": 4,
            "modification_tag": {"epoch": "e", "index": 2}}


def test_an_app_the_bbs_does_not_have_is_created() -> None:
    plan = plan_app(wire(), None)
    assert (plan.action, plan.describe()) == ("create", "web: create")


def test_the_same_definition_changes_nothing() -> None:
    plan = plan_app(wire(instances=2, env={"A": "1"}), stored(instances=2, env={"A": "1"}))
    assert (plan.action, plan.describe()) == ("nothing", "web: nothing to change")


def test_only_instances_or_cell_loss_is_a_scale() -> None:
    plan = plan_app(wire(instances=5, on_cell_loss="keep-replicas"), stored(instances=2))
    assert plan.action == "scale"
    assert plan.scale == {"instances": (2, 5), "on_cell_loss": ("reschedule", "keep-replicas")}
    assert plan.describe() == "web: scale only (instances 2 -> 5; on_cell_loss reschedule -> keep-replicas)"


def test_a_definition_change_is_a_new_version_naming_the_fields() -> None:
    plan = plan_app(wire(memory_mb=512, env={"A": "2"}, instances=3), stored(env={"A": "1"}))
    assert plan.action == "update" and plan.changed == ("memory_mb", "env")
    assert plan.describe() == "web: new version (memory_mb, env); instances 1 -> 3"
    assert plan.wire()["changed"] == ["memory_mb", "env"]


def test_env_values_the_bbs_masked_compare_by_name_only() -> None:
    assert plan_app(wire(env={"A": "secret"}), stored(env={"A": MASKED})).action == "nothing"
    assert plan_app(wire(env={"A": "x", "B": "y"}), stored(env={"A": MASKED})).changed == ("env",)


def test_the_definition_leaves_out_the_guid_and_the_scale_fields() -> None:
    fields = definition_fields()
    assert {"command", "env", "memory_mb", "health_check", "artifacts"} <= set(fields)
    assert not {"process_guid", "instances", "on_cell_loss"} & set(fields)


def test_plans_follow_the_file_order() -> None:
    other = {**wire(), "process_guid": "api"}
    plans = plan_apps([other, wire(memory_mb=1)], {"web": stored()})
    assert [(p.name, p.action) for p in plans] == [("api", "create"), ("web", "update")]
