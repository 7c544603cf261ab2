"""The objective language: an objective function sent with a request, parsed once, evaluated per cell.

    (ai.InstanceNumber + ai.AppID + r.AvailZoneNumber) mod azs + 1 + 0.25 * count(ai.AppSourceBlobID,
    r.CachedBlobIDs)

`ai` is the instance being placed, `r` a cell's bid; the highest value wins among the cells that pass
every filter. See parser.py for the grammar, evaluate.py for the meaning of each value, presets.py for
named objectives. Boundaries (REST API, workload loader) call `validate_objective` to refuse bad text
before it reaches an auction.
"""

from __future__ import annotations

from .errors import MAX_BYTES, MAX_DEPTH, ObjectiveError
from .nodes import Objective
from .parser import parse_objective
from .presets import DEFAULT_PRESET, PRESETS, resolve, unknown_preset

__all__ = [
    "DEFAULT_PRESET", "MAX_BYTES", "MAX_DEPTH", "PRESETS", "Objective", "ObjectiveError", "compile_objective",
    "parse_objective", "validate_objective",
]


def compile_objective(objective: str | None) -> Objective:
    """The tree for an LRP's `objective` field: a preset name, an expression, or None for the default."""
    text = resolve(objective)
    try:
        return parse_objective(text)
    except ObjectiveError as exc:
        raise (unknown_preset(text) or exc) from None


def validate_objective(objective: str | None) -> None:
    """Raise ObjectiveError (a ValueError) when `objective` is neither a preset nor a valid expression."""
    compile_objective(objective)
