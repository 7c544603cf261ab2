"""Workload files for the placement engine (`vendue simulate`): pydantic models and boundary validation.

The format is a contract shared with other tools (docs/workload-format.md): known fields are checked for
type and range, unknown fields are ignored ("add fields freely"), and anything that does not fit is
reported as ONE line naming the field, e.g. `lrps[3].memory_mb: must be >= 1`.

An LRP's placement fields are the wire's (`common.models.PlacementFields`, what a desired LRP carries),
so a workload asks of a cell exactly what an app can; placement/wire.py converts both into the engine's
`Ask` (deploy/simulator/engine.py builds the engine's input from a validated `Workload`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from common.models import PlacementFields

DEFAULT_STACK = "cflinuxfs4"
MAX_WORK_MB = 1_048_576  # a single LRP or task asks for at most 1 TiB of memory or disk

NonEmpty = Annotated[str, Field(min_length=1)]
WorkMB = Annotated[int, Field(ge=1, le=MAX_WORK_MB)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class WorkloadError(ValueError):
    """A workload that cannot be used; `str(err)` is one line naming the offending field."""


class _Model(BaseModel):
    # Unknown fields are ignored (the contract lets producers add fields); known ones are strict, so
    # `"memory_mb": "256"` or `true` is an error rather than silently coerced.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


# --- cells ------------------------------------------------------------------------------------------


class PrefillInstance(_Model):
    """An LRP instance already running on a cell: counts against capacity, zone and same-process counts."""

    process_guid: NonEmpty
    index: NonNegativeInt = 0
    memory_mb: NonNegativeInt = 0
    disk_mb: NonNegativeInt = 0
    delayed_shutdown: bool = False


class PrefillTask(_Model):
    """A task already running on a cell."""

    task_guid: NonEmpty
    memory_mb: NonNegativeInt = 0
    disk_mb: NonNegativeInt = 0


class HostMetrics(_Model):
    """Host load metrics for the load-mark strategy; absent values come from the cell's allocations."""

    swap_used_mb: float = Field(default=0.0, ge=0)
    swap_total_mb: float = Field(default=0.0, ge=0)
    mem_used_mb: float | None = Field(default=None, ge=0)
    mem_total_mb: float | None = Field(default=None, ge=0)
    disk_used_mb: float | None = Field(default=None, ge=0)
    disk_total_mb: float | None = Field(default=None, ge=0)
    load5: float = Field(default=0.0, ge=0)
    cores: int = Field(default=1, ge=1)


class Volume(_Model):
    """A volume a cell offers (service strategy)."""

    name: NonEmpty
    size_mb: NonNegativeInt = 0
    labels: dict[str, str] = Field(default_factory=dict)
    ephemeral: bool = False
    holder: str | None = None  # "process_guid/index" owning an ephemeral volume


class CellSpec(_Model):
    id: NonEmpty
    zone: NonEmpty
    memory_mb: int = Field(ge=1)
    disk_mb: int = Field(ge=1)
    containers: int = Field(ge=1)
    stack: NonEmpty = DEFAULT_STACK
    stacks: list[NonEmpty] = Field(default_factory=list)  # several rootfses; `stack` when empty
    placement_tags: list[str] = Field(default_factory=list)
    optional_placement_tags: list[str] = Field(default_factory=list)
    volume_drivers: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    starting_containers: NonNegativeInt = 0
    prefill: list[PrefillInstance] = Field(default_factory=list)
    prefill_tasks: list[PrefillTask] = Field(default_factory=list)
    host: HostMetrics | None = None
    volumes: list[Volume] = Field(default_factory=list)
    ingress_ips: list[str] = Field(default_factory=list)
    devices: dict[str, NonNegativeInt] = Field(default_factory=dict)
    advertised_at: float | None = None
    expires_at: float | None = None
    cached_blobs: list[str] = Field(default_factory=list)

    @property
    def all_stacks(self) -> tuple[str, ...]:
        return tuple(self.stacks) or (self.stack,)

    @property
    def prefill_memory_mb(self) -> int:
        return sum(p.memory_mb for p in self.prefill) + sum(t.memory_mb for t in self.prefill_tasks)

    @property
    def prefill_disk_mb(self) -> int:
        return sum(p.disk_mb for p in self.prefill) + sum(t.disk_mb for t in self.prefill_tasks)

    @property
    def prefill_containers(self) -> int:
        return len(self.prefill) + len(self.prefill_tasks)


# --- work -------------------------------------------------------------------------------------------


class LRPSpec(PlacementFields):
    """One LRP instance: its app's placement fields (the wire's), and what a workload says beyond them."""

    # A workload file's models are its own (unknown fields ignored, strict types, immutable): the wire's
    # PlacementFields refuses unknown fields, a workload's producers may add them.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    process_guid: NonEmpty
    index: int = Field(ge=0)
    # Required in a workload file (the wire defaults them).
    memory_mb: WorkMB
    disk_mb: WorkMB
    # Any name: the simulator checks it against the engine's registry, naming the field (engine.py).
    strategy: NonEmpty | None = None  # type: ignore[assignment]
    domain: str = ""
    total_instances: NonNegativeInt = 0
    previous_cell: str | None = None
    # What the BBS does when the instance's cell is lost (DesiredLRPCreate, common/models/); the engine
    # ignores it, a simulation over real services passes it on. Optional: files without it load as before.
    on_cell_loss: Literal["reschedule", "keep-replicas"] = "reschedule"


class TaskSpec(_Model):
    task_guid: NonEmpty
    memory_mb: WorkMB
    disk_mb: WorkMB
    stack: NonEmpty = DEFAULT_STACK
    placement_tags: list[str] = Field(default_factory=list)
    volume_drivers: list[str] = Field(default_factory=list)
    domain: str = ""


class SchedulerSettings(_Model):
    """Optional per-workload scheduler knobs (Diego's defaults when absent)."""

    starting_container_weight: float = Field(default=0.25, ge=0)
    bin_pack_first_fit_weight: float = Field(default=0.0, ge=0)
    max_inflight_starts: NonNegativeInt = 0


class Workload(_Model):
    name: str = ""
    now: float | None = None  # the dea strategy judges advertisement staleness against this time
    config: SchedulerSettings = Field(default_factory=SchedulerSettings)
    cells: list[CellSpec] = Field(default_factory=list)
    lrps: list[LRPSpec] = Field(default_factory=list)
    tasks: list[TaskSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_ids(self) -> Workload:
        # Duplicates are reported rather than silently deduplicated (as the auctioneer would): in a file
        # they are almost always a generator bug, and they would make placed + failed != work given.
        seen_cells: dict[str, int] = {}
        for i, cell in enumerate(self.cells):
            if cell.id in seen_cells:
                raise _FieldError(
                    ("cells", i, "id"),
                    f"duplicate cell id {cell.id!r} (first at cells[{seen_cells[cell.id]}])",
                )
            seen_cells[cell.id] = i
            _check_prefill_fits(i, cell)
        seen_lrps: dict[tuple[str, int], int] = {}
        for i, lrp in enumerate(self.lrps):
            key = (lrp.process_guid, lrp.index)
            if key in seen_lrps:
                raise _FieldError(
                    ("lrps", i),
                    f"duplicate instance {lrp.process_guid}/{lrp.index} (first at lrps[{seen_lrps[key]}])",
                )
            seen_lrps[key] = i
        seen_tasks: dict[str, int] = {}
        for i, task in enumerate(self.tasks):
            if task.task_guid in seen_tasks:
                raise _FieldError(
                    ("tasks", i, "task_guid"),
                    f"duplicate task {task.task_guid!r} (first at tasks[{seen_tasks[task.task_guid]}])",
                )
            seen_tasks[task.task_guid] = i
        return self


def _check_prefill_fits(i: int, cell: CellSpec) -> None:
    # What a cell already runs must fit in what it has; reported against its `prefill` field.
    for what, used, total in (
        ("memory", cell.prefill_memory_mb, cell.memory_mb),
        ("disk", cell.prefill_disk_mb, cell.disk_mb),
        ("containers", cell.prefill_containers, cell.containers),
    ):
        if used > total:
            unit = "" if what == "containers" else " MB"
            raise _FieldError(
                ("cells", i, "prefill"), f"{what} {used}{unit} exceeds the cell's {total}{unit}"
            )


class _FieldError(Exception):
    """Raised from whole-workload checks with the location pydantic cannot know. Deliberately not a
    ValueError, so pydantic propagates it instead of wrapping it at the workload's root."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


# --- loading ----------------------------------------------------------------------------------------


def field_path(loc: tuple[str | int, ...]) -> str:
    """("lrps", 3, "memory_mb") -> "lrps[3].memory_mb"."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "workload"


def _describe(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        limit = next(iter(ctx.values()), "?")
        return f"must be {bounds[kind]} {limit}"
    if kind == "missing":
        return "required"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in ("int_type", "int_from_float"):
        return "must be an integer"
    if kind in ("float_type",):
        return "must be a number"
    if kind in ("string_type", "str_type"):
        return "must be a string"
    if kind == "bool_type":
        return "must be true or false"
    if kind in ("list_type",):
        return "must be a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be an object"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return error["msg"]


def parse_workload(data: Any) -> Workload:
    """Validate already-decoded JSON; raises `WorkloadError` with one line naming the field."""
    if not isinstance(data, dict):
        raise WorkloadError("workload: must be a JSON object")
    try:
        return Workload.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise WorkloadError(f"{field_path(first['loc'])}: {_describe(first)}") from None
    except _FieldError as exc:  # whole-workload checks: not a ValueError, so pydantic lets it through
        raise WorkloadError(f"{field_path(exc.loc)}: {exc.message}") from None


def loads_workload(text: str) -> Workload:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    return parse_workload(data)


def load_workload(path: str | Path) -> Workload:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{path}: cannot read: {exc}") from None
    try:
        return loads_workload(text)
    except WorkloadError as exc:
        if str(exc).startswith("invalid JSON"):
            raise WorkloadError(f"{path}: {exc}") from None
        raise
