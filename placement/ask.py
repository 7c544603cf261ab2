"""What an app asks of a cell: one immutable value per app, shared by all of its instances.

The fields are the wire's `common.models.PlacementFields`, name for name (placement/wire.py converts
one into the other, and wire_test.py fails when a field is not carried): resources (`memory_mb`,
`disk_mb`); what a cell must be (`stack`, `placement_tags`, `volume_drivers`); the request filters
(`labels_match`, `volumes`, `ingress_ip`, `devices`); and the preferences that only rank cells
(`affinity`, `strategy`, `objective`, `source_blob`). A task asks only the first two groups.

Hashable and compared by value, so that apps asking alike share whatever is cached per ask; its hash is
computed once, as the engine keys caches on it per item.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field

from common.models import STRATEGY_NAMES

DEFAULT_STACK = "cflinuxfs4"
STRATEGIES: tuple[str, ...] = STRATEGY_NAMES  # the wire's names, in the design's order


@dataclass(slots=True, frozen=True)
class VolumeRequest:
    name: str
    size_mb: int = 0
    label_match: str = ""  # a label expression, see common/labels.py
    ephemeral: bool = False


@dataclass(slots=True, frozen=True)
class DeviceRequest:
    kind: str
    count: int = 1


@dataclass(slots=True, frozen=True)
class AffinityRule:
    """Soft preference: `weight` > 0 attracts to cells whose labels match `expression`, < 0 repels."""

    expression: str
    weight: float = 1.0


@dataclass(slots=True, frozen=True)
class Ask:
    """One app's (or task's) ask of a cell. Treat the tuples' members as immutable too."""

    memory_mb: int
    disk_mb: int
    stack: str = DEFAULT_STACK
    placement_tags: tuple[str, ...] = ()
    volume_drivers: tuple[str, ...] = ()
    labels_match: str = ""
    volumes: tuple[VolumeRequest, ...] = ()
    ingress_ip: bool = False
    devices: tuple[DeviceRequest, ...] = ()
    affinity: tuple[AffinityRule, ...] = ()
    strategy: str | None = None  # overrides the batch's strategy for this app
    objective: str | None = None  # objective strategy: expression or preset name
    source_blob: str | None = None  # objective strategy: cells caching it score ai.SourceBlobCached
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(_compared(self)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        # The generated __eq__ compares two tuples built field by field: distinct apps asking alike meet
        # in dictionaries keyed by asks, so the hashes are compared first and the fields in one C call.
        if self is other:
            return True
        if type(other) is not Ask:
            return NotImplemented
        return self._hash == other._hash and _compared(self) == _compared(other)

    @property
    def uses_up_offers(self) -> bool:
        """Whether it asks for something a placement uses up of a cell's offers (volumes, an ingress IP,
        devices): what only the cell's rep knows the state of."""
        return bool(self.volumes or self.ingress_ip or self.devices)

    def fit(self) -> Ask:
        """The ask less what never decides whether a cell fits but for its room: apps with equal fits
        are admitted by the same cells under every filter but the resource ones."""
        return dataclasses.replace(
            self, memory_mb=0, disk_mb=0, affinity=(), objective=None, source_blob=None
        )


_compared = operator.attrgetter(*(f.name for f in dataclasses.fields(Ask) if f.compare))
