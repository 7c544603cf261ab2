"""`--transport http|nats`: a scenario on a real local cluster whose reps are `vendue rep --sim` processes.

For each strategy a fresh cluster (deploy/cluster.py) starts in a temporary directory: a BBS, an
auctioneer running that strategy, and one `vendue rep --sim --cells K` process per *cell group* — cells
alike in zone, size, stacks, tags and labels (and, where it can be afforded, in what they already run).
The scenario's apps are desired through the BBS REST API and the run ends once every instance is RUNNING
or carries a placement error (or the deadline passes). Placements come from GET /v1/actual_lrps, waits
from each instance's RUNNING `since` (the simulated start takes no time), auctions and requests from the
auctioneer's GET /v1/stats: the communications are real and counted, not estimated.

What a cell already runs (a scenario's prefill) is desired first, before the clock starts: one desired
LRP per group and instance size, restricted to the group by a placement tag only that group's cells offer
(as an optional tag), and spread by the `diego` strategy; cells of one group that hold the same prefill
end up holding it exactly. Where the cells' prefill differs within a group (more distinct cells than
`MAX_REP_PROCESSES`), it is spread evenly over the group instead, and the report says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from common import sse
from common.models import DesiredLRPCreate, TaskCreate

from ..cluster import LocalCluster, SimRepProcess
from .metrics import Outcome
from .sim_input import App, SimInput
from .workload import CellSpec

MAX_REP_PROCESSES = 12  # rep processes per cluster: each is a Python interpreter on a small machine
MAX_INSTANCES_PER_LRP = 10_000  # the BBS API's limit on one desired LRP
PIN_TAG = "vendue-sim-{group}"
LRP_COMMAND = ["sleep", "infinity"]  # never run: the sim executor only pretends
TASK_COMMAND = ["true"]
DESIRE_CONCURRENCY = 16

Progress = Callable[[int, int], None]  # (instances settled, instances in all)


class ClusterRunError(RuntimeError):
    """The cluster did not get through the run (startup, the BBS refusing a request...)."""


@dataclass(slots=True)
class CellGroup:
    name: str  # g0, g1, ...: also the prefix of its cells' ids
    cells: list[CellSpec]
    pinned: bool = False  # offers PIN_TAG so the group's prefill can be sent to it

    @property
    def real_ids(self) -> list[str]:
        return [self.name] if len(self.cells) == 1 else [f"{self.name}-{i}" for i in range(len(self.cells))]

    @property
    def pin_tag(self) -> str:
        return PIN_TAG.format(group=self.name)

    def sim_rep(self) -> SimRepProcess:
        """The `vendue rep --sim` process hosting the group's cells."""
        hosted = tuple((real, self.cells[0].zone) for real in self.real_ids)
        prefix = f"{self.name}-" if len(self.cells) > 1 else ""
        return SimRepProcess(f"rep-{self.name}", tuple(self.rep_args()), hosted, cell_prefix=prefix)

    def rep_args(self) -> list[str]:
        first = self.cells[0]
        args = ["--cell-id", self.name, "--zone", first.zone]
        if len(self.cells) > 1:
            args[:0] = ["--cells", str(len(self.cells))]
        args += ["--memory-mb", str(first.memory_mb), "--disk-mb", str(first.disk_mb),
                 "--containers", str(first.containers), "--sim-start-delay", "0"]
        for flag, values in (("--stack", first.all_stacks), ("--tag", first.placement_tags),
                             ("--optional-tag", [*first.optional_placement_tags,
                                                 *([self.pin_tag] if self.pinned else [])]),
                             ("--volume-driver", first.volume_drivers),
                             ("--label", [f"{k}={v}" for k, v in first.labels.items()])):
            for value in values:
                args += [flag, value]
        return args


@dataclass(slots=True)
class Plan:
    groups: list[CellGroup]
    scenario_id: dict[str, str]  # the rep's cell id -> the scenario's
    prefill: list[dict[str, Any]]  # desired LRP bodies, sent before the clock starts
    prefill_instances: int
    apps: list[dict[str, Any]]  # desired LRP bodies for the work (validated)
    tasks: list[dict[str, Any]]
    memory: dict[str, int] = field(default_factory=dict)  # process guid -> memory per instance
    notes: list[str] = field(default_factory=list)


def _kind(c: CellSpec, with_prefill: bool) -> tuple:
    key: tuple = (c.zone, c.memory_mb, c.disk_mb, c.containers, c.all_stacks, tuple(c.placement_tags),
           tuple(c.optional_placement_tags), tuple(c.volume_drivers), tuple(sorted(c.labels.items())))
    if with_prefill:
        key += (tuple(sorted(Counter((p.memory_mb, p.disk_mb) for p in c.prefill).items())),)
    return key


def _group(cells: list[CellSpec], with_prefill: bool) -> list[list[CellSpec]]:
    groups: dict[tuple, list[CellSpec]] = {}
    for c in cells:
        groups.setdefault(_kind(c, with_prefill), []).append(c)
    return list(groups.values())


def _body(model: type[BaseModel], body: dict[str, Any], where: str) -> dict[str, Any]:
    """Check a request body against the API's model now, not halfway through a run."""
    try:
        model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        path = ".".join(str(p) for p in error["loc"])
        raise ValueError(
            f"{where}.{path}: {error['msg']} (over http/nats the BBS API's rules apply)"
        ) from None
    return body


def _app_body(a: App, instances: int | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    fields = {k: v for k, v in a.fields.items() if not (k == "domain" and not v)}
    return {
        "process_guid": a.process_guid,
        "instances": a.desired_instances if instances is None else instances,
        "memory_mb": a.memory_mb,
        "disk_mb": a.disk_mb,
        **fields,
        **(extra or {}),
        "command": LRP_COMMAND,
    }


def plan(sim: SimInput) -> Plan:
    """Cell groups, prefill and request bodies; ValueError (one line) for what the API cannot express."""
    grouped = _group(sim.cells, with_prefill=True)
    notes: list[str] = list(sim.notes)
    if len(grouped) > MAX_REP_PROCESSES:
        grouped = _group(sim.cells, with_prefill=False)
        if any(c.prefill for c in sim.cells):
            notes.append("prefill differs cell by cell: it was spread evenly over each group of alike cells "
                         "(per-cell prefill is exact inproc only)")
    if len(grouped) > MAX_REP_PROCESSES:
        raise ValueError(
            f"--transport: the cells are of {len(grouped)} kinds (zone, size, stacks, tags, labels); "
            f"at most {MAX_REP_PROCESSES} rep processes are started, use --transport inproc"
        )
    groups = [
        CellGroup(f"g{i}", cells, pinned=any(c.prefill for c in cells)) for i, cells in enumerate(grouped)
    ]
    scenario_id = {real: c.id for g in groups for real, c in zip(g.real_ids, g.cells, strict=True)}

    work_guids: dict[str, App] = {}
    for a in sim.apps:
        if a.process_guid in work_guids:
            raise ValueError(f"lrps: {a.process_guid!r} has instances with different placement fields; "
                             "over http/nats an app is one desired LRP")
        work_guids[a.process_guid] = a
    memory = {a.process_guid: a.memory_mb for a in sim.apps}

    # Prefill of processes that are not in the work is anonymous: one desired LRP per group and size.
    prefill: list[dict[str, Any]] = []
    prefill_instances = 0
    ongoing: dict[str, list[int]] = defaultdict(list)  # work processes already running some indices
    for g in groups:
        sizes: Counter[tuple[int, int]] = Counter()
        for c in g.cells:
            for p in c.prefill:
                if p.process_guid in work_guids:
                    ongoing[p.process_guid].append(p.index)
                else:
                    sizes[(max(1, p.memory_mb), max(1, p.disk_mb))] += 1
        for (mem, disk), count in sorted(sizes.items()):
            for part, first in enumerate(range(0, count, MAX_INSTANCES_PER_LRP)):
                guid = f"prefill-{g.name}-{mem}m-{disk}d-{part}"
                n = min(MAX_INSTANCES_PER_LRP, count - first)
                prefill.append({"process_guid": guid, "instances": n, "memory_mb": mem, "disk_mb": disk,
                                "placement_tags": [g.pin_tag], "strategy": "diego", "command": LRP_COMMAND})
                memory[guid] = mem
                prefill_instances += n
    for guid, indices in ongoing.items():
        a = work_guids[guid]
        if sorted(indices) != list(range(len(indices))) or min(a.indices) != len(indices):
            raise ValueError(
                f"prefill: {guid!r} runs indices {sorted(indices)[:5]}... and places "
                f"{sorted(a.indices)[:5]}...; "
                "over http/nats the running ones must be 0..N-1 and the new ones follow"
            )
        prefill.append(_app_body(a, instances=len(indices)))
        prefill_instances += len(indices)
        notes.append(
            f"{guid}: its running instances were placed by the auction (by the strategy under test), "
            "not on the cells the workload names"
        )
    apps = []
    for a in sim.apps:
        if sorted(a.indices) != list(range(min(a.indices, default=0), max(a.indices, default=-1) + 1)):
            raise ValueError(f"lrps: {a.process_guid!r} places indices {sorted(a.indices)[:5]}...; "
                             "over http/nats they must be consecutive")
        apps.append(_body(DesiredLRPCreate, _app_body(a), f"lrps[{a.process_guid}]"))
    for body in prefill:
        _body(DesiredLRPCreate, body, "prefill")
    tasks = []
    for t in sim.tasks:
        body = {"task_guid": t.task_guid, "memory_mb": t.memory_mb, "disk_mb": t.disk_mb, "stack": t.stack,
                "placement_tags": list(t.placement_tags), "volume_drivers": list(t.volume_drivers),
                "command": TASK_COMMAND, **({"domain": t.domain} if t.domain else {})}
        tasks.append(_body(TaskCreate, body, f"tasks[{t.task_guid}]"))

    unmodelled = sorted(
        {
            name
            for c in sim.cells
            for name, present in (
                ("host metrics", c.host is not None),
                ("volumes", bool(c.volumes)),
                ("ingress_ips", bool(c.ingress_ips)),
                ("devices", bool(c.devices)),
                ("starting_containers", bool(c.starting_containers)),
                ("cached_blobs", bool(c.cached_blobs)),
                ("prefill_tasks", bool(c.prefill_tasks)),
                ("expires_at", c.expires_at is not None),
            )
            if present
        }
    )
    if unmodelled:
        notes.append(f"not offered by `vendue rep --sim` cells, so left out: {', '.join(unmodelled)}")
    return Plan(groups, scenario_id, prefill, prefill_instances, apps, tasks, memory, notes)


# --- driving the BBS -------------------------------------------------------------------------------


async def _post_all(client: httpx.AsyncClient, path: str, bodies: list[dict[str, Any]]) -> None:
    limit = asyncio.Semaphore(DESIRE_CONCURRENCY)

    async def post(body: dict[str, Any]) -> None:
        async with limit:
            response = await client.post(path, json=body, timeout=60.0)
        if response.status_code != 201:
            raise ClusterRunError(f"POST {path}: HTTP {response.status_code} {response.text[:200]}")

    await asyncio.gather(*(post(b) for b in bodies))


async def _actuals(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await client.get("/v1/actual_lrps", params={"presence": "ORDINARY"}, timeout=60.0)
    response.raise_for_status()
    return response.json()["items"]


async def _tasks(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await client.get("/v1/tasks", timeout=60.0)
    response.raise_for_status()
    return response.json()["items"]


async def _stats(client: httpx.AsyncClient, auctioneer_url: str) -> dict[str, Any]:
    response = await client.get(f"{auctioneer_url}/v1/stats", timeout=10.0)
    response.raise_for_status()
    return response.json()


async def _idle_stats(client: httpx.AsyncClient, auctioneer_url: str, wait_s: float = 10.0) -> dict[str, Any]:
    """The auctioneer's stats once no auction runs and nothing waits (so an auction's requests and its
    count fall on the same side of the snapshot); the latest after `wait_s` otherwise."""
    deadline = time.monotonic() + wait_s
    while True:
        stats = await _stats(client, auctioneer_url)
        if (not stats.get("auction_running") and not stats.get("pending")) or time.monotonic() > deadline:
            return stats
        await asyncio.sleep(0.05)


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class Watcher:
    """Follows GET /v1/events: the latest ORDINARY actual LRP per (process_guid, index) and task per guid.

    Progress comes from the stream (the BBS serialises each change once); a full listing every few
    seconds covers a dropped stream, and the final numbers come from a listing too.
    """

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.actuals: dict[tuple[str, int], dict[str, Any]] = {}
        self.tasks: dict[str, dict[str, Any]] = {}
        self.subscribed = asyncio.Event()
        self.changed = asyncio.Event()

    async def follow(self) -> None:
        while True:
            try:
                async with self.client.stream(
                    "GET", "/v1/events", timeout=httpx.Timeout(10.0, read=None)
                ) as r:
                    async for event in sse.aevents(self._subscribed(r.aiter_bytes())):
                        self._apply(json.loads(event.data))
            except (httpx.HTTPError, ValueError):
                pass
            self.subscribed.set()
            await asyncio.sleep(0.2)

    async def _subscribed(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The stream's bytes; the first (the BBS's ": connected" comment) says it is subscribed."""
        async for chunk in chunks:
            self.subscribed.set()
            yield chunk

    def _apply(self, event: dict[str, Any]) -> None:
        kind, data = event.get("type", ""), event.get("data") or {}
        if kind.startswith("actual_lrp_") and data.get("presence", "ORDINARY") == "ORDINARY":
            key = (data["process_guid"], int(data["index"]))
            if kind == "actual_lrp_removed":
                self.actuals.pop(key, None)
            else:
                self.actuals[key] = data
            self.changed.set()
        elif kind.startswith("task_") and "task_guid" in data:
            self.tasks[data["task_guid"]] = data
            self.changed.set()

    async def relist(self, with_tasks: bool) -> None:
        self.actuals = {(a["process_guid"], a["index"]): a for a in await _actuals(self.client)}
        if with_tasks:
            self.tasks = {t["task_guid"]: t for t in await _tasks(self.client)}

    async def wait(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), seconds)
        self.changed.clear()


RELIST_EVERY_S = 3.0


async def _until(watcher: Watcher, done: Callable[[], bool], deadline: float, with_tasks: bool) -> bool:
    """Wait until `done()` (True) or the deadline (False), relisting now and then."""
    relisted = time.monotonic()
    while not done():
        now = time.monotonic()
        if now > deadline:
            return False
        if now - relisted > RELIST_EVERY_S:
            await watcher.relist(with_tasks)
            relisted = time.monotonic()
            continue
        await watcher.wait(min(0.5, max(0.01, deadline - now)))
    return True


async def _drive(cluster: LocalCluster, the_plan: Plan, strategy: str, timeout: float,
                 progress: Progress | None) -> Outcome:
    deadline = time.monotonic() + timeout
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with cluster.async_http_client(base_url=cluster.bbs_url, limits=limits) as client:
        watcher = Watcher(client)
        follow = asyncio.create_task(watcher.follow())
        try:
            await asyncio.wait_for(watcher.subscribed.wait(), 30.0)
            return await _measure(cluster, client, watcher, the_plan, strategy, timeout, deadline, progress)
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await follow


async def _measure(cluster: LocalCluster, client: httpx.AsyncClient, watcher: Watcher, the_plan: Plan,
                   strategy: str, timeout: float, deadline: float, progress: Progress | None) -> Outcome:
    # 1. What the cells already run, placed before the clock starts.
    if the_plan.prefill:
        await _post_all(client, "/v1/desired_lrps", the_plan.prefill)

        def prefill_running() -> bool:
            return (
                sum(1 for a in watcher.actuals.values() if a["state"] == "RUNNING")
                >= the_plan.prefill_instances
            )

        if not await _until(watcher, prefill_running, deadline, False):
            raise ClusterRunError(f"prefill: not all {the_plan.prefill_instances} instances running "
                                  f"within {timeout:g} s")
    await watcher.relist(False)
    prefill_keys = set(watcher.actuals)
    before = await _idle_stats(client, cluster.auctioneer_url)

    # 2. The work: every app and task, as fast as the BBS takes them.
    started = time.time()
    ongoing = {b["process_guid"] for b in the_plan.prefill if not b["process_guid"].startswith("prefill-")}
    await _post_all(
        client, "/v1/desired_lrps", [b for b in the_plan.apps if b["process_guid"] not in ongoing]
    )
    for body in the_plan.apps:
        if body["process_guid"] in ongoing:
            response = await client.patch(f"/v1/desired_lrps/{body['process_guid']}",
                                          json={"instances": body["instances"]}, timeout=60.0)
            if response.status_code != 200:
                raise ClusterRunError(f"scaling {body['process_guid']}: HTTP {response.status_code}")
    await _post_all(client, "/v1/tasks", the_plan.tasks)

    # 3. Until every instance is RUNNING or has a placement error, and every task has a cell or failed.
    expected = {(b["process_guid"], i) for b in the_plan.apps for i in range(b["instances"])} - prefill_keys
    task_guids = {t["task_guid"] for t in the_plan.tasks}
    total = len(expected) + len(task_guids)
    task_seen: dict[str, float] = {}

    def settled() -> bool:
        now = time.time()
        n = 0
        for key in expected:
            a = watcher.actuals.get(key)
            n += a is not None and (a["state"] == "RUNNING" or bool(a["placement_error"]))
        for guid in task_guids:
            t = watcher.tasks.get(guid)
            if t is not None and t["cell_id"]:
                task_seen.setdefault(guid, now)
            n += t is not None and bool(t["cell_id"] or t["failed"])
        if progress is not None:
            progress(n, total)
        return n >= total

    timed_out = not await _until(watcher, settled, deadline, bool(task_guids))
    seconds = time.time() - started
    after = await _idle_stats(client, cluster.auctioneer_url)
    await watcher.relist(bool(task_guids))
    return _outcome(the_plan, strategy, cluster.transport, watcher, expected, prefill_keys, task_seen,
                    started, seconds, before, after, timeout if timed_out else None)


def _outcome(the_plan: Plan, strategy: str, transport: str, watcher: Watcher, expected: set[tuple[str, int]],
             prefill_keys: set[tuple[str, int]], task_seen: dict[str, float], started: float, seconds: float,
             before: dict[str, Any], after: dict[str, Any], timed_out_after: float | None) -> Outcome:
    outcome = Outcome(strategy=strategy, transport=transport, seconds=seconds,
                      rounds=after["auctions"] - before["auctions"], notes=list(the_plan.notes),
                      prefill_keys=prefill_keys)
    for source in ("requests_made", "messages"):
        for kind, n in (after.get(source) or {}).items():
            delta = n - (before.get(source) or {}).get(kind, 0)
            if delta:
                outcome.communications[kind] = delta
    late = "not placed within the timeout" if timed_out_after is not None else ""
    for key, a in watcher.actuals.items():
        if a["cell_id"] and a["state"] in ("CLAIMED", "RUNNING"):
            cell_id = the_plan.scenario_id.get(a["cell_id"], a["cell_id"])
            outcome.instances.append((key[0], key[1], cell_id, the_plan.memory.get(key[0], 0)))
        if key not in expected:
            continue
        if a["state"] == "RUNNING":
            outcome.waits.append(max(0.0, _epoch(a["since"]) - started))
        else:
            outcome.failures.append(_failure({"process_guid": key[0], "index": key[1]},
                                             a["placement_error"] or late or a["state"]))
    for key in sorted(expected - set(watcher.actuals)):
        outcome.failures.append(_failure({"process_guid": key[0], "index": key[1]}, late or "no actual LRP"))
    memory_of_task = {t["task_guid"]: t["memory_mb"] for t in the_plan.tasks}
    for guid in memory_of_task:
        t = watcher.tasks.get(guid)
        if t is not None and t["cell_id"]:
            outcome.tasks.append(
                (guid, the_plan.scenario_id.get(t["cell_id"], t["cell_id"]), memory_of_task[guid])
            )
            outcome.waits.append(max(0.0, task_seen.get(guid, started + seconds) - started))
        else:
            reason = (t or {}).get("failure_reason") or late or "pending"
            outcome.failures.append(_failure({"task_guid": guid}, reason))
    if timed_out_after is not None:
        outcome.notes.append(
            f"stopped waiting after {timed_out_after:g} s with work neither placed nor failed"
        )
    return outcome


def _failure(item: dict[str, Any], message: str) -> dict[str, Any]:
    """The BBS keeps `<error> — <detail>` (bbs/operations/auctions.py placement_message): split it back."""
    error, _, detail = message.partition(" — ")
    return {**item, "error": error, "detail": detail}


def run_cluster(sim: SimInput, strategy: str, transport: str, engine: str = "fast", timeout: float = 300.0,
                progress: Progress | None = None, the_plan: Plan | None = None) -> Outcome:
    """One strategy on a fresh cluster; the cluster is gone when this returns (or raises)."""
    the_plan = the_plan or plan(sim)
    sim_reps = [g.sim_rep() for g in the_plan.groups]
    with tempfile.TemporaryDirectory(prefix="vendue-sim-", ignore_cleanup_errors=True) as tmp:
        cluster = LocalCluster(Path(tmp), sim_reps=sim_reps, transport=transport,
                               auctioneer_args=["--strategy", strategy, "--engine", engine])
        try:
            cluster.start(timeout=max(60.0, 10.0 * len(the_plan.groups)))
            return asyncio.run(_drive(cluster, the_plan, strategy, timeout, progress))
        except httpx.HTTPError as exc:
            raise ClusterRunError(f"talking to the cluster: {type(exc).__name__}: {exc}") from None
        finally:
            with contextlib.suppress(Exception):
                cluster.stop()
