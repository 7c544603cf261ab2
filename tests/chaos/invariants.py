"""What must hold of one observation (observe.py), as pure functions: the checker decides when each must.

Keys are (process_guid, index); the values say what was seen, for the report.
- `bbs_duplicates`: an index with two RUNNING records at once (any presence: a SUSPECT and its replacement
  too: Diego allows that only while the suspect's cell is cut off).
- `real_duplicates`: an index with two process trees at once, on one host or two (a tree: the processes of
  one instance guid on one host; an instance may fork).
- `undesired_processes`: a process for an app that is not desired, or for an index past its instances.
- `convergence_problem`: None when the cluster is repaired: every cell present; every desired index RUNNING
  exactly once, ORDINARY, and no other record; and on the hosts exactly one tree per desired index, the
  one the BBS names (its cell, its instance guid), and nothing else. Else the first thing wrong, and the
  index it is about (when it is about one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .observe import BBSView, RealProcess

Key = tuple[str, int]


@dataclass(frozen=True)
class Problem:
    text: str
    key: Key | None = None

    def __str__(self) -> str:
        return self.text


def bbs_duplicates(view: BBSView) -> dict[Key, str]:
    running: dict[Key, list[str]] = {}
    for actual in view.actuals:
        if actual["state"] == "RUNNING":
            guid = (actual.get("instance_guid") or "")[:8]
            running.setdefault((actual["process_guid"], actual["index"]), []).append(
                f"{actual.get('presence', '?')}@{actual.get('cell_id')}({guid})"
            )
    return {key: "RUNNING " + ", ".join(sorted(rows)) for key, rows in running.items() if len(rows) > 1}


def trees(processes: Iterable[RealProcess]) -> dict[Key, dict[tuple[str, str], list[int]]]:
    """(process_guid, index) -> (host, instance guid) -> pids."""
    found: dict[Key, dict[tuple[str, str], list[int]]] = {}
    for process in processes:
        if process.instance is not None:
            found.setdefault(process.instance, {}).setdefault(
                (process.host, process.instance_guid), []
            ).append(process.pid)
    return found


def _render(by_tree: dict[tuple[str, str], list[int]]) -> str:
    return ", ".join(
        f"{host}({guid[:8]}) pids {sorted(pids)}" for (host, guid), pids in sorted(by_tree.items())
    )


def real_duplicates(processes: Iterable[RealProcess]) -> dict[Key, str]:
    return {
        key: "processes " + _render(by_tree) for key, by_tree in trees(processes).items() if len(by_tree) > 1
    }


def undesired_processes(view: BBSView, processes: Iterable[RealProcess]) -> dict[Key, str]:
    return {(guid, index): ("not desired" if guid not in view.desired else
                            f"index past its {view.desired[guid]} instances") + ": " + _render(by_tree)
            for (guid, index), by_tree in trees(processes).items()
            if guid not in view.desired or index >= view.desired[guid]}


def convergence_problem(view: BBSView | None, processes: Iterable[RealProcess],
                        cells: Iterable[str]) -> Problem | None:
    if view is None:
        return Problem("no BBS replica answers")
    if missing := sorted(set(cells) - view.cells):
        return Problem(f"cells not present: {missing}")
    records: dict[Key, list[dict]] = {}
    for actual in view.actuals:
        records.setdefault((actual["process_guid"], actual["index"]), []).append(actual)
    expected: dict[Key, tuple[str, str]] = {}
    for guid, instances in sorted(view.desired.items()):
        for index in range(instances):
            rows = records.pop((guid, index), [])
            if len(rows) != 1 or rows[0]["state"] != "RUNNING" or rows[0].get("presence") != "ORDINARY":
                shown = [f"{a['state']}/{a.get('presence')}@{a.get('cell_id')}" for a in rows]
                return Problem(f"{guid}[{index}]: expected one RUNNING ORDINARY record, the BBS shows "
                               f"{shown or 'none'}", (guid, index))
            expected[(guid, index)] = (rows[0]["cell_id"], rows[0]["instance_guid"])
    if records:
        key, rows = sorted(records.items())[0]
        return Problem(f"{key[0]}[{key[1]}] is not desired, the BBS shows {[a['state'] for a in rows]}", key)
    running = trees(processes)
    for key, (cell_id, instance_guid) in sorted(expected.items()):
        by_tree = running.pop(key, {})
        if set(by_tree) != {(cell_id, instance_guid)}:
            return Problem(f"{key[0]}[{key[1]}]: the BBS names {cell_id}({instance_guid[:8]}), the hosts run "
                           f"{_render(by_tree) or 'nothing'}", key)
    if running:
        key, by_tree = sorted(running.items())[0]
        return Problem(f"{key[0]}[{key[1]}] runs but is not desired: {_render(by_tree)}", key)
    return None
