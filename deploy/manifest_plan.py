"""What applying an app's definition would change (`vendue apply --dry-run`, and what `apply` and `push`
then do): create it, make a new version (naming the fields that differ), scale only, or nothing, as
`nomad job plan` and `kubectl diff` say. Pure: wire dicts in, a plan out.

A definition is every field of DesiredLRPCreate except those that never make a version (the contract of
PUT /v1/desired_lrps/{guid}): the guid, `instances`, `on_cell_loss` and `exec_enabled` (a scale), and
labels or annotations should the model have them.

An app with an `image` cannot be planned exactly: whether its tag names another digest now only the BBS
finds out (bbs/images.py), and what the image's config filled in (command, env, ports, stack) is not in
the wanted definition. Such an app is always sent again (`repin`), the fields the image may have filled
compared only where the wanted definition gives them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from common.models import DesiredLRPCreate

NOT_DEFINITION = frozenset({"process_guid", "instances", "on_cell_loss", "labels", "annotations",
                            "exec_enabled", "diego"})
SCALE_FIELDS = ("instances", "on_cell_loss", "exec_enabled")
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
    repin: str = ""  # an image app otherwise unchanged: its image ref, pinned again by the BBS

    def describe(self) -> str:
        """One line for people: `web: new version (env, memory_mb); instances 2 -> 3`."""
        scaled = "; ".join(f"{name} {now} -> {wanted}" for name, (now, wanted) in self.scale.items())
        if self.action == "create":
            return f"{self.name}: create"
        if self.action == "update" and self.repin:
            return (f"{self.name}: image {self.repin} pinned again (a new version only if it names another "
                    "digest now)" + (f"; {scaled}" if scaled else ""))
        if self.action == "update":
            return f"{self.name}: new version ({', '.join(self.changed)})" + (f"; {scaled}" if scaled else "")
        if self.action == "scale":
            return f"{self.name}: scale only ({scaled})"
        return f"{self.name}: nothing to change"

    def wire(self) -> dict[str, Any]:
        return {"name": self.name, "action": self.action, "changed": list(self.changed), "repin": self.repin,
                "scale": {name: {"now": now, "wanted": wanted} for name, (now, wanted) in self.scale.items()}}


def _same_image_field(name: str, now: Any, wanted: Any) -> bool | None:
    """For an app with an image: whether `name` is the same, where the image's config may have filled it
    (None: compare as any other field)."""
    if name == "image" and isinstance(wanted, dict):
        now = now if isinstance(now, dict) else {}
        # The digest is the BBS's and the credentials are never read back: the ref, and what was given.
        return all(now.get(key) == wanted[key] for key in ("ref", "working_dir", "user")
                   if wanted.get(key) is not None)
    if name == "command" and not wanted:
        return True  # the image's entrypoint and cmd
    if name == "stack":
        return True  # the BBS's: IMAGE_STACK
    if name == "env" and isinstance(now, dict) and isinstance(wanted, dict):
        # The image's env are defaults under the definition's: the wanted names, with their values.
        return all(key in now and (now[key] == MASKED or now[key] == value) for key, value in wanted.items())
    return None


def _same(name: str, now: Any, wanted: Any, image: bool = False) -> bool:
    if image and (same := _same_image_field(name, now, wanted)) is not None:
        return same
    if name == "env" and isinstance(now, dict) and isinstance(wanted, dict):
        # Values the BBS masked cannot be compared: the names can, and a masked value counts as the same.
        return now.keys() == wanted.keys() and all(
            now[key] == MASKED or now[key] == wanted[key] for key in now)
    return bool(now == wanted)


def plan_app(wanted: Mapping[str, Any], current: Mapping[str, Any] | None) -> AppPlan:
    """`wanted`: a DesiredLRPCreate as JSON (every field, defaults included; for an app with an image, the
    fields given: wanted_wire); `current`: the app as the BBS has it (a DesiredLRP as JSON), or None when
    there is none."""
    name = str(wanted["process_guid"])
    if current is None:
        return AppPlan(name, "create")
    image = isinstance(wanted.get("image"), dict)
    changed = tuple(f for f in definition_fields()
                    if f in wanted and not _same(f, current.get(f), wanted[f], image))
    scale = {f: (current.get(f), wanted[f]) for f in SCALE_FIELDS
             if f in wanted and current.get(f) != wanted[f]}
    if changed:
        return AppPlan(name, "update", changed, scale)
    if image:
        return AppPlan(name, "update", (), scale, repin=str(wanted["image"]["ref"]))
    if scale:
        return AppPlan(name, "scale", (), scale)
    return AppPlan(name, "nothing")


def wanted_wire(lrp: DesiredLRPCreate) -> dict[str, Any]:
    """The JSON of a definition as sent to the BBS and planned: every field; for an app with an image only
    the fields given (and its instances), so that the image's config fills the others (bbs/images.py)."""
    if lrp.image is None:
        return lrp.model_dump(mode="json")
    return {**lrp.model_dump(mode="json", exclude_unset=True), "process_guid": lrp.process_guid,
            "instances": lrp.instances}


def plan_apps(wanted: Iterable[Mapping[str, Any]], current: Mapping[str, Mapping[str, Any]]) -> list[AppPlan]:
    """A plan per wanted app, in the file's order; `current`: the apps the BBS has, by name."""
    return [plan_app(app, current.get(str(app["process_guid"]))) for app in wanted]

