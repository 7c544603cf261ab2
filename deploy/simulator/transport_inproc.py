"""`--transport inproc`: the auctioneer's own auction code against simulated reps in this process.

Each round is `auctioneer.auction.Auction.run` — fetch every cell's state, run the placement
engine, send each winning cell its work, report what no cell could take — with the two transport seams
(auctioneer/transport.py) answered in memory: a `SimRep` per cell gives its `CellState` (what it
runs, what it has left) and takes or refuses `Work` as a real rep would. Requests are counted where the
HTTP transport would make them: one BBS cell list and one GET /state per cell per auction, one POST /work
per winning cell, one POST /v1/auctions per auction (the report also tells the BBS what each cell
accepted). Work a rep refused is
carried into the next round, as the batcher does, until it has had `max_attempts` tries.

Everything is submitted at once, as one batch (a cold start, a deploy); a wait is the time from that
submission to the rep taking the instance.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from auctioneer.auction import Auction, AuctionConfig
from auctioneer.batcher import Batch, PendingLRP, PendingTask
from auctioneer.cells import FetchedCells, RepAddress
from auctioneer.dispatch import CellWork, DispatchOutcome, Rejection, tally
from auctioneer.metrics import Metrics
from common.models import (
    AffinityRuleModel,
    CellOffers,
    CellState,
    CellTask,
    CellVolume,
    DesiredLRP,
    DeviceRequestModel,
    HostMetricsModel,
    PlacementFailures,
    ResourcesModel,
    Task,
    VolumeRequestModel,
)
from placement.strategies import pickers
from rep.admission import shortage

from .metrics import Outcome
from .sim_input import App, SimInput
from .workload import CellSpec


@dataclass(slots=True)
class Held:
    """An instance a SimRep holds: what the outcome reports of it (a plain object: a run holds 250,000)."""

    process_guid: str
    index: int
    instance_guid: str
    memory_mb: int
    disk_mb: int
    state: str = "running"


class SimRep:
    """One simulated cell: its advertised state, and the work it takes while there is room."""

    def __init__(self, spec: CellSpec, clock: Callable[[], float]) -> None:
        self.spec = spec
        self.clock = clock
        self.memory = spec.memory_mb - spec.prefill_memory_mb
        self.disk = spec.disk_mb - spec.prefill_disk_mb
        self.containers = spec.containers - spec.prefill_containers
        self.lrps: list[Held] = []
        # Kept as instances come, as a rep keeps them: its bid carries instances per process guid.
        self.lrp_counts: dict[str, int] = {}
        self.stopping_counts: dict[str, int] = {}
        for i, p in enumerate(spec.prefill):
            self._hold(Held(p.process_guid, p.index, f"prefill-{i}", p.memory_mb, p.disk_mb,
                            "stopping" if p.delayed_shutdown else "running"))
        self._guids = itertools.count()
        self.tasks: list[CellTask] = [CellTask.model_construct(task_guid=t.task_guid, memory_mb=t.memory_mb,
                                                               disk_mb=t.disk_mb) for t in spec.prefill_tasks]
        self.accepted: list[tuple[PendingLRP | PendingTask, float]] = []  # new work and when it was taken
        host = spec.host
        offered = host is not None or spec.volumes or spec.ingress_ips or spec.devices or spec.cached_blobs
        self._offers = None if not offered else CellOffers.model_construct(
            host=None if host is None else HostMetricsModel.model_construct(**host.model_dump()),
            volumes=[CellVolume.model_construct(**v.model_dump()) for v in spec.volumes],
            ingress_ips=list(spec.ingress_ips),
            devices=dict(spec.devices),
            cached_blobs=list(spec.cached_blobs),
        )

    def _hold(self, held: Held) -> None:
        self.lrps.append(held)
        counts = self.stopping_counts if held.state == "stopping" else self.lrp_counts
        counts[held.process_guid] = counts.get(held.process_guid, 0) + 1

    def state(self) -> CellState:
        spec = self.spec
        # Every field given: no default resolution per call. The offers are shared between calls: the
        # auction copies what it changes, and nothing here takes ingress IPs, devices or volumes.
        return CellState.model_construct(
            cell_id=spec.id,
            zone=spec.zone,
            stacks=list(spec.all_stacks),
            total=ResourcesModel.model_construct(
                memory_mb=spec.memory_mb, disk_mb=spec.disk_mb, containers=spec.containers
            ),
            available=ResourcesModel.model_construct(
                memory_mb=self.memory, disk_mb=self.disk, containers=self.containers
            ),
            starting_containers=spec.starting_containers,
            placement_tags=list(spec.placement_tags),
            optional_placement_tags=list(spec.optional_placement_tags),
            volume_drivers=list(spec.volume_drivers),
            labels=dict(spec.labels),
            evacuating=False,
            cordoned=False,
            lrp_counts=dict(self.lrp_counts),
            stopping_counts=dict(self.stopping_counts),
            tasks=list(self.tasks),
            offers=self._offers,
        )

    def _refusal(self, memory: int, disk: int) -> str:
        """Why the rep refuses an item of this size ("" if it takes it): the rep's own rule."""
        return shortage(self.memory, self.disk, self.containers, memory, disk)

    def _take(self, memory: int, disk: int) -> None:
        self.memory -= memory
        self.disk -= disk
        self.containers -= 1

    def perform(self, work: CellWork) -> list[Rejection]:
        """Take each instance and task that still fits, in order; refuse the rest."""
        now = self.clock()
        rejections: list[Rejection] = []
        for item in work.lrps:
            d = item.desired
            why = self._refusal(d.memory_mb, d.disk_mb)
            if why:
                rejections.append(Rejection(item, self.spec.id, why, False))
                continue
            self._take(d.memory_mb, d.disk_mb)
            self._hold(Held(d.process_guid, item.index, f"{self.spec.id}-{next(self._guids)}",
                            d.memory_mb, d.disk_mb))
            self.accepted.append((item, now))
        for task_item in work.tasks:
            t = task_item.task
            why = self._refusal(t.memory_mb, t.disk_mb)
            if why:
                rejections.append(Rejection(task_item, self.spec.id, why, False))
                continue
            self._take(t.memory_mb, t.disk_mb)
            self.tasks.append(CellTask.model_construct(task_guid=t.task_guid, memory_mb=t.memory_mb,
                                                       disk_mb=t.disk_mb))
            self.accepted.append((task_item, now))
        return rejections


class InProcessCells:
    """The auction's CellStateSource: the cell list (one BBS request), then every rep's state."""

    def __init__(self, reps: dict[str, SimRep], metrics: Metrics) -> None:
        self.reps = reps
        self.metrics = metrics

    async def fetch(self) -> FetchedCells:
        started = time.perf_counter()
        self.metrics.request("bbs")
        result = FetchedCells()
        for cell_id, rep in self.reps.items():
            self.metrics.request("rep_state")
            result.states.append(rep.state())
            result.reps[cell_id] = RepAddress(f"inproc://{cell_id}", cell_id)  # a rep process per cell
        result.seconds = time.perf_counter() - started
        self.metrics.state_fetch(result.seconds)
        return result


class InProcessWork:
    """The auction's WorkSender: each winning cell's Work handed to its SimRep (one request each)."""

    def __init__(self, reps: dict[str, SimRep], metrics: Metrics) -> None:
        self.reps = reps
        self.metrics = metrics

    async def send(self, works: list[CellWork]) -> DispatchOutcome:
        self.metrics.request("rep_work", len(works))
        return tally(works, [self.reps[work.cell_id].perform(work) for work in works])


class InProcessReporter:
    """The auction's FailureReporter: keeps what the BBS would be told (one request per report)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.failures: list[dict] = []

    def report_auction(self, failures: PlacementFailures, explanations: Sequence[dict] = ()) -> None:
        """One POST /v1/auctions per auction (an AuctionReport is a PlacementFailures); `explanations` are
        not kept (the simulation's auctions run without them)."""
        self.metrics.request("bbs")
        self.failures += [
            {"process_guid": f.process_guid, "index": f.index, "error": f.error, "detail": f.detail}
            for f in failures.lrps
        ]
        self.failures += [
            {"task_guid": f.task_guid, "error": f.error, "detail": f.detail} for f in failures.tasks
        ]
        return None


_TEMPLATE: list[DesiredLRP] = []


def desired_lrp(a: App, now: datetime) -> DesiredLRP:
    """The app as the BBS would hand it to the auctioneer: a validated template copied with the app's
    fields, unvalidated (guids in workload files need not follow the API's pattern, and 5,000 apps should
    not cost a validation, or a pydantic default resolution, each)."""
    if not _TEMPLATE:
        _TEMPLATE.append(DesiredLRP.model_validate({
            "process_guid": "template", "created_at": now, "modification_tag": {"epoch": "sim"}}))
    fields = dict(a.fields)
    for name, model in (("volumes", VolumeRequestModel), ("devices", DeviceRequestModel),
                        ("affinity", AffinityRuleModel)):
        if name in fields:
            fields[name] = [model(**v) for v in fields[name]]
    if not fields.get("domain"):
        fields.pop("domain", None)
    return _TEMPLATE[0].model_copy(update={
        "process_guid": a.process_guid, "instances": a.desired_instances, "memory_mb": a.memory_mb,
        "disk_mb": a.disk_mb, "created_at": now, **fields})


def initial_batch(sim: SimInput) -> Batch:
    now = datetime.now(UTC)
    batch = Batch()
    for a in sim.apps:
        desired = desired_lrp(a, now)
        for index in a.indices:
            batch.add_lrp(PendingLRP(desired, index))
    for t in sim.tasks:
        fields = t.model_dump(exclude_defaults=True)
        if not fields.get("domain"):
            fields.pop("domain", None)
        batch.add_task(
            PendingTask(Task.model_construct(command=["true"], created_at=now, updated_at=now, **fields))
        )
    return batch


def unsupported(sim: SimInput) -> list[str]:
    """What a workload asks that the auctioneer does not pass to the engine (said in the report)."""
    notes = list(sim.notes)
    knobs = sim.config
    if knobs.starting_container_weight != 0.25 or knobs.bin_pack_first_fit_weight != 0.0:
        notes.append("config.starting_container_weight / bin_pack_first_fit_weight: not auctioneer settings, "
                     "the defaults were used")
    if sim.now is not None or any(c.expires_at is not None for c in sim.cells):
        notes.append("now / expires_at: reps do not advertise an expiry to the auctioneer, nothing is stale")
    return notes


async def _run(sim: SimInput, strategy: str, engine: str, max_attempts: int,
               rep_class: type[SimRep] = SimRep) -> Outcome:
    clock = time.perf_counter
    reps = {c.id: rep_class(c, clock) for c in sim.cells}
    metrics = Metrics()
    reporter = InProcessReporter(metrics)
    config = AuctionConfig(
        strategy=strategy,
        engine=engine,
        max_inflight_starts=sim.config.max_inflight_starts,
        max_attempts=max_attempts,
        explanations=0,
    )
    auction = Auction(InProcessCells(reps, metrics), InProcessWork(reps, metrics), reporter, metrics, config)
    batch = initial_batch(sim)
    pickers(engine)  # the strategy registry's imports, once, outside the timed auction
    started = clock()
    rounds = 0
    while batch:
        batch = await auction.run(batch)
        rounds += 1
    seconds = clock() - started

    outcome = Outcome(strategy=strategy, transport="inproc", seconds=seconds, rounds=rounds,
                      communications={k: v for k, v in metrics.requests_made.items() if v},
                      failures=reporter.failures, notes=unsupported(sim))
    for cell_id, rep in reps.items():
        for lrp in rep.lrps:
            outcome.instances.append((lrp.process_guid, lrp.index, cell_id, lrp.memory_mb))
        for item, at in rep.accepted:
            outcome.waits.append(at - started)
            if isinstance(item, PendingTask):
                outcome.tasks.append((item.task.task_guid, cell_id, item.task.memory_mb))
    outcome.prefill_keys = {(p.process_guid, p.index) for c in sim.cells for p in c.prefill}
    return outcome


def run_inproc(sim: SimInput, strategy: str, engine: str = "fast", max_attempts: int = 3,
               rep_class: type[SimRep] = SimRep) -> Outcome:
    return asyncio.run(_run(sim, strategy, engine, max_attempts, rep_class))
