"""Desired LRPs: what a person asks to run (POST/PATCH /v1/desired_lrps) and what the BBS answers."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from ..urls import MAX_URL_CHARS
from .artifact import Artifacts
from .fields import (
    DEFAULT_DOMAIN,
    Command,
    DiegoMessage,
    Environment,
    Guid,
    ModificationTag,
    PlacementFields,
    Strict,
)
from .image import Image, command_or_image


def _request_path(path: str) -> str:
    # Written as is into the check's request line: a space or a line break would make another request.
    if not path.startswith("/") or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise ValueError("must start with / and hold no spaces or control characters")
    return path


class HealthCheck(Strict):
    """How the rep checks an instance (rep/health_monitor.py, docs/health-checks.md): until it is RUNNING
    within `timeout_s` (the start timeout), then every `interval_s` for its whole life, each check given
    `invocation_timeout_s`; `failure_threshold` failures in a row crash it. Defaults are Diego's."""

    type: Literal["port", "process", "http"] = "port"
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    path: Annotated[str, Field(max_length=MAX_URL_CHARS), AfterValidator(_request_path)] = "/"
    interval_s: float = Field(default=30.0, ge=0.1, le=3600)
    invocation_timeout_s: float = Field(default=1.0, gt=0, le=600)
    failure_threshold: int = Field(default=1, ge=1, le=100)


# What happens to an LRP's instances when their cell's presence expires (bbs/cell_loss.py): `reschedule`,
# Diego's, replaces them at once (SUSPECT until the replacement runs); `keep-replicas`, the seeds' service
# scheduler's, waits out the BBS's cell-loss grace and check, then moves only apps with a single instance.
OnCellLoss = Literal["reschedule", "keep-replicas"]


class DesiredLRPCreate(PlacementFields):
    process_guid: Guid
    domain: Guid = DEFAULT_DOMAIN
    instances: int = Field(default=1, ge=0, le=10_000)
    # An LRP with no command could only crash ("has no command") forever: refused when desired, unless an
    # image is given, whose entrypoint and cmd the BBS fills it with (common/models/image.py).
    command: Command = Field(default_factory=list)
    env: Environment = Field(default_factory=dict)
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=lambda: [8080], max_length=16)
    health_check: HealthCheck = Field(default_factory=HealthCheck)
    on_cell_loss: OnCellLoss = "reschedule"
    # Fetched into each instance's directory before its command runs (common/models/artifact.py).
    artifacts: Artifacts = Field(default_factory=list)
    # Run in this OCI image by a cell whose executor runs images (common/models/image.py).
    image: Image | None = None
    # `vendue exec` into its instances (docs/exec.md); not part of the definition: toggling it rolls nothing.
    exec_enabled: bool = True
    diego: DiegoMessage = None

    @model_validator(mode="after")
    def _source_blob_from_artifacts(self) -> DesiredLRPCreate:
        # The placement engine's cache term (`source_blob`) is the app's code: its first artifact, unless
        # the definition names another.
        if self.source_blob is None and self.artifacts:
            self.source_blob = self.artifacts[0].digest
        return self

    @model_validator(mode="after")
    def _command_or_image(self) -> DesiredLRPCreate:
        if not isinstance(self, DesiredLRP):  # as stored and sent between peers: whatever was stored is read
            command_or_image(type(self).__name__, self.command, self.image)
        return self


# The fields of a DesiredLRPCreate that are not its definition: changing them makes no new version (a scale,
# a cell-loss policy). Everything else defines how an instance runs (docs/rollouts.md).
DEFINITION_EXCLUDED = frozenset({"process_guid", "instances", "on_cell_loss", "annotations", "labels",
                                 "exec_enabled", "diego"})


class DesiredLRP(DesiredLRPCreate):
    model_config = ConfigDict(extra="ignore")
    # As stored and sent between peers: read whatever was stored, the refusal is DesiredLRPCreate's.
    command: Command = Field(default_factory=list)
    created_at: datetime
    modification_tag: ModificationTag
    version: int = 1  # the definition's version: a change of definition makes the next one


class DesiredLRPReplace(DesiredLRPCreate):
    """PUT /v1/desired_lrps/{guid}: the whole definition (process_guid optional, must match the path), and
    how the change rolls out (common/models/rollout.py RolloutStrategy)."""

    process_guid: Guid | None = None  # type: ignore[assignment]
    rollout: RolloutStrategy | None = None


class DesiredLRPUpdate(Strict):
    instances: int | None = Field(default=None, ge=0, le=10_000)
    on_cell_loss: OnCellLoss | None = None
    exec_enabled: bool | None = None
    # Optimistic update: when given, the update applies only if the tag still matches (else 409).
    modification_tag: ModificationTag | None = None


from .rollout import RolloutStrategy  # noqa: E402  (rollout.py imports DesiredLRP from here)

DesiredLRPReplace.model_rebuild()
