"""The campaign's independent checker: it reads the BBS (as the admin) and the real processes on every host
(observe.py) every TICK_S, in a thread of its own, and keeps what it found.

    checker = Checker(cluster, ledger, repair_deadline_s=9.0, stable_s=4.0)
    threading.Thread(target=checker.run, args=(stop,)).start()
    checker.fault_started(); ...; checker.fault_healed(at)      # from the fault injector
    checker.wait_repaired(timeout)                             # -> when the cluster was repaired

What it asserts, continuously:
- every write the BBS acknowledged is there (ledger.py): at every read, against what the ledger accepted
  both before and after the read (a write that completes meanwhile is not required in it);
- no index has two RUNNING records, nor two process trees on the hosts, and no process runs for an index
  that is not desired (invariants.py), once it must be so: past the repair deadline of the last fault (its
  heal + presence TTL + convergence interval + start time) and past that long after the last write to
  that app (the workload's own) or the last change the checker saw of its instances (a write of unknown
  outcome committed late). Before that they are what the fault costs (episodes.py: the unhealed ones are
  the findings);
- every task is COMPLETED at most once (entered COMPLETED and left it: that is twice), and the processes of
  one task never run on two hosts at once.
Whether the cluster is repaired (invariants.convergence_problem) is asked of every observation. Repaired
after a heal means from an observation on, for `stable_s` (presence TTL + convergence interval): a moment
that looks right while the reps' reports of the heal are still on their way (an instance refused, stopped
and placed again a second later) is not a repair.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .episodes import Episodes
from .invariants import Problem, bbs_duplicates, convergence_problem, real_duplicates, undesired_processes
from .ledger import Ledger, Write, expectations_of, missing_writes
from .observe import BBSReader, BBSView, RealProcess, host_processes

TICK_S = 0.5


@dataclass
class TaskHistory:
    states: list[str] = field(default_factory=list)  # the states seen ("RUNNING@cell-1"), each change once
    completions: int = 0  # times it was seen entering COMPLETED
    hosts_at_once: int = 0  # most hosts seen running it at one observation
    last: dict[str, Any] = field(default_factory=dict)

    def see(self, task: dict[str, Any]) -> None:
        state = task["state"]
        if self.last.get("state") != state and state == "COMPLETED":
            self.completions += 1
        shown = f"{state}@{task['cell_id']}" if task.get("cell_id") else state
        if not self.states or self.states[-1] != shown:
            self.states.append(shown)
        self.last = task


@dataclass
class Observation:
    at: float
    view: BBSView | None
    processes: list[RealProcess]
    problem: Problem | None  # convergence_problem


class Checker:
    def __init__(self, cluster: Any, ledger: Ledger, repair_deadline_s: float, stable_s: float,
                 tick_s: float = TICK_S) -> None:
        self.cluster = cluster  # a MultiHostCluster: hosts, host_pids, bbs_urls, verify, reps
        self.ledger = ledger
        self.repair_deadline_s = repair_deadline_s
        self.stable_s = stable_s
        self.tick_s = tick_s
        self.bbs = BBSReader(cluster.bbs_urls, cluster.verify)
        self.cells = sorted(cluster.reps)
        self.duplicates = {"bbs": Episodes("bbs_duplicate"), "real": Episodes("real_duplicate")}
        self.undesired = Episodes("undesired_process")
        self.lost: dict[str, str] = {}  # guid -> what the BBS showed instead of its acknowledged write
        self.tasks: dict[str, TaskHistory] = {}
        self.observations = 0
        self.unreachable = 0  # observations at which no BBS replica answered
        self.last: Observation | None = None
        self._lock = threading.Lock()
        self._fault_active = False
        self._due_from = 0.0  # time.monotonic() from which the invariants must hold
        self._healed_at: float | None = None  # the heal whose repair is awaited
        self._repaired = threading.Event()
        self._repaired_at: float | None = None
        self._stable_since: float | None = None  # the first of the observations seeing it repaired since
        self._desired_seen: dict[str, int | None] = {}
        self._desired_changed: dict[str, float] = {}

    # --- from the fault injector ------------------------------------------------------------------

    def fault_started(self) -> None:
        with self._lock:
            self._fault_active = True
            self._healed_at = None
            self._repaired.clear()

    def fault_healed(self, at: float) -> None:
        with self._lock:
            self._fault_active = False
            self._due_from = at + self.repair_deadline_s
            self._healed_at, self._repaired_at, self._stable_since = at, None, None
            self._repaired.clear()

    def wait_repaired(self, timeout: float) -> float | None:
        """When the cluster was repaired after the last heal: the first of the observations that saw it so for
        `stable_s` after it (None: not within `timeout`)."""
        if not self._repaired.wait(timeout):
            return None
        return self._repaired_at

    # --- observing --------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            self.observe()
            stop.wait(max(0.0, self.tick_s - (time.monotonic() - started)))  # the checker's pace

    def observe(self) -> Observation:
        before = self.ledger.snapshot()
        at = time.monotonic()
        view = self.bbs.read()
        processes = host_processes(self.cluster)
        after = self.ledger.snapshot()
        observation = Observation(at, view, processes, convergence_problem(view, processes, self.cells))
        self.observations += 1
        self.last = observation
        self._check(observation, before, after)
        with self._lock:
            if observation.problem is not None:
                self._stable_since = None
            elif self._stable_since is None and (self._healed_at is None or at >= self._healed_at):
                self._stable_since = at
            if self._healed_at is not None and self.stable() and self._repaired_at is None:
                self._repaired_at = self._stable_since
                self._repaired.set()
        return observation

    def stable(self) -> bool:
        """Whether the observations have seen the cluster repaired for `stable_s`, up to the last one."""
        return (self._stable_since is not None and self.last is not None
                and self.last.at - self._stable_since >= self.stable_s)

    def _check(self, observation: Observation, before: list[Write], after: list[Write]) -> None:
        at, view, processes = observation.at, observation.view, observation.processes
        last_write = _last_write_at(after)
        with self._lock:
            settled = not self._fault_active and at >= self._due_from

        def due(key: tuple[str, int]) -> bool:
            guid = key[0]
            quiet_since = max(last_write.get(guid, 0.0), self._desired_changed.get(guid, 0.0))
            return settled and at >= quiet_since + self.repair_deadline_s

        self.duplicates["real"].update(at, real_duplicates(processes), due)
        self._check_tasks_on_hosts(processes)
        if view is None:
            self.unreachable += 1
            return
        self._note_desired(at, view)
        self.duplicates["bbs"].update(at, bbs_duplicates(view), due)
        self.undesired.update(at, undesired_processes(view, processes), due)
        for task_guid, task in view.tasks.items():
            self.tasks.setdefault(task_guid, TaskHistory()).see(task)
        self.check_writes(view, before, after)

    def check_writes(self, view: BBSView, before: list[Write], after: list[Write]) -> None:
        """Record every guid whose state in `view` neither the ledger before the read nor after accepts."""
        shown_tasks = set(view.tasks)
        wrong_before = missing_writes(expectations_of(before), view.desired, shown_tasks)
        wrong_after = missing_writes(expectations_of(after), view.desired, shown_tasks)
        for guid in wrong_before.keys() & wrong_after.keys():
            self.lost.setdefault(guid, wrong_before[guid])

    def _note_desired(self, at: float, view: BBSView) -> None:
        for guid in set(self._desired_seen) | set(view.desired):
            instances = view.desired.get(guid)
            if self._desired_seen.get(guid) != instances:
                self._desired_seen[guid] = instances
                self._desired_changed[guid] = at

    def _check_tasks_on_hosts(self, processes: list[RealProcess]) -> None:
        hosts: dict[str, set[str]] = {}
        for process in processes:
            if process.task_guid:
                hosts.setdefault(process.task_guid, set()).add(process.host)
        for task_guid, on in hosts.items():
            history = self.tasks.setdefault(task_guid, TaskHistory())
            history.hosts_at_once = max(history.hosts_at_once, len(on))


def _last_write_at(writes: list[Write]) -> dict[str, float]:
    """guid -> the last moment a write to it was under way (its end, or now when in flight)."""
    now = time.monotonic()
    last: dict[str, float] = {}
    for write in writes:
        last[write.guid] = max(last.get(write.guid, 0.0), write.ended if write.ended is not None else now)
    return last
