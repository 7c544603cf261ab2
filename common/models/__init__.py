"""Wire models: the bodies of every API between client, BBS, auctioneer and rep (pydantic v2), one module
per resource, all importable from here.

These are the boundary. Request bodies (Strict) forbid unknown fields, so a typo is a 422 naming the
field, not a silently ignored setting; answers and peer messages (Open) tolerate fields newer peers add.
Every integer, string and list they carry is bounded (docs/limits.md); field names follow
docs/architecture.md "Wire names". The routes that carry them, and who may call each, are in
docs/wire-protocol.md, generated from the apps' own routes (tests/docs/routes.py).
"""

# ruff: noqa: F401  (the imports under TYPE_CHECKING are the names type checkers see; at run time
# __getattr__ imports them)
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .actual import ActualLRP, ActualLRPSummary, ActualState, PortMapping, Presence
    from .artifact import DIGEST_PATTERN, MAX_ARTIFACTS, Artifact, Artifacts, Digest
    from .auction import (
        MAX_ACCEPTED_CHARS,
        MAX_EXPLANATIONS,
        AcceptedWork,
        AuctionReport,
        LRPPlacementFailure,
        LRPStartRequest,
        PlacementExplanation,
        PlacementFailures,
        ScoredCandidate,
        TaskPlacementFailure,
        TaskStartRequest,
        ZoneVisit,
    )
    from .cell import (
        CellDetail,
        CellLRP,
        CellOffers,
        CellPresence,
        CellPresences,
        CellState,
        CellTask,
        CellVolume,
        HeartbeatAnswer,
        HostMetricsModel,
        ResourcesModel,
    )
    from .desired import (
        DEFINITION_EXCLUDED,
        DesiredLRP,
        DesiredLRPCreate,
        DesiredLRPReplace,
        DesiredLRPUpdate,
        HealthCheck,
        OnCellLoss,
    )
    from .event import EVENT_TYPES, Event, EventType
    from .fields import (
        DEFAULT_DOMAIN,
        DEFAULT_STACK,
        GUID_PATTERN,
        INT32_MAX,
        INT64_MAX,
        MAX_ARG_CHARS,
        MAX_ARGV,
        MAX_ENV,
        MAX_ENV_NAME_CHARS,
        MAX_ITEMS,
        MAX_LABEL_CHARS,
        MAX_NAME_CHARS,
        MAX_RESULT_CHARS,
        MAX_TAGS,
        MAX_TEXT_CHARS,
        STRATEGY_NAMES,
        AffinityRuleModel,
        Argument,
        CellIds,
        Command,
        DeviceRequestModel,
        Environment,
        ExitStatus,
        FencingToken,
        Guid,
        Host,
        LabelExpression,
        Labels,
        MegaBytes,
        ModificationTag,
        Name,
        Names,
        Open,
        PlacementFields,
        Port,
        ProcessText,
        Stack,
        StoreInt,
        StrategyName,
        Strict,
        VolumeRequestModel,
    )
    from .lease import Lease, LeaseRequest
    from .lifecycle import (
        CellLifecycle,
        ClaimedInstance,
        CrashReport,
        HostLifecycle,
        HostLifecycleResult,
        InstanceRef,
        LifecycleResult,
        RunningInstanceReport,
        TaskCompletion,
    )
    from .rebalance import RebalanceMove, RebalancePlan, RebalanceRequest, RebalanceStatus
    from .rep_api import (
        CancelTasks,
        CellCordon,
        CordonCells,
        EvacuateCells,
        Found,
        HostCellDetails,
        HostCellStates,
        HostCellWork,
        HostLRPGroup,
        HostWork,
        HostWorkResult,
        InstanceStop,
        LRPWork,
        StopInstances,
        TaskCancel,
        WorkResult,
    )
    from .rollout import (
        ACTIVE_ROLLOUT_STATES,
        ROLLOUT_STATES,
        DesiredLRPChange,
        LRPVersion,
        LRPVersions,
        MaxInFlight,
        RestartRequest,
        Rollout,
        RolloutAction,
        RolloutActionName,
        RolloutKind,
        Rollouts,
        RolloutState,
        RolloutStrategy,
        resolve_max_in_flight,
    )
    from .task import Task, TaskCreate, TaskState
    from .token import (
        TOKEN_ROLES,
        TokenCreate,
        TokenCreated,
        TokenIdentity,
        TokenInfo,
        TokenRole,
        TokenVerify,
    )

# Imported on first use, a module at a time: building every model costs about 0.1 s, and a client command
# (`vendue apps`) needs two of them (deploy/startup_test.py). The names mypy sees are the imports above;
# models_test.py checks this table against them and __all__.
_NAMES_BY_MODULE: dict[str, tuple[str, ...]] = {
    "actual": ("ActualLRP", "ActualLRPSummary", "ActualState", "PortMapping", "Presence"),
    "auction": (
        "MAX_ACCEPTED_CHARS", "MAX_EXPLANATIONS", "AcceptedWork", "AuctionReport", "LRPPlacementFailure",
        "LRPStartRequest", "PlacementExplanation", "PlacementFailures", "ScoredCandidate",
        "TaskPlacementFailure", "TaskStartRequest", "ZoneVisit",
    ),
    "artifact": ("DIGEST_PATTERN", "MAX_ARTIFACTS", "Artifact", "Artifacts", "Digest"),
    "cell": (
        "CellDetail", "CellLRP", "CellOffers", "CellPresence", "CellPresences", "CellState", "CellTask",
        "CellVolume", "HeartbeatAnswer", "HostMetricsModel", "ResourcesModel",
    ),
    "desired": (
        "DEFINITION_EXCLUDED", "DesiredLRP", "DesiredLRPCreate", "DesiredLRPReplace", "DesiredLRPUpdate",
        "HealthCheck", "OnCellLoss",
    ),
    "event": ("EVENT_TYPES", "Event", "EventType"),
    "fields": (
        "DEFAULT_DOMAIN", "DEFAULT_STACK", "GUID_PATTERN", "INT32_MAX", "INT64_MAX", "MAX_ARG_CHARS",
        "MAX_ARGV", "MAX_ENV", "MAX_ENV_NAME_CHARS", "MAX_ITEMS", "MAX_LABEL_CHARS", "MAX_NAME_CHARS",
        "MAX_RESULT_CHARS", "MAX_TAGS", "MAX_TEXT_CHARS", "STRATEGY_NAMES", "AffinityRuleModel", "Argument",
        "CellIds", "Command", "DeviceRequestModel", "Environment", "ExitStatus", "FencingToken", "Guid",
        "Host", "LabelExpression", "Labels", "MegaBytes", "ModificationTag", "Name", "Names", "Open",
        "PlacementFields", "Port", "ProcessText", "Stack", "StoreInt", "StrategyName", "Strict",
        "VolumeRequestModel",
    ),
    "lease": ("Lease", "LeaseRequest"),
    "lifecycle": (
        "CellLifecycle", "ClaimedInstance", "CrashReport", "HostLifecycle", "HostLifecycleResult",
        "InstanceRef", "LifecycleResult", "RunningInstanceReport", "TaskCompletion",
    ),
    "rebalance": ("RebalanceMove", "RebalancePlan", "RebalanceRequest", "RebalanceStatus"),
    "rep_api": (
        "CancelTasks", "CellCordon", "CordonCells", "EvacuateCells", "Found", "HostCellDetails",
        "HostCellStates", "HostCellWork", "HostLRPGroup", "HostWork", "HostWorkResult", "InstanceStop",
        "LRPWork", "StopInstances", "TaskCancel", "WorkResult",
    ),
    "rollout": (
        "ACTIVE_ROLLOUT_STATES", "ROLLOUT_STATES", "DesiredLRPChange", "LRPVersion", "LRPVersions",
        "MaxInFlight", "RestartRequest", "Rollout", "RolloutAction", "RolloutActionName", "RolloutKind",
        "RolloutState", "RolloutStrategy", "Rollouts", "resolve_max_in_flight",
    ),
    "task": ("Task", "TaskCreate", "TaskState"),
    "token": (
        "TOKEN_ROLES", "TokenCreate", "TokenCreated", "TokenIdentity", "TokenInfo", "TokenRole",
        "TokenVerify",
    ),
}
# Whether a model builds its validator when first used rather than when defined (pydantic's defer_build),
# read as the model modules are imported. The `vendue` client commands turn it on (deploy/cli.py): they
# use a few models of the hundred. Servers leave it off: FastAPI's request adapters want their models
# built (a deferred one is built on the first request, and warns).
DEFER_BUILD = False
_MODULE_OF = {name: module for module, names in _NAMES_BY_MODULE.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # __import__ rather than importlib.import_module: `python -X importtime` reports only the former.
    value = getattr(__import__(f"{__name__}.{module}", fromlist=[name]), name)
    globals()[name] = value  # the next lookup is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = sorted(_MODULE_OF)
