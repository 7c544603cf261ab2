"""One cell: what it holds, what it has left, how it takes work and what it tells the BBS.

Reservation is synchronous and immediate: `take(...)` reserves whatever fits, claims it and answers the
rest as rejected. Everything the cell learns (claims, running, crashes, removals, task starts and
completions) goes into its outbox (rep/outbox.py), which the BBS receives as one lifecycle request per round.

Nothing runs before the BBS accepted its claim: an instance stays `reserved` (a task `claiming`) until the
lifecycle request carrying its claim was answered without refusing it, and only then is it handed to the
executor. Work the BBS does not give this cell (a forged auction's, a late or repeated one's: the index is
not desired, or is another cell's) is refused at its claim, and nothing of it ever runs. One answer
releases a whole batch of claims: no request per instance. An executor that can say before a start that
the instance will be running at once (the simulator's: nothing runs, nothing can fail) promises its
running report, which then travels with the claim, and the BBS takes the instance from UNCLAIMED to
RUNNING in one step; the others report running in a later round, once healthy. An instance whose later
report the BBS refuses is stopped and forgotten without further reports.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.models import (
    CellDetail,
    CellLRP,
    CellOffers,
    CellPresence,
    CellState,
    CellTask,
    DesiredLRP,
    HostMetricsModel,
    LifecycleResult,
    LRPWork,
    ResourcesModel,
    Task,
    TaskCompletion,
    WorkResult,
)

from .admission import shortage
from .executor import Executor, LRPContainer, TaskContainer
from .outbox import Outbox, SendLifecycle
from .reports import Crash, HostPort, Ref, Reports, Running

log = logging.getLogger("rep.cell")

CANCELLED = "cancelled"
STOPPING = "stopping"
# The cached blobs a cell's state and heartbeat list, the most recently used first: a bid is asked of every
# cell every auction, and the blobs an app starting now wants are most likely among the recent ones.
REPORTED_BLOBS = 64

# The digests the cell's host caches, at most `limit`, the most recently used first (rep/artifact_cache.py)
CachedBlobs = Callable[[int], list[str]]


def no_blobs(limit: int) -> list[str]:
    return []


SAME_INDEX = "instance already on this cell"  # a start refused: the auction tries another cell
RESERVED = "reserved"  # claimed, its claim not yet accepted: not handed to the executor
STARTING = "starting"
RUNNING = "running"

def guid_source() -> Callable[[], str]:
    """Instance guids in the UUID format: a random head drawn once per cell boot (the first 20 hex digits
    of a uuid4: 74 random bits), then a counter. As unique as uuid4 in practice (no two cells or boots
    share a head) for a tenth of its cost per instance (uuid4 reads os.urandom each time)."""
    prefix = uuid.uuid4().hex[:20]
    head = f"{prefix[:8]}-{prefix[8:12]}-{prefix[12:16]}-{prefix[16:20]}-"
    counter = itertools.count()
    return lambda: f"{head}{next(counter):012x}"


@dataclass(frozen=True, slots=True)
class CellConfig:
    cell_id: str
    zone: str
    rep_url: str
    host: str  # the advertised host: the host part of every instance's address
    memory_mb: int
    disk_mb: int
    containers: int
    stacks: tuple[str, ...]
    placement_tags: tuple[str, ...] = ()
    optional_placement_tags: tuple[str, ...] = ()
    volume_drivers: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    report_host_metrics: bool = False  # real cells report load; simulated ones have none to report
    report_linger_s: float = 0.0  # how long the outbox lets reports gather before sending (rep/outbox.py)
    rep_id: str = ""  # the name of the rep process hosting the cell (CellPresence.rep_id)
    insecure: bool = False  # the process serves plain HTTP, authorization off (CellPresence.insecure)
    isolation: str = ""  # how its instances are isolated (CellPresence.isolation)


@dataclass(slots=True)
class HeldInstance:
    instance_guid: str
    index: int
    desired: DesiredLRP
    # reserved (claimed; the BBS has not accepted the claim) -> starting (handed to the executor) -> running;
    # any -> stopping
    state: str = RESERVED
    # Its running report, once it runs (reassert_running sends it again), or as the executor promised it
    running: Running | None = None

    @property
    def process_guid(self) -> str:
        return self.desired.process_guid

    def ref(self) -> Ref:
        return Ref(self.desired.process_guid, self.index, self.instance_guid)


@dataclass(slots=True)
class HeldTask:
    task: Task
    # claiming (its start not yet accepted by the BBS: its command does not run yet) | running | cancelling
    state: str = "claiming"


class RepCell:
    def __init__(
        self,
        config: CellConfig,
        executor: Executor,
        send_lifecycle: SendLifecycle,
        *,
        new_guid: Callable[[], str] | None = None,
        cached_blobs: CachedBlobs = no_blobs,
    ) -> None:
        self.config = config
        self.executor = executor
        self.cached_blobs = cached_blobs
        self.outbox = Outbox(
            send_lifecycle, self.apply_lifecycle_result, name=config.cell_id, linger_s=config.report_linger_s
        )
        self.evacuating = False
        # The operator cordoned (or drains) it, as the BBS's last heartbeat answer said: the auctioneer
        # leaves it out, and an auction that started before the cordon finds its work refused here.
        self.cordoned = False
        self.retired = False  # evacuated or shut down: no more heartbeats, no more work
        # Set by the host until the BBS has accepted a heartbeat carrying this boot id: work taken before
        # that could be wiped by the BBS forgetting what this cell held in its previous life.
        self.awaiting_registration = False
        self.boot_id = uuid.uuid4().hex
        self.fencing_token = 0
        # Every fencing token work was accepted under, once each, in order (a debug record: tests check
        # through it that no two auctioneers placed work here under one token, or out of order).
        self.accepted_fencing_tokens: list[int] = []
        self._new_guid = new_guid or guid_source()
        self._instances: dict[str, HeldInstance] = {}
        # Kept as instances come and go, so that a bid (`state()`, asked every auction) costs
        # the number of apps here, not the number of instances: process guid -> instances not stopping,
        # process guid -> instances stopping, how many are reserved or starting (the bid's starting
        # containers), and how many of those are reserved.
        self._lrp_counts: dict[str, int] = {}
        self._stopping_counts: dict[str, int] = {}
        self._starting = 0
        self._reserved = 0
        self._by_index: dict[tuple[str, int], str] = {}
        self._tasks: dict[str, HeldTask] = {}
        self._used_memory = 0
        self._used_disk = 0
        self._empty = asyncio.Event()
        self._empty.set()
        self._background: set[asyncio.Task[object]] = set()

    @property
    def cell_id(self) -> str:
        return self.config.cell_id

    # --- what the cell tells the world ------------------------------------------------------------

    def available(self) -> ResourcesModel:
        return ResourcesModel(
            memory_mb=self.config.memory_mb - self._used_memory,
            disk_mb=self.config.disk_mb - self._used_disk,
            containers=self.config.containers - len(self._instances) - len(self._tasks),
        )

    def total(self) -> ResourcesModel:
        c = self.config
        return ResourcesModel(memory_mb=c.memory_mb, disk_mb=c.disk_mb, containers=c.containers)

    def state(self) -> CellState:
        """The bid: what the auctioneer schedules against (instances per process guid, no instance list)."""
        c = self.config
        tasks = [
            CellTask(task_guid=t.task.task_guid, memory_mb=t.task.memory_mb, disk_mb=t.task.disk_mb)
            for t in self._tasks.values()
        ]
        # Built from the cell's own plain data, so not validated again; every field is given (a missing
        # one would take its default through the slow path). Asked for every cell every auction: validating
        # a full cell's counts cost more than writing them (cell_test.py pins the equivalence).
        return CellState.model_construct(
            cell_id=c.cell_id,
            zone=c.zone,
            stacks=list(c.stacks),
            total=self.total(),
            available=self.available(),
            starting_containers=self._starting,
            placement_tags=list(c.placement_tags),
            optional_placement_tags=list(c.optional_placement_tags),
            volume_drivers=list(c.volume_drivers),
            labels=dict(c.labels),
            evacuating=self.evacuating,
            cordoned=self.cordoned,
            lrp_counts=dict(self._lrp_counts),
            stopping_counts=dict(self._stopping_counts),
            tasks=tasks,
            offers=self._offers(),
        )

    def _offers(self) -> CellOffers | None:
        """What a real cell offers beyond the bid proper: its host's load (the load-mark strategy reads it),
        and the blobs its host caches (the cache term); None from a simulated cell advertising no blob."""
        blobs = self.cached_blobs(REPORTED_BLOBS)
        if not self.config.report_host_metrics and not blobs:
            return None
        host = _host_metrics() if self.config.report_host_metrics else None
        return CellOffers.model_construct(host=host, volumes=[], ingress_ips=[], devices={},
                                          cached_blobs=blobs)

    def detail(self) -> CellDetail:
        """The bid with the rep's own view of the cell: who serves it, the fencing tokens it took work
        under, and every instance it holds (GET /state?lrps=full: operators, tests, the BBS's probes)."""
        c = self.config
        lrps = [
            CellLRP(
                process_guid=i.process_guid,
                index=i.index,
                instance_guid=i.instance_guid,
                memory_mb=i.desired.memory_mb,
                disk_mb=i.desired.disk_mb,
                state=i.state,
                pid=self.executor.pid_of(i.instance_guid),
            )
            for i in self._instances.values()
        ]
        return CellDetail.model_construct(
            bid=self.state(),
            rep_url=c.rep_url,
            insecure=c.insecure,
            isolation=c.isolation,
            fencing_token=self.fencing_token,
            accepted_fencing_tokens=list(self.accepted_fencing_tokens),
            lrps=lrps,
        )

    def presence(self) -> CellPresence:
        c = self.config
        return CellPresence(
            cell_id=c.cell_id,
            zone=c.zone,
            rep_url=c.rep_url,
            stacks=list(c.stacks),
            total=self.total(),
            placement_tags=list(c.placement_tags),
            optional_placement_tags=list(c.optional_placement_tags),
            volume_drivers=list(c.volume_drivers),
            labels=dict(c.labels),
            evacuating=self.evacuating,
            boot_id=self.boot_id,
            rep_id=c.rep_id,
            insecure=c.insecure,
            isolation=c.isolation,
            available=self.available(),
            instances=len(self._instances),
            starting=self._starting,
            host=_host_metrics() if c.report_host_metrics else None,
            cached_blobs=self.cached_blobs(REPORTED_BLOBS),
        )

    def instance_states(self) -> dict[str, int]:
        """How many instances are in each state (reserved, starting, running, stopping), from the counts."""
        live = sum(self._lrp_counts.values())
        return {RESERVED: self._reserved, STARTING: self._starting - self._reserved,
                RUNNING: live - self._starting, "stopping": sum(self._stopping_counts.values())}

    @property
    def task_count(self) -> int:
        return len(self._tasks)

    @property
    def holds_nothing(self) -> bool:
        return not self._instances and not self._tasks

    async def wait_empty(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._empty.wait(), timeout=timeout_s)
        except TimeoutError:
            return False
        return True

    # --- taking work ------------------------------------------------------------------------------

    def take(self, lrps: list[tuple[DesiredLRP, int]], tasks: list[Task], fencing_token: int) -> WorkResult:
        """Reserve what fits now, start it in the background, answer with the rest. LRP instances come as
        (desired LRP, index), in order: a HostWork's part for this cell, without a model per instance."""
        if self.evacuating or self.retired:
            return all_rejected(lrps, tasks, "cell is evacuating")
        if self.cordoned:
            return all_rejected(lrps, tasks, "cell is cordoned")
        if self.awaiting_registration:
            return all_rejected(lrps, tasks, "cell not yet registered with the BBS")
        if fencing_token < self.fencing_token:
            return all_rejected(lrps, tasks, f"stale fencing token {fencing_token} < {self.fencing_token}")
        self.fencing_token = fencing_token
        if not self.accepted_fencing_tokens or self.accepted_fencing_tokens[-1] != fencing_token:
            self.accepted_fencing_tokens.append(fencing_token)
        reasons: list[str] = []
        rejected_lrps: list[LRPWork] = []
        rejected_tasks: list[Task] = []
        for desired, index in lrps:
            why = self._why_not_lrp(desired, index)
            if why:
                rejected_lrps.append(LRPWork(desired=desired, index=index))
                _note(reasons, why)
            else:
                self._start_lrp(desired, index)
        for task in tasks:
            why = self._why_not_task(task)
            if why:
                rejected_tasks.append(task)
                _note(reasons, why)
            else:
                self._start_task(task)
        return WorkResult(
            rejected_lrps=rejected_lrps, rejected_tasks=rejected_tasks, reason="; ".join(reasons)
        )

    def _why_not_lrp(self, d: DesiredLRP, index: int) -> str:
        held_guid = self._by_index.get((d.process_guid, index))
        # Another version's instance of the index may be here: a rollout's replacement, started before the
        # old one stops (make-before-break), may be placed on the old one's cell. So may the index's next
        # instance of the same version once this one runs (a rolling restart: on two cells the auction keeps
        # choosing the old one's cell) or is being stopped. Only one still reserved or starting refuses: that
        # is when an auctioneer's retried delivery of the same start arrives; a later duplicate's claim is
        # refused.
        held = self._instances.get(held_guid) if held_guid is not None else None
        if held is not None and held.state in (RESERVED, STARTING) and held.desired.version == d.version:
            return SAME_INDEX
        c = self.config
        if d.stack not in c.stacks:
            return f"stack {d.stack} not supported"
        return self._why_no_room(d.memory_mb, d.disk_mb)

    def _why_not_task(self, task: Task) -> str:
        if task.task_guid in self._tasks:
            return "task already on this cell"
        if task.stack not in self.config.stacks:
            return f"stack {task.stack} not supported"
        return self._why_no_room(task.memory_mb, task.disk_mb)

    def _why_no_room(self, memory_mb: int, disk_mb: int) -> str:
        c = self.config
        return shortage(c.memory_mb - self._used_memory, c.disk_mb - self._used_disk,
                        c.containers - len(self._instances) - len(self._tasks), memory_mb, disk_mb)

    def _start_lrp(self, desired: DesiredLRP, index: int) -> None:
        """Reserve and claim it; it starts once the BBS accepted the claim (`_start_claimed`). A running
        report the executor promises goes in the same batch as the claim: the BBS applies it only with it."""
        guid = self._new_guid()
        process_guid = desired.process_guid
        held = self._instances[guid] = HeldInstance(guid, index, desired)
        self._by_index[(process_guid, index)] = guid
        counts = self._lrp_counts
        counts[process_guid] = counts.get(process_guid, 0) + 1
        self._starting += 1
        self._reserved += 1
        self._used_memory += desired.memory_mb
        self._used_disk += desired.disk_mb
        self._empty.clear()
        ports = self.executor.promise_running(self._container(held))
        # Without a promise the start waits on the claim's answer: the outbox sends it without lingering
        self.outbox.claimed(Ref(process_guid, index, guid, desired.version), hurry=ports is None)
        if ports is not None:
            held.running = Running(process_guid, index, guid, self.config.host, ports)
            self.outbox.running(held.running)

    def _container(self, held: HeldInstance) -> LRPContainer:
        return LRPContainer(self.config.cell_id, held.instance_guid, held.index, held.desired)

    def _start_claimed(self, answered: Reports) -> None:
        """Hand to the executor every instance whose claim was in the batch the BBS just answered and was not
        refused (the refused ones are forgotten by then)."""
        instances = self._instances
        for claim in answered.claimed:
            held = instances.get(claim.instance_guid)
            if held is not None and held.state == RESERVED:
                held.state = STARTING
                self._reserved -= 1
                self.executor.start_lrp(self._container(held), self)

    def _stopping(self, held: HeldInstance) -> None:
        """Mark an instance as being stopped: it holds its resources but no longer counts for its app."""
        if held.state == STOPPING:
            return
        self._uncount(held)
        held.state = STOPPING
        self._stopping_counts[held.process_guid] = self._stopping_counts.get(held.process_guid, 0) + 1

    def _uncount(self, held: HeldInstance) -> None:
        tally = self._stopping_counts if held.state == STOPPING else self._lrp_counts
        left = tally[held.process_guid] - 1
        if left:
            tally[held.process_guid] = left
        else:
            del tally[held.process_guid]
        if held.state == RESERVED:
            self._reserved -= 1
            self._starting -= 1
        elif held.state == STARTING:
            self._starting -= 1

    def _start_task(self, task: Task) -> None:
        """Reserve it and claim it; its command runs once the BBS accepted the claim (`_run_claimed_tasks`):
        a task runs at most once, though work may reach two cells (a late claim, an auction request sent
        twice), as Diego's rep starts a container only after the BBS's StartTask."""
        self._tasks[task.task_guid] = HeldTask(task=task)
        self._used_memory += task.memory_mb
        self._used_disk += task.disk_mb
        self._empty.clear()
        self.outbox.task_started(task.task_guid)

    def _run_claimed_tasks(self) -> None:
        """Run every task whose claim the BBS just accepted: delivered (no longer pending) and not refused."""
        for held in self._tasks.values():
            if held.state == "claiming" and not self.outbox.start_pending(held.task.task_guid):
                held.state = "running"
                self.executor.run_task(TaskContainer(self.cell_id, held.task), self)

    # --- forgetting -------------------------------------------------------------------------------

    def _forget_instance(self, held: HeldInstance) -> None:
        if self._instances.pop(held.instance_guid, None) is None:
            return
        key = (held.process_guid, held.index)
        if self._by_index.get(key) == held.instance_guid:
            del self._by_index[key]
        self._uncount(held)
        self._used_memory -= held.desired.memory_mb
        self._used_disk -= held.desired.disk_mb
        self._check_empty()

    def _forget_task(self, held: HeldTask) -> None:
        if self._tasks.pop(held.task.task_guid, None) is None:
            return
        self._used_memory -= held.task.memory_mb
        self._used_disk -= held.task.disk_mb
        self._check_empty()

    def _check_empty(self) -> None:
        if self.holds_nothing:
            self._empty.set()

    # --- executor callbacks (ExecutorListener) ------------------------------------------------------

    def lrp_running(self, instance_guid: str, ports: Sequence[HostPort]) -> None:
        held = self._instances.get(instance_guid)
        if held is None or held.state in (STOPPING, RESERVED):
            return  # a reserved one was never handed to the executor: nothing of it runs
        if held.state == STARTING:
            self._starting -= 1
        held.state = RUNNING
        if held.running is not None and held.running.ports == ports:
            return  # a promised report, delivered with the claim, is not sent again (nor a repeated one)
        held.running = Running(held.desired.process_guid, held.index, instance_guid, self.config.host, ports)
        # The last start in flight has no company to linger for: a lone start slower than the linger (any
        # real app, a container) would otherwise be reported that much later.
        self.outbox.running(held.running, hurry=self._starting == 0)

    def reassert_running(self) -> int:
        """Report every running instance running again; how many. After a silence long enough for the BBS
        to have let this cell's presence expire, it may have replaced some of them elsewhere (and its stops
        may never have arrived): it refuses those, and apply_lifecycle_result stops them; for the others
        (still this cell's, or suspected and not yet replaced) a running report changes nothing."""
        reports = [held.running for held in self._instances.values()
                   if held.state == RUNNING and held.running is not None]
        for report in reports:
            self.outbox.running(report)
        return len(reports)

    def lrp_crashed(self, instance_guid: str, reason: str) -> None:
        held = self._instances.get(instance_guid)
        if held is None or held.state == STOPPING:
            return  # a stop in progress reports `removed` itself
        self._forget_instance(held)
        self.outbox.crashed(Crash(held.process_guid, held.index, instance_guid, reason))

    def task_finished(self, completion: TaskCompletion) -> None:
        held = self._tasks.get(completion.task_guid)
        if held is None or held.state == "cancelling":
            return
        self._forget_task(held)
        self.outbox.task_completed(completion)

    # --- stopping ---------------------------------------------------------------------------------

    def has_instance(self, instance_guid: str) -> bool:
        return instance_guid in self._instances

    def has_task(self, task_guid: str) -> bool:
        return task_guid in self._tasks

    async def stop_lrp(self, instance_guid: str) -> bool:
        """Stop an instance and report it `removed`; False when the cell does not hold it."""
        held = self._instances.get(instance_guid)
        if held is None:
            return False
        started = held.state != RESERVED
        self._stopping(held)
        if started:  # a reserved one never reached the executor (and its claim's answer no longer starts it)
            await self.executor.stop_lrp(instance_guid)
        if self._instances.get(instance_guid) is held:
            self._forget_instance(held)
            self.outbox.removed(held.ref())
        return True

    async def cancel_task(self, task_guid: str, reason: str = CANCELLED) -> bool:
        """Kill a task and report it completed, failed with `reason`."""
        held = self._tasks.get(task_guid)
        if held is None:
            return False
        held.state = "cancelling"
        await self.executor.cancel_task(task_guid)
        if self._tasks.get(task_guid) is held:
            self._forget_task(held)
            self.outbox.task_completed(
                TaskCompletion(task_guid=task_guid, failed=True, failure_reason=reason)
            )
        return True

    async def stop_everything(self, task_reason: str) -> None:
        """Stop every instance (reported `removed`) and cancel every task (failed with `task_reason`)."""
        stops = [self.stop_lrp(guid) for guid in list(self._instances)]
        cancels = [self.cancel_task(guid, task_reason) for guid in list(self._tasks)]
        await asyncio.gather(*stops, *cancels, return_exceptions=True)

    def in_background(self, coro: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def wait_background(self, timeout_s: float) -> None:
        if self._background:
            await asyncio.wait(list(self._background), timeout=timeout_s)

    # --- what the BBS answered ----------------------------------------------------------------------

    def apply_lifecycle_result(self, answered: Reports, result: LifecycleResult) -> None:
        """The BBS answered a batch of reports: stop and forget what it refused, silently (not ours); then
        start the instances and run the tasks whose claims it accepted."""
        for ref in result.refused:
            self.outbox.discard_instance(ref.instance_guid)
            held = self._instances.get(ref.instance_guid)
            if held is None:
                continue
            log.info(
                "BBS refused instance; stopping it",
                extra={
                    "data": {"cell_id": self.cell_id, "process_guid": ref.process_guid, "index": ref.index}
                },
            )
            started = held.state != RESERVED
            self._forget_instance(held)
            if started:
                self.in_background(self.executor.stop_lrp(ref.instance_guid))
        for task_guid in result.refused_tasks:
            self.outbox.discard_task(task_guid)
            held_task = self._tasks.get(task_guid)
            if held_task is None:
                continue
            ran, held_task.state = held_task.state == "running", "cancelling"
            self._forget_task(held_task)
            if ran:
                self.in_background(self.executor.cancel_task(task_guid))
        self._start_claimed(answered)
        self._run_claimed_tasks()


def all_rejected(lrps: list[tuple[DesiredLRP, int]], tasks: list[Task], reason: str) -> WorkResult:
    return WorkResult(
        rejected_lrps=[LRPWork(desired=d, index=i) for d, i in lrps],
        rejected_tasks=list(tasks),
        reason=reason,
    )


def _note(reasons: list[str], why: str) -> None:
    if why not in reasons:
        reasons.append(why)


def _host_metrics() -> HostMetricsModel:
    metrics = HostMetricsModel(cores=os.cpu_count() or 1)
    try:
        metrics.load5 = os.getloadavg()[1]
        meminfo: dict[str, float] = {}
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                meminfo[name] = float(rest.split()[0]) / 1024  # kB -> MB
        metrics.mem_total_mb = meminfo.get("MemTotal")
        if metrics.mem_total_mb is not None:
            metrics.mem_used_mb = metrics.mem_total_mb - meminfo.get("MemAvailable", 0.0)
        metrics.swap_total_mb = meminfo.get("SwapTotal", 0.0)
        metrics.swap_used_mb = metrics.swap_total_mb - meminfo.get("SwapFree", 0.0)
    except (OSError, ValueError, IndexError):
        pass
    return metrics
