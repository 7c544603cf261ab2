"""The manifest `vendue apply -f vendue.yml` reads (docs/manifest.md): apps and tasks, in push's words.

An app's keys are `vendue push`'s parameters (`instances`, `memory_mb`, `disk_mb`, `tags`, `env`, ...,
with push's defaults), `health` is the wire health check (whatever fields common.models.HealthCheck has,
nothing more), `path` a directory packed into the app's first artifact, and `rollout` how a change rolls
out (push's `--strategy rolling|canary`, `--max-in-flight`, `--no-rollback`). A task's keys are `vendue task
run`'s. Every unknown key is refused. `image` is push's `--image`: a reference (or `{ref, working_dir,
user}`); `vendue get app` adds the `digest` the BBS pinned, which applying ignores (the BBS pins the ref
again). A registry's credentials never go in the file: `vendue apply --registry-credentials-file` or the
environment (deploy/image_args.py).

A file that does not parse or validate is ONE error naming the file, the line and the field
(`vendue.yml:7: applications[0].memory_mb: Input should be a valid integer`): the YAML is composed into
nodes first, which keep their line, and a pydantic error's location is looked up among them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, Field, ValidationError, field_validator, model_validator

from common.models import Artifact, DesiredLRPCreate, HealthCheck, TaskCreate
from common.models.artifact import Artifacts, Digest
from common.models.desired import OnCellLoss
from common.models.fields import (
    DEFAULT_DOMAIN,
    DEFAULT_STACK,
    AffinityRuleModel,
    Command,
    DeviceRequestModel,
    Environment,
    Guid,
    LabelExpression,
    MegaBytes,
    Names,
    Stack,
    StrategyName,
    Strict,
    VolumeRequestModel,
    no_nul,
)
from common.models.image import MAX_IMAGE_REF_CHARS, command_or_image

MAX_MANIFEST_BYTES = 1_048_576  # far beyond any hand-written file; a bound on what one read allocates
MAX_IN_FLIGHT_PATTERN = r"^([1-9][0-9]{0,5}|([1-9][0-9]?|100)%)$"


class RolloutSpec(Strict):
    """How a new version replaces the running one (push's --strategy/--max-in-flight/--no-rollback)."""

    strategy: Literal["rolling", "canary"] = "rolling"
    max_in_flight: int | Annotated[str, Field(pattern=MAX_IN_FLIGHT_PATTERN)] = Field(default=1)
    rollback: bool = True

    @field_validator("max_in_flight")
    @classmethod
    def _at_least_one(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("at least 1 (or a percentage, '25%')")
        return value

    def wire(self) -> dict[str, Any]:
        """The API's RolloutStrategy."""
        return {"max_in_flight": self.max_in_flight, "auto_revert": self.rollback,
                "canary": self.strategy == "canary"}


class ImageSpec(Strict):
    """An app's or a task's image: push's `--image` (a bare reference in the file is its `ref`)."""

    ref: Annotated[str, Field(min_length=1, max_length=MAX_IMAGE_REF_CHARS), AfterValidator(no_nul)]
    digest: Digest | None = None  # what the BBS pinned, as `vendue get app` shows it; not sent
    working_dir: Annotated[str | None, Field(min_length=1, max_length=4_096)] = None
    user: Annotated[str | None, Field(min_length=1, max_length=256)] = None

    @model_validator(mode="before")
    @classmethod
    def _bare_ref(cls, value: Any) -> Any:
        return {"ref": value} if isinstance(value, str) else value

    def wire(self, credentials: dict[str, str] | None) -> dict[str, Any]:
        image = self.model_dump(exclude={"digest"}, exclude_none=True)
        return {**image, "credentials": credentials} if credentials else image


class AppSpec(Strict):
    """One app: `vendue push`'s parameters and defaults, plus what only a file says well."""

    name: Guid
    command: Command = Field(default_factory=list)  # none: the image's entrypoint and cmd
    image: ImageSpec | None = None
    instances: int = Field(default=1, ge=0, le=10_000)
    memory_mb: MegaBytes = 256
    disk_mb: MegaBytes = 1024
    stack: Stack = DEFAULT_STACK
    tags: Names = Field(default_factory=list)
    strategy: StrategyName | None = None  # the placement strategy, as push's --strategy diego|binpack|...
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=lambda: [8080], max_length=16)
    health: HealthCheck | None = None
    env: Environment = Field(default_factory=dict)
    domain: Guid = DEFAULT_DOMAIN
    on_cell_loss: OnCellLoss = "reschedule"
    # `vendue exec` into its instances (docs/exec.md); not given: a new app allows it, an existing one
    # keeps what it has (`vendue exec-enable` / `exec-disable` may have set it).
    exec_enabled: bool | None = None
    path: str | None = Field(default=None, min_length=1, max_length=4096)
    artifacts: Artifacts = Field(default_factory=list)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    # The placement fields push has no flag for, by their wire names.
    volume_drivers: Names = Field(default_factory=list)
    objective: str | None = Field(default=None, max_length=1024)
    labels_match: LabelExpression = ""
    volumes: list[VolumeRequestModel] = Field(default_factory=list, max_length=64)
    ingress_ip: bool = False
    devices: list[DeviceRequestModel] = Field(default_factory=list, max_length=64)
    affinity: list[AffinityRuleModel] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _command_or_image(self) -> AppSpec:
        command_or_image(type(self).__name__, self.command, self.image)  # type: ignore[arg-type]
        return self

    def definition(self, path_artifact: Artifact | None = None,
                   credentials: dict[str, str] | None = None) -> DesiredLRPCreate:
        """The desired LRP this app asks for (`path_artifact`: what `path` was packed into, first;
        `credentials`: its image registry's). With an image, only the keys the file gives are set, so that
        the image's config fills the others (bbs/images.py)."""
        fields = self.model_dump(exclude={"name", "tags", "health", "path", "artifacts", "rollout", "image"},
                                 exclude_unset=self.image is not None)
        fields.update(process_guid=self.name, instances=self.instances, placement_tags=self.tags,
                      artifacts=[*([path_artifact] if path_artifact else []), *self.artifacts])
        if self.exec_enabled is None:
            fields.pop("exec_enabled", None)
        if self.image is not None:
            fields["image"] = self.image.wire(credentials)
        if self.health is not None:
            fields["health_check"] = self.health
        return DesiredLRPCreate.model_validate(fields)


class TaskSpec(Strict):
    """One task: `vendue task run`'s parameters and defaults; `name` is required (it is what makes a second
    apply find the task already run)."""

    name: Guid
    command: Command = Field(default_factory=list)  # none: the image's entrypoint and cmd
    image: ImageSpec | None = None
    memory_mb: MegaBytes = 256
    disk_mb: MegaBytes = 1024
    stack: Stack = DEFAULT_STACK
    tags: Names = Field(default_factory=list)
    env: Environment = Field(default_factory=dict)
    domain: Guid = DEFAULT_DOMAIN
    artifacts: Artifacts = Field(default_factory=list)

    @model_validator(mode="after")
    def _command_or_image(self) -> TaskSpec:
        command_or_image(type(self).__name__, self.command, self.image)  # type: ignore[arg-type]
        return self

    def request(self, credentials: dict[str, str] | None = None) -> TaskCreate:
        fields = self.model_dump(exclude={"name", "tags", "image"}, exclude_unset=self.image is not None)
        if self.image is not None:
            fields["image"] = self.image.wire(credentials)
        return TaskCreate.model_validate({**fields, "task_guid": self.name, "placement_tags": self.tags})


class Manifest(Strict):
    applications: list[AppSpec] = Field(default_factory=list, max_length=1_000)
    tasks: list[TaskSpec] = Field(default_factory=list, max_length=1_000)

    @field_validator("applications", "tasks")
    @classmethod
    def _unique_names(cls, items: list[Any]) -> list[Any]:
        seen: set[str] = set()
        for item in items:
            if item.name in seen:
                raise ValueError(f"name {item.name!r} appears twice")
            seen.add(item.name)
        return items


class ManifestError(Exception):
    """A file that cannot be applied: str() is the one line to print (`FILE:LINE: FIELD: why`)."""


@dataclass(frozen=True, slots=True)
class Located:
    """A loaded manifest and where each of its parts was in the file (for errors found later: a path that
    cannot be packed names its line too)."""

    manifest: Manifest
    source: str
    lines: dict[tuple[str | int, ...], int]

    def where(self, loc: Sequence[str | int]) -> str:
        return f"{self.source}:{line_of(self.lines, loc)}: {field_path(loc)}"


def field_path(loc: Sequence[str | int]) -> str:
    """('applications', 0, 'memory_mb') -> applications[0].memory_mb"""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the file)"


def line_of(lines: dict[tuple[str | int, ...], int], loc: Sequence[str | int]) -> int:
    """The line of the deepest part of `loc` the file has (a missing field: the line of its parent)."""
    parts = tuple(loc)
    while parts and parts not in lines:
        parts = parts[:-1]
    return lines.get(parts, 1)


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice (PyYAML keeps the last, silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _node_lines(node: yaml.Node, at: tuple[str | int, ...], lines: dict[tuple[str | int, ...], int]) -> None:
    lines[at] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines[(*at, key.value)] = key.start_mark.line + 1
                _node_lines(value, (*at, key.value), lines)
                lines[(*at, key.value)] = key.start_mark.line + 1  # the key's line, not its value's
    elif isinstance(node, yaml.SequenceNode):
        for n, item in enumerate(node.value):
            _node_lines(item, (*at, n), lines)


def parse_manifest(text: str, source: str) -> Located:
    """The manifest in `text` (read from `source`, the name errors give), or ManifestError."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise ManifestError(f"{source}:{line}: invalid YAML: {exc.problem or exc.context}") from exc
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}:1: invalid YAML: {exc}") from exc
    finally:
        loader.dispose()
    lines: dict[tuple[str | int, ...], int] = {}
    if node is not None:
        _node_lines(node, (), lines)
    if not isinstance(data, dict):
        raise ManifestError(f"{source}:{lines.get((), 1)}: (the file): expected a mapping with "
                            "`applications:` and/or `tasks:`")
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise ManifestError(_first_error(exc, (), source, lines)) from exc
    # What the wire models check beyond the manifest's own (an objective's syntax, ...): the same line.
    for n, app in enumerate(manifest.applications):
        try:
            app.definition()
        except ValidationError as exc:
            raise ManifestError(_first_error(exc, ("applications", n), source, lines, _APP_NAMES)) from exc
    for n, task in enumerate(manifest.tasks):
        try:
            task.request()
        except ValidationError as exc:
            raise ManifestError(_first_error(exc, ("tasks", n), source, lines, _TASK_NAMES)) from exc
    return Located(manifest, source, lines)


# The wire names the manifest spells otherwise.
_APP_NAMES = {"process_guid": "name", "placement_tags": "tags", "health_check": "health"}
_TASK_NAMES = {"task_guid": "name", "placement_tags": "tags"}


def _first_error(exc: ValidationError, under: tuple[str | int, ...], source: str,
                 lines: dict[tuple[str | int, ...], int], names: dict[str, str] | None = None) -> str:
    """`FILE:LINE: FIELD: why` for the first problem (and how many other fields have one)."""
    located: dict[tuple[str | int, ...], str] = {}
    for error in exc.errors():
        parts = [part for part in error["loc"] if isinstance(part, str | int)]
        if parts and names and isinstance(parts[0], str):
            parts[0] = names.get(parts[0], parts[0])
        loc = (*under, *_file_keys(parts, under, lines))
        located.setdefault(loc, error["msg"])
    loc, message = next(iter(located.items()))
    more = f" (and {len(located) - 1} more)" if len(located) > 1 else ""
    return f"{source}:{line_of(lines, loc)}: {field_path(loc)}: {message}{more}"


def _file_keys(parts: list[str | int], under: tuple[str | int, ...],
               lines: dict[tuple[str | int, ...], int]) -> list[str | int]:
    """`parts` without what pydantic adds that is no key of the file: a union's branch ('int',
    'constrained-str', 'function-after[...]'), unless the file has such a key there."""
    kept: list[str | int] = []
    for part in parts:
        branch = isinstance(part, str) and (part in ("int", "str", "float", "bool") or "[" in part
                                              or part.startswith(("constrained-", "function-")))
        if not branch or (*under, *kept, part) in lines:
            kept.append(part)
    return kept


def load_manifest(path: Path) -> Located:
    """Read and parse the manifest at `path` (ManifestError: unreadable, too large, or invalid)."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    return parse_manifest(text, str(path))


# --- from an app back to a file (`vendue get app NAME -o yaml`) -------------------------------------


def app_spec_of(lrp: BaseModel, rollout: RolloutSpec | None = None) -> dict[str, Any]:
    """A running app (a DesiredLRP) as a manifest's application: only what differs from the defaults, so
    the file is short, and applying it changes nothing."""
    wire = lrp.model_dump(mode="json")
    defaults = AppSpec.model_validate({"name": wire["process_guid"], "command": ["x"]}).model_dump(
        mode="json")
    spec: dict[str, Any] = {"name": wire["process_guid"], "command": wire["command"],
                            "instances": wire["instances"], "memory_mb": wire["memory_mb"],
                            "disk_mb": wire["disk_mb"]}
    if wire.get("image"):  # the ref and the digest pinned; never credentials (the BBS shows none)
        spec["image"] = {k: v for k, v in wire["image"].items()
                         if k in ImageSpec.model_fields and v is not None}
    renamed = {"placement_tags": "tags", "health_check": "health"}
    for field in AppSpec.model_fields:
        wire_name = next((w for w, m in renamed.items() if m == field), field)
        if field in spec or field in ("path", "rollout") or wire_name not in wire:
            continue
        value = wire[wire_name]
        if field == "health":
            if value != HealthCheck().model_dump(mode="json"):
                spec["health"] = value
        elif field == "exec_enabled":  # shown only when off: on is what a new app gets
            if value is False:
                spec[field] = False
        elif value != defaults.get(field):
            spec[field] = value
    if rollout is not None and rollout != RolloutSpec():
        spec["rollout"] = rollout.model_dump(mode="json")
    return spec


def dump_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, allow_unicode=True)
