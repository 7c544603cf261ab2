"""What applying an app's definition would change (`vendue apply --dry-run`, and what `apply` and `push`
then do): create it, make a new version (naming the fields that differ), scale only, or nothing, as
`nomad job plan` and `kubectl diff` say. Pure: wire dicts in, a plan out.

A definition is every field of DesiredLRPCreate except those that never make a version (the contract of
PUT /v1/desired_lrps/{guid}): the guid, `instances` and `on_cell_loss` (a scale), and labels or
annotations should the model have them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from common.models import DesiredLRPCreate

NOT_DEFINITION = frozenset({"process_guid", "instances", "on_cell_loss", "labels", "annotations", "diego"})
SCALE_FIELDS = ("instances", "on_cell_loss")
Action = Literal["create", "update", "scale", "nothing"]
MASKED = "***"  # an env value the BBS hid from this caller (bbs/redact.py)


def definition_fields() -> list[str]:
    return [name for name in DesiredLRPCreate.model_fields if name not in NOT_DEFINITION]


@dataclass(frozen=True, slots=True)
class AppPlan:
    name: str
    action: Action
    changed: tuple[str, ...] = ()  # the definition's fields that differ (update)
    scale: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # field: (now, wanted)

    def describe(self) -> str:
        """One line for people: `web: new version (env, memory_mb); instances 2 -> 3`."""
        scaled = "; ".join(f"{name} {now} -> {wanted}" for name, (now, wanted) in self.scale.items())
        if self.action == "create":
            return f"{self.name}: create"
        if self.action == "update":
            return f"{self.name}: new version ({', '.join(self.changed)})" + (f"; {scaled}" if scaled else "")
        if self.action == "scale":
            return f"{self.name}: scale only ({scaled})"
        return f"{self.name}: nothing to change"

    def wire(self) -> dict[str, Any]:
        return {"name": self.name, "action": self.action, "changed": list(self.changed),
                "scale": {name: {"now": now, "wanted": wanted} for name, (now, wanted) in self.scale.items()}}


def _same(name: str, now: Any, wanted: Any) -> bool:
    if name == "env" and isinstance(now, dict) and isinstance(wanted, dict):
        # Values the BBS masked cannot be compared: the names can, and a masked value counts as the same.
        return now.keys() == wanted.keys() and all(
            now[key] == MASKED or now[key] == wanted[key] for key in now)
    return bool(now == wanted)


def plan_app(wanted: Mapping[str, Any], current: Mapping[str, Any] | None) -> AppPlan:
    """`wanted`: a DesiredLRPCreate as JSON (every field, defaults included); `current`: the app as the BBS
    has it (a DesiredLRP as JSON), or None when there is none."""
    name = str(wanted["process_guid"])
    if current is None:
        return AppPlan(name, "create")
    changed = tuple(f for f in definition_fields()
                    if f in wanted and not _same(f, current.get(f), wanted[f]))
    scale = {f: (current.get(f), wanted[f]) for f in SCALE_FIELDS
             if f in wanted and current.get(f) != wanted[f]}
    if changed:
        return AppPlan(name, "update", changed, scale)
    if scale:
        return AppPlan(name, "scale", (), scale)
    return AppPlan(name, "nothing")


def plan_apps(wanted: Iterable[Mapping[str, Any]], current: Mapping[str, Mapping[str, Any]]) -> list[AppPlan]:
    """A plan per wanted app, in the file's order; `current`: the apps the BBS has, by name."""
    return [plan_app(app, current.get(str(app["process_guid"]))) for app in wanted]

