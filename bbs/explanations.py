"""Why each LRP instance is where it is: the latest placement explanation per (process_guid, index), as
the auctioneer reports them once per auction (POST /v1/auctions), for `vendue why`.

Kept in this BBS process's memory, bounded: `limit` instances, the least recently reported forgotten
first. A restarted BBS knows none (GET .../placement answers 404 until the instance's next auction), and
with several replicas each knows the auctions reported to it (the CLI asks each in turn). Each is kept
as its JSON text: a tenth of the memory of the parsed model, and the answer is that text as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice

from common.models import PlacementExplanation

from .quotas import DEFAULT_MAX_EXPLANATIONS


class Explanations:
    def __init__(self, limit: int = DEFAULT_MAX_EXPLANATIONS) -> None:
        self.limit = limit
        self._latest: dict[tuple[str, int], str] = {}  # insertion order: the oldest report first

    def __len__(self) -> int:
        return len(self._latest)

    def record(self, explanations: Iterable[PlacementExplanation], auctioned_at: float) -> None:
        latest = self._latest
        for why in explanations:
            key = (why.process_guid, why.index)
            latest.pop(key, None)  # re-inserted: now the most recent
            latest[key] = why.model_copy(update={"auctioned_at": auctioned_at}).model_dump_json()
        overflow = len(latest) - self.limit
        if overflow > 0:
            for key in list(islice(latest, overflow)):
                del latest[key]

    def latest(self, process_guid: str, index: int) -> str | None:
        """The JSON of the latest explanation of this instance, or None."""
        return self._latest.get((process_guid, index))
