"""Tasks: one-off work, from POST /v1/tasks to its result."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from ..urls import http_url_or_none
from .artifact import Artifacts
from .fields import (
    DEFAULT_DOMAIN,
    DEFAULT_STACK,
    Command,
    DiegoMessage,
    Environment,
    ExitStatus,
    Guid,
    MegaBytes,
    Names,
    Stack,
    Strict,
)
from .image import Image, command_or_image


class TaskState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    RESOLVING = "RESOLVING"


class TaskCreate(Strict):
    task_guid: Guid
    domain: Guid = DEFAULT_DOMAIN
    command: Command = Field(default_factory=list)  # none: the image's entrypoint and cmd (the BBS fills it)
    env: Environment = Field(default_factory=dict)
    memory_mb: MegaBytes = 256
    disk_mb: MegaBytes = 1024
    stack: Stack = DEFAULT_STACK
    placement_tags: Names = Field(default_factory=list)
    volume_drivers: Names = Field(default_factory=list)
    # http(s) only; the BBS also refuses link-local and cloud metadata addresses (common/urls.py).
    completion_callback_url: Annotated[str | None, AfterValidator(http_url_or_none)] = None
    # Fetched into the task's directory before its command runs (common/models/artifact.py).
    artifacts: Artifacts = Field(default_factory=list)
    # Run in this OCI image by a cell whose executor runs images (common/models/image.py).
    image: Image | None = None
    diego: DiegoMessage = None

    @model_validator(mode="after")
    def _command_or_image(self) -> TaskCreate:
        if not isinstance(self, Task):  # as stored and sent between peers: whatever was stored is read
            command_or_image(type(self).__name__, self.command, self.image)
        return self


class Task(TaskCreate):
    model_config = ConfigDict(extra="ignore")
    state: TaskState = TaskState.PENDING
    cell_id: str = ""
    failed: bool = False
    failure_reason: str = ""
    exit_status: ExitStatus | None = None
    result: str = ""
    rejection_count: int = 0
    created_at: datetime
    updated_at: datetime
    first_completed_at: datetime | None = None
