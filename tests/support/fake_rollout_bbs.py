"""An in-memory stand-in for the BBS client's app and rollout methods (deploy/bbs_client.py, the contract of
PUT /v1/desired_lrps/{guid} and its rollouts), for the CLI's unit tests: no process, no HTTP.

A PUT of a different definition makes a new version and a rollout, which advances one instance per
get_rollout() to `completed`, or, for a definition whose command is in `failing`, to `rolled_back` with
`FAIL_REASON` (through `rolling_back`). Every call is recorded in `calls`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from common.models import DesiredLRP, DesiredLRPCreate, Task, TaskCreate

FAIL_REASON = "instance 0 crashed: exited with status 1"
NOT_DEFINITION = {"process_guid", "instances", "on_cell_loss"}


def _now() -> str:
    return datetime.now(UTC).isoformat()


class FakeBBS:
    def __init__(self) -> None:
        self.apps: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, list[dict[str, Any]]] = {}
        self.rollouts: dict[str, list[dict[str, Any]]] = {}
        self.tasks: dict[str, dict[str, Any]] = {}
        self.failing: set[tuple[str, ...]] = set()
        self.blobs: dict[str, bytes] = {}
        self.calls: list[tuple[str, str]] = []
        self._tick = 0

    # --- helpers for tests ---------------------------------------------------------------------

    def add_app(self, lrp: DesiredLRPCreate) -> None:
        self.desire_lrp(lrp)
        self.calls.clear()

    def version(self, guid: str) -> int:
        return int(self.apps[guid]["version"])

    def writes(self) -> list[tuple[str, str]]:
        reads = ("get", "list", "get_rollout", "task", "blob_size")
        return [call for call in self.calls if call[0] not in reads]

    def _stamp(self) -> str:
        self._tick += 1  # distinct started_at per rollout, even within one clock tick
        return f"2026-01-01T00:00:{self._tick:02d}+00:00"

    # --- the client's methods ------------------------------------------------------------------

    def blob_size(self, digest: str) -> int | None:
        self.calls.append(("blob_size", digest))
        held = self.blobs.get(digest)
        return None if held is None else len(held)

    def upload_blob(self, digest: str, chunks: Iterator[bytes], size: int) -> None:
        self.calls.append(("upload_blob", digest))
        self.blobs[digest] = b"".join(chunks)
        assert len(self.blobs[digest]) == size

    def desired_lrps(self) -> list[DesiredLRP]:
        self.calls.append(("list", ""))
        return [DesiredLRP.model_validate(app) for app in self.apps.values()]

    def desired_lrp(self, guid: str) -> DesiredLRP:
        self.calls.append(("get", guid))
        from deploy.bbs_client import NotFound as ClientNotFound

        if guid not in self.apps:
            raise ClientNotFound(f"GET /v1/desired_lrps/{guid}: 404", 404)
        return DesiredLRP.model_validate(self.apps[guid])

    def desire_lrp(self, lrp: DesiredLRPCreate) -> DesiredLRP:
        from deploy.bbs_client import Conflict

        self.calls.append(("create", lrp.process_guid))
        if lrp.process_guid in self.apps:
            raise Conflict(f"POST /v1/desired_lrps: 409 {lrp.process_guid} exists", 409)
        wire = {**lrp.model_dump(mode="json"), "created_at": _now(),
                "modification_tag": {"epoch": "e", "index": 0}, "version": 1}
        self.apps[lrp.process_guid] = wire
        self.versions[lrp.process_guid] = [dict(wire)]
        return DesiredLRP.model_validate(wire)

    def update_desired_lrp(self, guid: str, update: Any) -> DesiredLRP:
        self.calls.append(("scale", guid))
        self.apps[guid].update(update.model_dump(mode="json", exclude_none=True))
        return DesiredLRP.model_validate(self.apps[guid])

    def replace_desired_lrp(self, guid: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("put", guid))
        body = dict(body)
        strategy = body.pop("rollout", None) or {}
        current = self.apps[guid]
        wanted = DesiredLRPCreate.model_validate(body).model_dump(mode="json")
        same = all(current.get(k) == v for k, v in wanted.items() if k not in NOT_DEFINITION)
        current.update({k: wanted[k] for k in ("instances", "on_cell_loss")})
        if same:
            return {"desired_lrp": current, "new_version": False, "rollout": None}
        previous = current["version"]
        current.update(wanted)
        current["version"] = previous + 1
        self.versions[guid].append(dict(current))
        rollout = self._start(guid, "update", previous, previous + 1, strategy,
                              failing=tuple(wanted["command"]) in self.failing)
        return {"desired_lrp": current, "new_version": True, "rollout": rollout}

    def _start(self, guid: str, kind: str, start: int, to: int, strategy: dict[str, Any],
               failing: bool = False) -> dict[str, Any]:
        stamp = self._stamp()
        rollout = {"process_guid": guid, "kind": kind, "from_version": start, "to_version": to,
                   "state": "running", "done": 0, "total": self.apps[guid]["instances"],
                   "max_in_flight": strategy.get("max_in_flight", 1) if isinstance(
                       strategy.get("max_in_flight", 1), int) else 1,
                   "auto_revert": strategy.get("auto_revert", True), "canary": strategy.get("canary", False),
                   "reason": None, "started_at": stamp, "updated_at": stamp, "finished_at": None,
                   "_failing": failing}
        self.rollouts.setdefault(guid, []).insert(0, rollout)
        return self._public(rollout)

    @staticmethod
    def _public(rollout: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in rollout.items() if not k.startswith("_")}

    def _advance(self, rollout: dict[str, Any]) -> None:
        if rollout["state"] == "running":
            if rollout["_failing"]:
                state = "rolling_back" if rollout["auto_revert"] else "paused"
                rollout.update(state=state, reason=FAIL_REASON)
            elif rollout["canary"] and rollout["done"] == 0:
                rollout.update(done=1, state="paused", reason="canary")
            else:
                rollout["done"] = min(rollout["total"], rollout["done"] + 1)
                if rollout["done"] >= rollout["total"]:
                    rollout.update(state="completed", finished_at=_now())
        elif rollout["state"] == "rolling_back":
            rollout["state"] = "rolled_back"
            app = self.apps[rollout["process_guid"]]
            app.update({k: v for k, v in self.versions[app["process_guid"]][-2].items() if k != "version"})

    def get_rollout(self, guid: str) -> dict[str, Any] | None:
        self.calls.append(("get_rollout", guid))
        found = self.rollouts.get(guid)
        if not found:
            return None
        self._advance(found[0])
        return self._public(found[0])

    def list_rollouts(self, guid: str) -> list[dict[str, Any]]:
        self.calls.append(("list_rollouts", guid))
        if guid not in self.apps:
            from deploy.bbs_client import NotFound as ClientNotFound

            raise ClientNotFound("404", 404)
        return [self._public(r) for r in self.rollouts.get(guid, [])]

    def rollout_action(self, guid: str, action: str) -> dict[str, Any]:
        from deploy.bbs_client import Conflict

        self.calls.append((action, guid))
        latest = (self.rollouts.get(guid) or [None])[0]
        if action == "pause":
            if latest is None or latest["state"] != "running":
                raise Conflict(f"POST /v1/desired_lrps/{guid}/rollout/pause: 409 no rollout running", 409)
            latest["state"] = "paused"
            latest["reason"] = "paused by an operator"
            return self._public(latest)
        if action == "resume":
            if latest is None or latest["state"] != "paused":
                raise Conflict(f"POST /v1/desired_lrps/{guid}/rollout/resume: 409 no rollout paused", 409)
            latest.update(state="running", reason=None, canary=False)
            return self._public(latest)
        version = self.apps[guid]["version"]
        if version <= 1:
            raise Conflict(f"POST /v1/desired_lrps/{guid}/rollout/undo: 409 no previous version", 409)
        return self._start(guid, "rollback", version, version - 1, {})

    def restart_lrp(self, guid: str, *, all_at_once: bool = False,
                    max_in_flight: int | str = 1) -> dict[str, Any]:
        self.calls.append(("restart", guid))
        version = self.apps[guid]["version"]
        rollout = self._start(guid, "restart", version, version, {"max_in_flight": max_in_flight})
        if all_at_once:
            self.rollouts[guid][0].update(state="completed", done=rollout["total"])
            return self._public(self.rollouts[guid][0])
        return rollout

    def restart_instance(self, guid: str, index: int) -> None:
        from deploy.bbs_client import NotFound as ClientNotFound

        self.calls.append(("restart_instance", f"{guid}/{index}"))
        if guid not in self.apps or index >= self.apps[guid]["instances"]:
            raise ClientNotFound("404", 404)

    def task(self, guid: str) -> Task:
        from deploy.bbs_client import NotFound as ClientNotFound

        self.calls.append(("task", guid))
        if guid not in self.tasks:
            raise ClientNotFound("404", 404)
        return Task.model_validate(self.tasks[guid])

    def desire_task(self, request: TaskCreate) -> Task:
        self.calls.append(("run_task", request.task_guid))
        self.tasks[request.task_guid] = {
            **request.model_dump(mode="json"), "state": "COMPLETED", "exit_status": 0, "failed": False,
            "created_at": _now(), "updated_at": _now()}
        return Task.model_validate(self.tasks[request.task_guid])


@contextlib.contextmanager
def connected(fake: FakeBBS, *_: Any, **__: Any) -> Iterator[FakeBBS]:
    """In place of deploy.client_cmd.connect (monkeypatched where a command module imported it)."""
    yield fake
