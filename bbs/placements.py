"""Accepted work is never auctioned a second time while the cell that accepted it is present.

The BBS learns that a cell accepted work from the auctioneer: its report of each auction names, per cell,
the instances and tasks the cell took (PlacementFailures.accepted; stored as it came, one `placements`
row per report). Normally the cell's claim arrives within a second and the report is forgotten. When a
claim is late (an overloaded or stalled rep, a slow network) the instance stays UNCLAIMED past the
staleness limit (`--stale-unclaimed`, 30 s), and Diego would auction it again. Instead, convergence looks
it up here: placed on a cell that is still present (and placed after its last auction), it is not
auctioned again; the cell is asked what it holds (bbs/cell_probes.py), and only an answer without it (the
rep restarted, or lost it) sends it to the auctioneer. No answer, or an answer with it, means waiting for
the claim while the cell stays present; once its presence expires, the instance is auctioned as before.
Tasks kicked after `--kick-task` are treated the same way.

Cost: the report's strings are validated by one pattern per cell and stored as they came; a convergence
pass reads the reports' ids and times only. A report older than the staleness limit is deleted unread
when nothing is UNCLAIMED or PENDING (the counts say so, in memory); otherwise it is taken apart, once (a
few µs an instance, lookups included: about 1 s for 250,000), and deleted when every instance and task in
it is claimed, or kept with only what still waits. A report is also taken apart when a pass looks up a
stale instance or task in it (newest report first). Nothing is done per instance per pass.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from common.accepted_work import lrps_of, tasks_of

from .cell_probes import Probe
from .records import ORDINARY, PENDING, UNCLAIMED, ActualRecord, TaskRecord

InstanceKey = tuple[str, int]  # (process_guid, index)


@dataclass(frozen=True, slots=True)
class Placement:
    cell_id: str
    placed_at: float  # when the BBS stored the report (epoch s): the cell had accepted before


@dataclass(slots=True)
class Report:
    """One stored report; `lrps` and `tasks` once taken apart: what is still waiting for its claim."""

    id: int
    placed_at: float
    accepted: dict[str, dict[str, str]]  # {cell_id: {"lrps": ..., "tasks": ...}} as stored
    lrps: dict[InstanceKey, str] | None = None  # instance -> the cell that accepted it
    tasks: dict[str, str] | None = None  # task guid -> the cell that accepted it

    def parse(self) -> None:
        if self.lrps is not None:
            return
        self.lrps, self.tasks = {}, {}
        for cell_id, work in self.accepted.items():
            for key in lrps_of(work.get("lrps", "")):
                self.lrps[key] = cell_id
            for guid in tasks_of(work.get("tasks", "")):
                self.tasks[guid] = cell_id
        self.accepted = {}  # taken apart: the strings are not needed any more

    @property
    def waiting(self) -> bool:
        return self.lrps is None or bool(self.lrps) or bool(self.tasks)


@dataclass(slots=True)
class PlacementLog:
    """The stored reports one BBS process knows (the convergence leader's), taken apart as far as needed."""

    reports: dict[int, Report] = field(default_factory=dict)  # by id: the order they were stored in

    def sync(self, stored: Iterable[tuple[int, float]]) -> list[int]:
        """Keep the reports still stored (another leader may have deleted some); the ids to fetch."""
        ids = {report_id for report_id, _ in stored}
        for report_id in [r for r in self.reports if r not in ids]:
            del self.reports[report_id]
        return sorted(ids - set(self.reports))

    def add(self, fetched: Iterable[tuple[int, float, dict[str, dict[str, str]]]]) -> None:
        for report_id, placed_at, accepted in sorted(fetched, key=lambda f: f[0]):
            self.reports[report_id] = Report(report_id, placed_at, accepted)

    def due(self, now: float, age: float) -> list[Report]:
        """The reports at least `age` old: the ones whose claims should be in by now."""
        return [r for r in self.reports.values() if r.placed_at <= now - age]

    def instance(self, process_guid: str, index: int) -> Placement | None:
        """The latest placement of this instance still waiting for its claim. Looked up only for a stale
        instance: the reports newest first, each taken apart the first time."""
        key = (process_guid, index)
        for report in reversed(self.reports.values()):
            report.parse()
            assert report.lrps is not None
            cell_id = report.lrps.get(key)
            if cell_id is not None:
                return Placement(cell_id, report.placed_at)
        return None

    def task(self, task_guid: str) -> Placement | None:
        for report in reversed(self.reports.values()):
            report.parse()
            assert report.tasks is not None
            cell_id = report.tasks.get(task_guid)
            if cell_id is not None:
                return Placement(cell_id, report.placed_at)
        return None


def parse_all(reports: Iterable[Report]) -> None:
    for report in reports:
        report.parse()


def instance_waits(row: ActualRecord | None, placement: Placement, present: Collection[str]) -> bool:
    """Is this instance still waiting for the claim of the cell that accepted it? It is UNCLAIMED, was
    not auctioned again since, and that cell is present."""
    return (
        row is not None
        and row.presence == ORDINARY
        and row.state == UNCLAIMED
        and row.auctioned_at <= placement.placed_at
        and placement.cell_id in present
    )


def task_waits(task: TaskRecord | None, placement: Placement, present: Collection[str]) -> bool:
    return (
        task is not None
        and task.state == PENDING
        and task.auctioned_at <= placement.placed_at
        and placement.cell_id in present
    )


def prune(
    report: Report,
    rows: Mapping[InstanceKey, ActualRecord],
    tasks: Mapping[str, TaskRecord],
    present: Collection[str],
) -> None:
    """Keep in a taken-apart report only what still waits for its claim (`rows`: the ORDINARY actual LRP of
    each of its instances, where there is one)."""
    assert report.lrps is not None and report.tasks is not None
    placed_at = report.placed_at
    lrps: dict[InstanceKey, str] = {}
    for key, cell_id in report.lrps.items():  # instance_waits, inline: a report names 250,000 at scale
        row = rows.get(key)
        if (row is not None and row.state == UNCLAIMED and row.presence == ORDINARY
                and row.auctioned_at <= placed_at and cell_id in present):
            lrps[key] = cell_id
    report.lrps = lrps
    report.tasks = {
        guid: cell_id for guid, cell_id in report.tasks.items()
        if task_waits(tasks.get(guid), Placement(cell_id, placed_at), present)
    }


@dataclass(frozen=True, slots=True)
class Wait:
    """Do not auction it again: the cell that accepted it may still claim it."""

    probe: bool = False  # ask that cell what it holds


def wait_for_claim(
    placement: Placement, probe: Probe | None, held: bool, now: float, recheck: float
) -> Wait | None:
    """For a stale instance or task that a present cell accepted: None to auction it again, or Wait.
    `probe`: the latest of that cell; `held`: whether that probe lists it."""
    if probe is None or probe.started_at < placement.placed_at:
        return Wait(probe=True)  # nothing heard from the cell since it accepted: ask it
    if probe.answered and not held:
        return None  # the cell says it does not hold it (its rep restarted, or it lost it)
    # It holds it, or does not answer while its presence lasts: its claim may yet come. Ask again later.
    return Wait(probe=probe.started_at + recheck <= now)
