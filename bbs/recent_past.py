"""What GET /v1/events/recent answers of the time the event stream did not cover: the apps' stories merged
in time order, and a small ring of the cluster's rare events (cells, tasks completed), both always kept.

The event hub builds events only while someone follows the stream (bbs/events.py), so on a cluster nobody
watched it holds no past at all. The apps' stories (bbs/app_history.py) and this ring are kept whatever
happens, at a few comparisons a commit; reading them costs work bounded by the answer's limit: the
per-app stories are merged newest first (heapq.merge, each story already in time order) and the merge
stops at `limit`. Each entry is answered as an event of the stream's vocabulary (`type`, `at`, `data` with
the app's `process_guid` or the `cell_id`), without an `id` (it was never on the stream), with `source`
(`story` or `cluster`) and a short `text`: what the dashboard shows of it (docs/events.md).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from .app_history import (
    CRASHED_KIND,
    EVACUATED,
    EVACUATING_KIND,
    PLACED,
    RESTARTING,
    ROLLOUT,
    STARTED,
    STOPPED,
    UNPLACEABLE,
    AppHistory,
    Kept,
    as_wire,
)
from .events import EventFilter
from .records import iso

CLUSTER_EVENTS = 500  # cells appearing, lost, cordoned or drained, tasks completed: rare, so minutes to days

STORY, CLUSTER = "story", "cluster"
# A story entry's kind as the stream's event type: filters by type, and the dashboard, treat both alike.
STORY_TYPES = {
    **dict.fromkeys((PLACED, STARTED, CRASHED_KIND, RESTARTING, UNPLACEABLE, EVACUATING_KIND),
                    "actual_lrp_changed"),
    EVACUATED: "actual_lrp_removed", STOPPED: "actual_lrp_removed", ROLLOUT: "rollout_changed",
    "exec": "exec_started",
}

# The kinds of a cell's entry (Effects.cell_changed) and the event type each is answered as.
CELL_EVENT_TYPES = {"appeared": "cell_appeared", "lost": "cell_disappeared", "removed": "cell_removed",
                    "cordoned": "cell_changed", "draining": "cell_changed", "uncordoned": "cell_changed",
                    "evacuating": "cell_changed"}

STORY_EVENT_TYPES = frozenset(STORY_TYPES.values())
CLUSTER_EVENT_TYPES = frozenset({*CELL_EVENT_TYPES.values(), "task_changed"})

# A cluster event as kept: (at, type, cell_id, kind, subject, reason); subject: a task's guid, or "".
Notable = tuple[float, str, str, str, str, str]


class ClusterRing:
    """The last `size` rare cluster-level events, newest last: recorded by the unit of work as it commits
    (bbs/unit_of_work.py), whether anyone listens or not."""

    def __init__(self, size: int = CLUSTER_EVENTS) -> None:
        self._kept: deque[Notable] = deque(maxlen=size)

    def add(self, at: float, kind: str, cell_id: str = "", subject: str = "", reason: str = "",
            type_: str = "cell_changed") -> None:
        self._kept.append((at, type_, cell_id, kind, subject, reason))

    def newest_first(self) -> Iterator[Notable]:
        return reversed(self._kept)


def _at(entry: Kept | dict[str, Any]) -> float:
    if isinstance(entry, tuple):
        return entry[1]
    return datetime.fromisoformat(entry["at"]).timestamp()


def story_event(process_guid: str, entry: Kept | dict[str, Any]) -> dict[str, Any]:
    """A story entry as the recent read answers it."""
    wire = as_wire(entry)
    kind = wire["kind"]
    data = {"process_guid": process_guid, **{k: v for k, v in wire.items() if k != "at"}}
    if kind == ROLLOUT:
        what = (f"rollout {wire.get('rollout_kind', '')} to v{wire.get('to_version', '?')} {wire['state']} "
                f"{wire.get('done', 0)}/{wire.get('total', 0)}").replace("  ", " ")
    else:
        what = f"{process_guid}/{wire.get('index', '?')} {kind}"
        if wire.get("cell_id"):
            what += f" @{wire['cell_id']}"
        if wire.get("crash_count") and kind == CRASHED_KIND:
            what += f" crash #{wire['crash_count']}"
        if kind == "exec":
            what += f" {wire.get('program', '')} by {wire.get('user', '?')}"
    if kind == ROLLOUT:
        what = f"{process_guid} {what}"
    if wire.get("reason"):
        what += f": {wire['reason']}"
    return {"type": STORY_TYPES.get(kind, "actual_lrp_changed"), "at": wire["at"], "source": STORY,
            "text": what, "data": data}


def cluster_event(kept: Notable) -> dict[str, Any]:
    at, type_, cell_id, kind, subject, reason = kept
    data: dict[str, Any] = {"kind": kind}
    if cell_id:
        data["cell_id"] = cell_id
    if subject:
        data["task_guid"] = subject
    if reason:
        data["reason"] = reason
    what = " ".join(x for x in (subject, f"@{cell_id}" if subject and cell_id else cell_id, kind) if x)
    if reason:
        what += f": {reason}"
    return {"type": type_, "at": iso(at), "source": CLUSTER, "text": what, "data": data}


def _story_matches(process_guid: str, entry: Kept | dict[str, Any], wanted: EventFilter) -> bool:
    if wanted.types:
        kind = entry[0] if isinstance(entry, tuple) else entry["kind"]
        if STORY_TYPES.get(kind, "actual_lrp_changed") not in wanted.types:
            return False
    if wanted.cell is not None:
        cell_id = entry[3] if isinstance(entry, tuple) else entry.get("cell_id")
        if cell_id != wanted.cell:
            return False
    return wanted.app is None or process_guid == wanted.app


def _cluster_matches(kept: Notable, wanted: EventFilter) -> bool:
    if wanted.app is not None:
        return False  # no app's: an app's past is its story
    if wanted.types and kept[1] not in wanted.types:
        return False
    return wanted.cell is None or kept[2] == wanted.cell


def _story_source(process_guid: str, entries: Sequence[Kept | dict[str, Any]], wanted: EventFilter,
                  before: float | None) -> Iterator[tuple[float, str, Any]]:
    """One app's story (kept oldest first) newest first, as (at, STORY, (process_guid, entry)), from
    `before` on; a story all newer than `before` (the stream covered it) costs one look."""
    if not entries or (before is not None and _at(entries[0]) >= before):
        return
    for entry in reversed(entries):
        at = _at(entry)
        if (before is None or at < before) and _story_matches(process_guid, entry, wanted):
            yield at, STORY, (process_guid, entry)


def _first(item: tuple[float, str, Any]) -> float:
    return item[0]


def past_events(history: AppHistory, ring: ClusterRing, limit: int, wanted: EventFilter = EventFilter(),
                before: float | None = None) -> list[dict[str, Any]]:
    """The last `limit` story and cluster entries older than `before` (epoch seconds) that `wanted` matches,
    oldest first. Newest first from each source, merged: the work is about `limit` entries and a look or
    two at each app's story, whatever the number kept."""
    if limit <= 0:
        return []
    sources: list[Iterator[tuple[float, str, Any]]] = []
    if not wanted.types or wanted.types & STORY_EVENT_TYPES:
        stories = [(wanted.app, history.story(wanted.app))] if wanted.app is not None else history.stories()
        sources.extend(_story_source(guid, entries, wanted, before) for guid, entries in stories)
    if wanted.app is None and (not wanted.types or wanted.types & CLUSTER_EVENT_TYPES):
        sources.append((k[0], CLUSTER, k) for k in ring.newest_first()
                       if (before is None or k[0] < before) and _cluster_matches(k, wanted))
    merged = heapq.merge(*sources, key=_first, reverse=True)
    found = [cluster_event(item) if source == CLUSTER else story_event(*item)
             for _, source, item in itertools.islice(merged, limit)]
    return found[::-1]
