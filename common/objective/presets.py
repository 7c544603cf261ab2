"""Named objectives an LRP may ask for instead of writing an expression.

`diego-blog` is the proposal published on the Diego blog: spread the instances of an app round-robin
over the zones, then prefer cells that hold the app's source blob, have more memory and disk free, and
run fewer instances of the app. Its weights α, β, γ, δ sum to 1, so together those preferences move a
cell by at most one step of the zone term: the zone order always decides first, they break its ties.
We weigh them equally (0.25 each): the proposal names no values, and no one preference should dominate.
"""

from __future__ import annotations

import re

from .errors import ObjectiveError

ALPHA = BETA = GAMMA = DELTA = 0.25

DIEGO_BLOG = (
    "(ai.InstanceNumber + ai.AppID + r.AvailZoneNumber) mod azs + 1"
    f" + {ALPHA} * count(ai.AppSourceBlobID, r.CachedBlobIDs)"
    f" + {BETA} * r.AvailableMemoryMB / r.TotalMemoryMB"
    f" + {GAMMA} * r.AvailableDiskMB / r.TotalDiskMB"
    f" + {DELTA} * (1 - count(ai.AppID, r.RunningAppIDs) / ai.TotalInstances)"
)

PRESETS: dict[str, str] = {"diego-blog": DIEGO_BLOG}
DEFAULT_PRESET = "diego-blog"

# A lone hyphenated word that does not parse was meant as a preset name (`azs-1` does parse).
PRESET_LIKE = re.compile(r"\s*[A-Za-z][A-Za-z0-9]*(-[A-Za-z0-9]+)+\s*")


def resolve(objective: str | None) -> str:
    """The expression an LRP's `objective` field stands for: a preset's, its own, or the default."""
    if objective is None or not objective.strip():
        return PRESETS[DEFAULT_PRESET]
    return PRESETS.get(objective.strip(), objective)


def unknown_preset(objective: str) -> ObjectiveError | None:
    """The error to report for text that failed to parse, when it looks like a misspelt preset name."""
    if not PRESET_LIKE.fullmatch(objective):
        return None
    start = len(objective) - len(objective.lstrip()) + 1
    name = objective.strip()
    return ObjectiveError(start, f"unknown preset {name!r} (presets: {', '.join(sorted(PRESETS))})")
