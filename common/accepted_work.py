"""What a cell accepted in one auction, as the auctioneer reports it to the BBS: compact strings.

`lrps` is `process_guid:index` tokens separated by single spaces, `tasks` task guids separated by single
spaces (a guid holds neither a space nor a colon: common/models/fields.py GUID_PATTERN). An auction of 250,000
instances reports 250,000 of them: as nested JSON objects the BBS took 0.67 s to validate them, as these
strings 0.013 s (one pattern match per cell), and it stores them as they came. They are taken apart only
for the few instances whose claim is late (bbs/placements.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

_GUID = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"
_INSTANCE = rf"{_GUID}:[0-9]{{1,10}}"
LRPS_PATTERN = rf"^(?:{_INSTANCE}(?: {_INSTANCE})*)?$"
TASKS_PATTERN = rf"^(?:{_GUID}(?: {_GUID})*)?$"


def lrps_text(instances: Iterable[tuple[str, int]]) -> str:
    """(process_guid, index) pairs as the `lrps` string."""
    return " ".join(f"{process_guid}:{index}" for process_guid, index in instances)


def lrps_of(text: str) -> Iterator[tuple[str, int]]:
    """The (process_guid, index) pairs of an `lrps` string (one that matched LRPS_PATTERN)."""
    for token in text.split():
        process_guid, _, index = token.rpartition(":")
        yield process_guid, int(index)


def tasks_text(task_guids: Iterable[str]) -> str:
    return " ".join(task_guids)


def tasks_of(text: str) -> list[str]:
    return text.split()
