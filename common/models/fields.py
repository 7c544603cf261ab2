"""The parts every wire model is made of: bounded field types (every integer, string and list a request
carries is bounded: docs/limits.md), the Strict (requests) and Open (answers, peer messages) bases, and
PlacementFields, what the placement engine reads of an LRP, with its volume, device and affinity models.
Field names follow docs/architecture.md "Wire names"."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..labels import validate_label_expression
from ..urls import MAX_URL_CHARS
from . import DEFER_BUILD

GUID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
Guid = Annotated[str, Field(pattern=GUID_PATTERN)]
MegaBytes = Annotated[int, Field(ge=1, le=1_048_576)]
DEFAULT_STACK = "cflinuxfs4"
DEFAULT_DOMAIN = "vendue"

# --- limits: every integer, string and list a request carries is bounded (a 422 names the field) -----
# Integers are bounded to what the store holds: beyond, the database refuses the write (a 500) instead of
# the API refusing the request.
INT32_MAX = 2**31 - 1  # PostgreSQL INTEGER: instance indices, exit statuses, lease tokens, counts, sizes
INT64_MAX = 2**63 - 1  # BIGINT, and SQLite's widest integer: fencing tokens
# A command is argv (no shell). Linux refuses to exec any argument or environment string over 128 KiB
# (MAX_ARG_STRLEN), and a character is up to 4 bytes of UTF-8: past these, a process could never start.
MAX_ARGV = 256
MAX_ARG_CHARS = 32_768
MAX_ENV = 1_000  # Linux's ~2 MiB for argv and env together holds far fewer large ones (the body cap first)
MAX_ENV_NAME_CHARS = 256
MAX_TAGS = 64  # placement tags, volume drivers, stacks, volumes, devices, affinity rules, labels
MAX_NAME_CHARS = 128  # a tag, a zone, a volume, a label key, an owner, a rep's id
MAX_LABEL_CHARS = 256  # a label value
MAX_TEXT_CHARS = 4_096  # free text: a crash reason, a placement error, a failure reason
MAX_RESULT_CHARS = 10_240
# A desired LRP's or task's Diego message (bbs/diego): base64 protobuf, what the Diego API desired.
MAX_DIEGO_CHARS = 1_048_576  # a task's result (Diego reads at most 10 KB of a task's result file)


def no_nul(text: str) -> str:
    # No C string (argv, env) holds one, and no PostgreSQL text column: a NUL reaching the store is a 500.
    if "\0" in text:
        raise ValueError("contains a NUL character")
    return text


def _no_nul_or_none(text: str | None) -> str | None:
    return None if text is None else no_nul(text)


def _program(argv: list[str]) -> list[str]:
    if argv and not argv[0]:
        raise ValueError("the command's first element (the program to run) is empty")
    return argv


def _environment(env: dict[str, str]) -> dict[str, str]:
    for name in env:
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"invalid environment variable name {name[:64]!r}: empty, or holding '=' or NUL")
    return env


def nul_replaced(text: str) -> str:
    """What a process printed or said may hold NUL, which no database text column takes: kept, visibly."""
    return text.replace("\0", "\ufffd") if "\0" in text else text


StoreInt = Annotated[int, Field(ge=0, le=INT32_MAX)]  # an index, a count: what an INTEGER column holds
ExitStatus = Annotated[int, Field(ge=-INT32_MAX - 1, le=INT32_MAX)]  # negative: the signal that ended it
FencingToken = Annotated[int, Field(ge=0, le=INT64_MAX)]
Port = Annotated[int, Field(ge=0, le=65_535)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(no_nul)]
Names = Annotated[list[Name], Field(max_length=MAX_TAGS)]
Labels = Annotated[
    dict[Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(no_nul)],
         Annotated[str, Field(max_length=MAX_LABEL_CHARS), AfterValidator(no_nul)]],
    Field(max_length=MAX_TAGS),
]
Stack = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(no_nul)]
# What a process printed or said (a crash reason, a failure, a placement error): a NUL is kept as U+FFFD.
ProcessText = Annotated[str, Field(max_length=MAX_TEXT_CHARS), AfterValidator(nul_replaced)]
# A host a rep reports an instance at: a DNS name or an address (IPv6 with its zone).
Host = Annotated[str, Field(max_length=255, pattern=r"^[A-Za-z0-9.:%_\[\]-]*$")]
Argument = Annotated[str, Field(max_length=MAX_ARG_CHARS), AfterValidator(no_nul)]
# An empty program name, or a NUL anywhere, is refused; a task and a desired LRP also need a program
# (min_length=1 where they use it).
Command = Annotated[list[Argument], Field(max_length=MAX_ARGV), AfterValidator(_program)]
Environment = Annotated[
    dict[Annotated[str, Field(max_length=MAX_ENV_NAME_CHARS)], Argument],
    Field(max_length=MAX_ENV),
    AfterValidator(_environment),
]


# Kept with a definition desired through the Diego API and returned unchanged there (docs/diego-api.md):
# what Vendue does not act on (routes, log guid, annotation, ...). Sealed at rest with command and env.
DiegoMessage = Annotated[str | None, Field(max_length=MAX_DIEGO_CHARS, pattern=r"^[A-Za-z0-9+/=*]*$")]


class Strict(BaseModel):
    """Request bodies: unknown fields are an error, not silently dropped."""

    # Finite floats only: NaN and Infinity are not JSON, and a stored one breaks every later read.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=DEFER_BUILD)


class Open(BaseModel):
    """Responses and peer messages: tolerate fields added by newer peers."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, defer_build=DEFER_BUILD)  # finite floats


class ModificationTag(Open):
    epoch: str = Field(max_length=64)
    index: StoreInt = 0


# The most items one rep request may carry (cells, desired LRPs, instances per group, tasks, stops): far
# above what an auction sends one process (the auctioneer splits a process's work past 10,000 items),
# and a bound on what a body can make the rep allocate.
MAX_ITEMS = 100_000
CellIds = Annotated[list[Guid], Field(max_length=10_000)]


def _label_expression(text: str) -> str:
    if text:
        validate_label_expression(text)  # ValueError -> 422 naming the field (parses are cached)
    return text


@lru_cache(maxsize=4096)
def _valid_objective(text: str) -> None:
    from ..objective import validate_objective  # here: once per distinct text, and the CLI does without it

    validate_objective(text)  # a ValueError is not cached: bad input is rare, good input repeats


def _objective(text: str | None) -> str | None:
    # Every DesiredLRP on the wire passes here (10,000 instances in one Work are 10,000 of them):
    # None means the default preset and needs no parse; any text is parsed once.
    if text is not None:
        _valid_objective(text)
    return text


LabelExpression = Annotated[str, Field(max_length=1024), AfterValidator(_label_expression)]


class VolumeRequestModel(Strict):
    name: Name
    size_mb: int = Field(default=0, ge=0, le=1_048_576 * 16)
    label_match: LabelExpression = ""
    ephemeral: bool = False


class DeviceRequestModel(Strict):
    kind: Name
    count: int = Field(default=1, ge=1, le=64)


class AffinityRuleModel(Strict):
    expression: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_label_expression)]
    weight: float = Field(default=1.0, ge=-100, le=100)


# The placement strategies, in the design's order: the engine registers a picker for each (placement/).
StrategyName = Literal["diego", "dea", "loadmark", "service", "objective", "binpack", "random"]
STRATEGY_NAMES: tuple[str, ...] = get_args(StrategyName)


class PlacementFields(Strict):
    """What the placement engine reads of an LRP, shared by DesiredLRP and the auction request."""

    memory_mb: MegaBytes = 256
    disk_mb: MegaBytes = 1024
    stack: Stack = DEFAULT_STACK
    placement_tags: Names = Field(default_factory=list)
    volume_drivers: Names = Field(default_factory=list)
    strategy: StrategyName | None = None
    objective: Annotated[str | None, Field(max_length=1024), AfterValidator(_objective)] = None
    source_blob: Annotated[str | None, Field(max_length=MAX_URL_CHARS), AfterValidator(_no_nul_or_none)] = (
        None
    )
    labels_match: LabelExpression = ""
    volumes: list[VolumeRequestModel] = Field(default_factory=list, max_length=MAX_TAGS)
    ingress_ip: bool = False
    devices: list[DeviceRequestModel] = Field(default_factory=list, max_length=MAX_TAGS)
    affinity: list[AffinityRuleModel] = Field(default_factory=list, max_length=MAX_TAGS)
