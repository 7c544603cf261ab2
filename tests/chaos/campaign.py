"""The chaos campaign: show that nothing the BBS acknowledged is lost and nothing runs twice.

    python tests/chaos/campaign.py --minutes M --seed S [--transport http|nats]

On the multi-host cluster (tests/cluster/multihost.py: a control host with both BBS replicas on
PostgreSQL, both auctioneers and NATS on transport nats; a host per rep, the process executor, TLS on):
- a workload (workload.py, seeded) desires, scales and deletes apps and runs tasks, and writes every write
  and its outcome in a ledger (ledger.py: acknowledged, refused, not sent, unknown);
- a fault injector (faults.py, seeded) does one fault at a time: a quiet period, the fault (kill -9 and
  restart of a component, SIGSTOP/SIGCONT, a cell's or the control host's link down, a restart of the
  whole control plane), its heal, then, the workload paused, the wait for the checker to see the cluster
  repaired (its repair time);
- an independent checker (checker.py) reads the BBS and the real processes on every host twice a second
  and records lost writes, duplicates, processes not desired and what became of every task.
After the last fault the workload stops and the campaign waits for the cluster to settle (every desired
index RUNNING once, every task COMPLETED), checks once more, counts the tasks' marker files, and tears the
cluster down: any process left on a host then is a finding too.

Prints ONE JSON object (the settings, faults by kind, repair times, duplicates, writes lost, tasks run
twice, leftovers, the findings) and exits 1 when there is a finding, 2 on bad arguments, 3 where it cannot
run (not root, no `ip`). Importable: `run_campaign(Settings(...))` returns the same object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deploy.cluster import ClusterError  # noqa: E402
from tests.chaos.checker import TICK_S, Checker  # noqa: E402
from tests.chaos.faults import KINDS, Fault, inject, plan, targets  # noqa: E402
from tests.chaos.invariants import Problem  # noqa: E402
from tests.chaos.ledger import Ledger  # noqa: E402
from tests.chaos.report import fault_rows, read_markers, repairs, tasks  # noqa: E402
from tests.chaos.workload import Workload  # noqa: E402
from tests.cluster.multihost import MultiHostCluster, unavailable_reason  # noqa: E402
from tests.e2e.conftest import Unmet, expect, proc_environ, rep_state, wait_for  # noqa: E402

EXIT_FINDINGS, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3
# A fault is not started with less than this left of the campaign: its hold and repair would overrun it.
LAST_FAULT_MARGIN_S = 10.0


@dataclass(frozen=True)
class Settings:
    minutes: float
    seed: int
    transport: str = "http"
    cells: int = 3
    presence_ttl_s: float = 3.0
    convergence_interval_s: float = 1.0
    lease_ttl_s: float = 3.0
    stale_unclaimed_s: float = 5.0  # re-auction unclaimed work after: short, to meet late claims
    kick_task_s: float = 5.0
    cell_loss_grace_s: float = 3.0  # keep-replicas apps: a cell cut off past TTL + this is checked, then left
    start_allowance_s: float = 5.0  # for an instance or a restarted component to start
    quiet_s: tuple[float, float] = (1.0, 3.0)  # between a repair and the next fault, drawn uniformly
    repair_timeout_s: float = 30.0  # past it a fault counts as unrepaired and the next one comes
    final_timeout_s: float = 40.0  # for the cluster to settle after the last fault
    faults: tuple[str, ...] = tuple(KINDS)  # the kinds of fault to inject

    def __post_init__(self) -> None:
        unknown = sorted(set(self.faults) - set(KINDS))
        if unknown or not self.faults:
            raise ValueError(f"faults: some of {', '.join(KINDS)}, got {', '.join(unknown or ['none'])}")
        if self.minutes <= 0:
            raise ValueError(f"minutes: more than 0, got {self.minutes}")
        if self.transport not in ("http", "nats"):
            raise ValueError(f"transport: http or nats, got {self.transport!r}")

    @property
    def stable_s(self) -> float:
        """Repaired means so for this long: what a heal sets off (a cell's reports, a convergence pass) is
        over by then."""
        return self.presence_ttl_s + self.convergence_interval_s

    @property
    def repair_deadline_s(self) -> float:
        """After a heal, the invariants must hold again within this: presence TTL (a rep back from a
        partition learns what was replaced) + a convergence interval + the start time."""
        return self.presence_ttl_s + self.convergence_interval_s + self.start_allowance_s

    @property
    def repair_target_s(self) -> float:
        """Every fault's repair should take at most this (docs/chaos.md, "Repair target"): presence TTL + 5 s,
        the time a kill -9 of any one component may cost (bbs/operations/convergence.py, "In flight")."""
        return self.presence_ttl_s + 5.0

    def bbs_args(self) -> list[str]:
        return ["--presence-ttl", str(self.presence_ttl_s), "--convergence-interval",
                str(self.convergence_interval_s), "--lease-ttl", str(self.lease_ttl_s),
                "--stale-unclaimed", str(self.stale_unclaimed_s), "--kick-task", str(self.kick_task_s),
                "--cell-loss-grace", str(self.cell_loss_grace_s),
                # Completed tasks stay to the end: the checker must find every one.
                "--expire-completed-task", str(self.minutes * 60 + 3600)]

    def auctioneer_args(self) -> list[str]:
        return ["--lease-ttl", str(self.lease_ttl_s)]

    def rep_args(self) -> list[str]:
        return ["--presence-ttl", str(self.presence_ttl_s)]

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "repair_deadline_s": self.repair_deadline_s, "stable_s": self.stable_s,
                "repair_target_s": self.repair_target_s}


class CampaignUnavailable(RuntimeError):
    """Network namespaces cannot be made here (the reason)."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_campaign(settings: Settings, progress: Callable[[str], None] = log,
                 keep_logs: Path | None = None) -> dict[str, Any]:
    """The campaign; its report. `keep_logs`: a directory to copy every component's log to before the
    teardown removes them."""
    if (reason := unavailable_reason()) is not None:
        raise CampaignUnavailable(reason)
    fault_rng, workload_rng = (
        random.Random(f"faults-{settings.seed}"),
        random.Random(f"workload-{settings.seed}"),
    )
    prefix = f"c{settings.seed}-{secrets.token_hex(2)}"  # of every guid: leftovers are traced to this run
    cluster = MultiHostCluster(
        cells=settings.cells,
        transport=settings.transport,
        bbs_args=settings.bbs_args(),
        auctioneer_args=settings.auctioneer_args(),
        rep_args=settings.rep_args(),
    )
    ledger = Ledger()
    faults: list[Fault] = []
    stop_workload, stop_checker = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    checker: Checker | None = None
    workload: Workload | None = None
    report: dict[str, Any] = {
        "seed": settings.seed,
        "transport": settings.transport,
        "settings": settings.as_json(),
    }
    started = time.monotonic()
    try:
        cluster.start(timeout=120.0)
        progress(f"cluster up in {time.monotonic() - started:.1f}s on {cluster.network.subnet}: "
                 f"{', '.join(cluster.hosts)}; {cluster.isolation_summary()}")
        markers_dir = cluster.data_dir / "task-markers"
        markers_dir.mkdir()
        markers_dir.chmod(0o777)  # every app's uid writes its marker there (rep/isolation.py)
        checker = Checker(cluster, ledger, settings.repair_deadline_s, settings.stable_s)
        workload = Workload(cluster.bbs_urls, cluster.verify, ledger, workload_rng, markers_dir, prefix)
        threads = [threading.Thread(target=checker.run, args=(stop_checker,), name="checker", daemon=True),
                   threading.Thread(target=workload.run, args=(stop_workload,), name="workload", daemon=True)]
        for thread in threads:
            thread.start()
        began = time.monotonic()
        end = began + settings.minutes * 60
        while True:
            quiet = fault_rng.uniform(*settings.quiet_s)
            if time.monotonic() + quiet + LAST_FAULT_MARGIN_S > end:
                break
            time.sleep(quiet)  # the quiet period's length, with the workload writing: not a synchronisation
            fault = plan(
                fault_rng, {kind: hit for kind, hit in targets(cluster).items() if kind in settings.faults}
            )
            faults.append(fault)
            checker.fault_started()
            try:
                inject(cluster, fault)
            except ClusterError as exc:  # a component that does not start again: nothing more to learn
                report["aborted"] = f"{fault.kind} {fault.target}: {exc}"
                progress(f"aborted: {report['aborted']}")
                break
            finally:
                checker.fault_healed(fault.healed or time.monotonic())
            with workload.paused():
                fault.repaired = checker.wait_repaired(settings.repair_timeout_s)
                if fault.repaired is None:
                    problem = checker.last.problem if checker.last else None
                    fault.unrepaired, fault.diagnosis = (
                        str(problem or "?"),
                        diagnose(cluster, checker, problem),
                    )
            progress(_describe(fault, began))
        stop_workload.set()
        threads[1].join(timeout=30.0)
        stop_checker.set()
        threads[0].join(timeout=30.0)
        settled = _settle(checker, ledger, settings.final_timeout_s)  # nothing in flight: the ledger is final
        final = checker.last or checker.observe()
        runs = read_markers(markers_dir)
        report |= _summary(settings, began, faults, ledger, checker, runs, final.problem, settled)
        if final.problem is not None:
            report["final"]["diagnosis"] = diagnose(cluster, checker, final.problem)
    finally:
        stop_workload.set()
        stop_checker.set()
        for thread in threads:
            thread.join(timeout=30.0)
        if workload is not None:
            workload.close()
        if checker is not None:
            checker.bbs.close()
        if keep_logs is not None and cluster.logs_dir.is_dir():
            shutil.copytree(cluster.logs_dir, keep_logs, dirs_exist_ok=True)
            report["logs"] = str(keep_logs)
        leftovers = cluster.close()
        strays = _kill_strays(prefix)
    report["leftover_processes"] = {"count": len(leftovers) + len(strays), "killed_at_teardown": leftovers,
                                    "strays": strays}
    report["duration_s"] = round(time.monotonic() - started, 1)
    findings = _findings(report)
    report["findings"], report["ok"] = findings, not findings
    return report


def _describe(fault: Fault, began: float) -> str:
    at = (fault.started or began) - began
    outcome = (
        f"repaired {fault.repaired - fault.healed:.2f}s after the heal"
        if fault.repaired is not None and fault.healed is not None
        else f"NOT repaired: {fault.unrepaired}"
    )
    return f"[{at:6.1f}s] {fault.kind} {fault.target} held {fault.hold_s:.2f}s: {outcome}"


def _settle(checker: Checker, ledger: Ledger, timeout: float) -> str:
    """Observe (the checker's thread stopped) until the cluster is repaired for the checker's `stable_s` and
    every acknowledged task COMPLETED; "" or what was seen last."""
    created = {w.guid for w in ledger.snapshot() if w.kind == "task" and w.outcome == "acknowledged"}

    def settled() -> bool:
        last = checker.observe()
        if last.problem is not None or not checker.stable():
            raise Unmet(str(last.problem or f"repaired for less than {checker.stable_s:g}s"))
        open_tasks = sorted(g for g in created if checker.tasks.get(g) is None
                            or checker.tasks[g].last.get("state") != "COMPLETED")
        return bool(expect(not open_tasks, f"{len(open_tasks)} tasks not COMPLETED: {open_tasks[:5]}"))

    try:
        wait_for(settled, timeout, "the cluster repaired and every task COMPLETED", interval=TICK_S)
    except AssertionError as exc:
        return str(exc)
    return ""


def diagnose(cluster: MultiHostCluster, checker: Checker, problem: Problem | None) -> dict[str, Any]:
    """What the BBS, each rep (its /state) and the hosts said of the index a problem is about."""
    if problem is None or problem.key is None or checker.last is None:
        return {}
    guid, index = problem.key
    view = checker.last.view
    reps: dict[str, Any] = {}
    for cell_id, rep in cluster.reps.items():
        try:
            lrps = rep_state(rep.url, cell_id, cluster.verify)["lrps"]
        except (httpx.HTTPError, OSError, ValueError) as exc:
            reps[cell_id] = f"{type(exc).__name__}: {exc}"
            continue
        reps[cell_id] = [lrp for lrp in lrps if (lrp["process_guid"], lrp["index"]) == problem.key]
    return {
        "records": [
            a for a in (view.actuals if view else []) if (a["process_guid"], a["index"]) == problem.key
        ],
        "desired_instances": view.desired.get(guid) if view else None,
        "reps": reps,
        "processes": [asdict(p) for p in checker.last.processes if p.instance == (guid, index)],
    }


def _summary(settings: Settings, began: float, faults: list[Fault], ledger: Ledger, checker: Checker,
             runs: dict[str, list[str]], final_problem: Problem | None, settled: str) -> dict[str, Any]:
    by_kind: dict[str, int] = {}
    for fault in faults:
        by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1
    for episodes in (*checker.duplicates.values(), checker.undesired):
        episodes.close_all()
    duplicates = {source: episodes.summary(began) for source, episodes in checker.duplicates.items()}
    task_report = tasks(ledger.snapshot(), checker.tasks, runs)
    return {
        "faults": {"injected": len(faults), "by_kind": by_kind, "list": fault_rows(faults, began)},
        "repair_s": repairs(faults, settings.repair_target_s),
        "duplicates": {  # past the repair deadline: the findings
            "count": sum(d["unhealed"]["count"] for d in duplicates.values()),
            "longest_s": max(d["unhealed"]["longest_s"] for d in duplicates.values()),
            # every episode, during the faults and their repair too (what a fault costs, Diego's semantics)
            "seen": {"count": sum(d["count"] for d in duplicates.values()),
                     "longest_s": max(d["longest_s"] for d in duplicates.values())},
            "by_source": duplicates,  # "bbs": two RUNNING records for an index; "real": two process trees
        },
        "undesired_processes": checker.undesired.summary(began),
        "writes": ledger.counts(),
        "writes_lost": len(checker.lost),
        "writes_lost_detail": checker.lost,
        "tasks_run_twice": len(task_report["run_twice"]),
        "tasks": task_report,
        "final": {"repaired": final_problem is None, "problem": final_problem and str(final_problem),
                  "settle": settled or "ok"},
        "observations": {"count": checker.observations, "bbs_unreachable": checker.unreachable},
    }


def _kill_strays(prefix: str) -> list[int]:
    """Processes of this run's apps or tasks anywhere on the machine after the teardown (none expected):
    killed, and returned."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            env = proc_environ(int(entry))
            if any(env.get(name, "").startswith(prefix) for name in ("PROCESS_GUID", "TASK_GUID")):
                found.append(int(entry))
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return found


def _findings(report: dict[str, Any]) -> list[str]:
    """Every broken promise, one line each (empty: none)."""
    found = [f"aborted: {report['aborted']}"] if "aborted" in report else []
    if "faults" not in report:
        return [*found, "the campaign did not finish"]
    if report["writes_lost"]:
        found.append(f"{report['writes_lost']} acknowledged writes lost: {report['writes_lost_detail']}")
    task_report = report["tasks"]
    for name, what in (
        ("run_twice", "tasks whose command ran twice"),
        ("completed_twice", "tasks COMPLETED twice"),
        ("never_completed", "acknowledged tasks never COMPLETED"),
        ("succeeded_without_running", "tasks that succeeded without their command running"),
        ("ran_but_never_created", "tasks the BBS refused whose command ran"),
    ):
        if task_report[name]:
            found.append(f"{len(task_report[name])} {what}: {task_report[name][:10]}")
    if report["duplicates"]["count"]:
        found.append(f"{report['duplicates']['count']} duplicates past the repair deadline (longest "
                     f"{report['duplicates']['longest_s']}s)")
    if report["undesired_processes"]["unhealed"]["count"]:
        found.append(f"{report['undesired_processes']['unhealed']['count']} processes of indices not desired "
                     "past the repair deadline")
    if unrepaired := [f for f in report["faults"]["list"] if f["repair_s"] is None]:
        found.append(
            f"{len(unrepaired)} faults not repaired within {report['settings']['repair_timeout_s']:g}s "
            f"of their heal: {[(f['kind'], f['target'], f.get('unrepaired')) for f in unrepaired]}"
        )
    if not report["final"]["repaired"]:
        found.append(f"not repaired at the end: {report['final']['problem']}")
    leftovers = report["leftover_processes"]
    if leftovers["count"]:
        found.append(f"processes left after the teardown: {leftovers}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, required=True, help="how long faults are injected")
    parser.add_argument("--seed", type=int, required=True, help="fixes the choice of faults and writes")
    parser.add_argument("--transport", choices=("http", "nats"), default="http")
    parser.add_argument("--keep-logs", type=Path, help="copy every component's log here before the teardown")
    parser.add_argument(
        "--faults",
        default=",".join(KINDS),
        help=f"the kinds of fault to inject, comma-separated (default: all: {','.join(KINDS)})",
    )
    args = parser.parse_args(argv)
    try:
        settings = Settings(args.minutes, args.seed, args.transport,
                            faults=tuple(kind.strip() for kind in args.faults.split(",") if kind.strip()))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # A SIGTERM (a timeout's) unwinds like Ctrl-C: the teardown runs, nothing is left on the hosts.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        report = run_campaign(settings, keep_logs=args.keep_logs)
    except CampaignUnavailable as exc:
        print(f"error: the campaign cannot run here: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else EXIT_FINDINGS


if __name__ == "__main__":
    sys.exit(main())
