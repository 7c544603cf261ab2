"""An app's story (`vendue app NAME`), as pure functions: what the BBS said of the app (its definition,
its instances, its rollout, its last events and the restart policy) and the time now, made into one view,
and that view as text of at most 80 columns.

Everything here reads the wire's plain data (the JSON of GET /v1/desired_lrps/{guid}, /v1/actual_lrps,
.../rollout and .../events), so a dashboard reading the same routes can show the same story. Times in
the view are RFC 3339 UTC with `Z`, durations are seconds.
"""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from typing import Any

from .terminal_text import plain

WIDTH = 80
CRASH_LOOP = "crash loop"
GAVE_UP = "crashed, not restarted"  # past the policy's max_restarts: Diego stops restarting it


def rfc3339(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def epoch(text: str | None) -> float | None:
    """An RFC 3339 time from the wire as epoch seconds (None stays None)."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def backoff(policy: dict[str, Any], crash_count: int) -> float | None:
    """bbs/restart_policy.py's back-off after the crash_count-th crash: 0 restarts at once, None never,
    with the parameters the BBS runs with (GET .../events' restart_policy)."""
    from bbs.restart_policy import RestartPolicy

    fields = {name: policy[name] for name in RestartPolicy.__dataclass_fields__ if name in policy}
    return RestartPolicy(**fields).backoff(crash_count)


def restart_status(policy: dict[str, Any], state: str, crash_count: int, since: float,
                   now: float) -> dict[str, Any]:
    """What happens next to a crashed instance: whether it is in a crash loop (crashed often enough that
    Diego waits before restarting it: Kubernetes' CrashLoopBackOff), its back-off, and when it restarts.
    `since`: when it crashed (the row's `since` while CRASHED). A convergence pass restarts it once the
    back-off is over, so the time is the earliest it restarts. An instance not CRASHED: nothing pending."""
    # Looping: crashed at least immediate_restarts times and not (yet) running again.
    looping = state != "RUNNING" and crash_count >= int(policy["immediate_restarts"])
    status: dict[str, Any] = {"crash_loop": looping,
                              "backoff_s": None, "next_restart_at": None, "next_restart_in_s": None,
                              "gave_up": False}
    if state != "CRASHED":
        return status
    wait = backoff(policy, crash_count)
    if wait is None:
        status["gave_up"] = True
        return status
    status["backoff_s"] = wait
    status["crash_loop"] = wait > 0
    status["next_restart_at"] = rfc3339(since + wait)
    status["next_restart_in_s"] = round(max(0.0, since + wait - now), 1)
    return status


def instance_view(actual: dict[str, Any], policy: dict[str, Any], now: float) -> dict[str, Any]:
    since = epoch(actual.get("since")) or now
    state = str(actual.get("state", ""))
    crashes = int(actual.get("crash_count") or 0)
    view: dict[str, Any] = {
        "index": actual["index"],
        "state": state,
        "presence": actual.get("presence", "ORDINARY"),
        "cell_id": actual.get("cell_id") or None,
        "version": actual.get("version"),
        "since": rfc3339(since),
        "uptime_s": round(now - since, 1) if state == "RUNNING" else None,
        "crashes": crashes,
        "last_crash_reason": actual.get("crash_reason") or None,
        "placement_error": actual.get("placement_error") or None,
    }
    view.update(restart_status(policy, state, crashes, since, now))
    return view


def app_status(desired: dict[str, Any], instances: list[dict[str, Any]]) -> str:
    """One phrase for the app: the worst that holds (a crash loop, unplaceable, crashed, starting)."""
    ordinary = [i for i in instances if i["presence"] == "ORDINARY"]
    if any(i["crash_loop"] for i in ordinary):
        return CRASH_LOOP
    if any(i["gave_up"] for i in ordinary):
        return GAVE_UP
    if any(i["placement_error"] and i["state"] == "UNCLAIMED" for i in ordinary):
        return "unplaceable"
    if any(i["state"] == "CRASHED" for i in ordinary):
        return "crashed"
    running = sum(1 for i in ordinary if i["state"] == "RUNNING")
    if running >= int(desired.get("instances", 0)):
        return "running" if running else "stopped (0 instances)"
    return "starting"


DEFINITION_FIELDS = ("image", "command", "memory_mb", "disk_mb", "ports", "stack", "health_check",
                     "on_cell_loss")


def assemble(desired: dict[str, Any], actuals: list[dict[str, Any]], rollout: dict[str, Any] | None,
             events: dict[str, Any], now: float) -> dict[str, Any]:
    """The story of one app: its definition and version, its rollout, each instance (state, cell, uptime,
    crashes, last crash reason, next restart), its placement error, its last events, newest first."""
    policy = events["restart_policy"]
    instances = sorted((instance_view(a, policy, now) for a in actuals),
                       key=lambda i: (i["index"], i["presence"] != "ORDINARY"))
    errors = [i["placement_error"] for i in instances if i["placement_error"] and i["state"] == "UNCLAIMED"]
    running = sum(1 for i in instances if i["state"] == "RUNNING" and i["presence"] == "ORDINARY")
    story: dict[str, Any] = {
        "process_guid": desired["process_guid"],
        "domain": desired.get("domain"),
        "version": desired.get("version", 1),
        "status": app_status(desired, instances),
        "desired_instances": desired.get("instances", 0),
        "running_instances": running,
        "created_at": _rfc(desired.get("created_at")),
        "definition": {k: desired[k] for k in DEFINITION_FIELDS if desired.get(k) is not None},
        "rollout": None,
        "placement_error": errors[0] if errors else None,
        "instances": instances,
        "events": [_event(e) for e in reversed(events.get("events", []))],
        "events_kept": events.get("kept"),
        "restart_policy": policy,
    }
    if rollout is not None:
        story["rollout"] = {
            "kind": rollout.get("kind"), "state": rollout.get("state"),
            "from_version": rollout.get("from_version"), "to_version": rollout.get("to_version"),
            "done": rollout.get("done"), "total": rollout.get("total"), "reason": rollout.get("reason"),
            "started_at": _rfc(rollout.get("started_at")), "finished_at": _rfc(rollout.get("finished_at")),
        }
    return story


def _rfc(text: str | None) -> str | None:
    return rfc3339(epoch(text))


def _event(entry: dict[str, Any]) -> dict[str, Any]:
    return {**{k: v for k, v in entry.items() if v is not None}, "at": _rfc(entry.get("at"))}


# --- text ------------------------------------------------------------------------------------------


def duration(seconds: float | None) -> str:
    """Rounded for a person: 45s, 3m20s, 2h05m, 3d04h."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _clock(text: str | None) -> str:
    """An RFC 3339 time as the local HH:MM:SS (a story spans minutes to hours; --json has the date)."""
    at = epoch(text)
    return "-" if at is None else datetime.fromtimestamp(at).strftime("%H:%M:%S")


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(0, width - 1)] + "…"


def _wrapped(label: str, text: str) -> list[str]:
    """`label: text`, the text safe and wrapped under itself within WIDTH."""
    indent = " " * (len(label) + 2)
    return textwrap.wrap(plain(text, lines=False), WIDTH, initial_indent=f"{label}: ",
                         subsequent_indent=indent, break_on_hyphens=False) or [f"{label}:"]


def instance_line(i: dict[str, Any]) -> str:
    """One row of the instance table (INDEX STATE CELL UPTIME CRASHES NEXT): never wider than WIDTH, the
    cell cut first (`*evac`: an evacuating instance's old copy)."""
    presence = {"ORDINARY": "", "EVACUATING": "*evac", "SUSPECT": "*susp"}.get(i["presence"], "*")
    state = str(i["state"]) + presence
    cell = _fit(plain(i["cell_id"] or "-", lines=False), 15)
    if i["gave_up"]:
        nxt = "never (gave up)"
    elif i["next_restart_in_s"] is not None:
        nxt = f"in {duration(i['next_restart_in_s'])}" if i["next_restart_in_s"] > 0 else "due now"
        if i["crash_loop"]:
            nxt += f" (back-off {duration(i['backoff_s'])})"
    else:
        nxt = "-"
    row = f"{i['index']:>5}  {state:<12} {cell:<15} {duration(i['uptime_s']):>7} {i['crashes']:>7}  {nxt}"
    return _fit(row, WIDTH)


def event_line(e: dict[str, Any]) -> str:
    who = f"#{e['index']}" if "index" in e else ""
    what = str(e.get("kind", ""))
    details: list[str] = []
    if e.get("kind") == "rollout":
        what = f"rollout {e.get('rollout_kind', '')}".rstrip()
        progress = f"{e.get('done', 0)}/{e.get('total', 0)}"
        details.append(f"{e.get('state', '')} to v{e.get('to_version', '?')} {progress}")
    if e.get("kind") == "exec":  # who ran which program: never its arguments nor its output
        details.append(f"{e.get('user', '?')} ran {e.get('program', '?')} ({e.get('args', 0)} argument(s))")
    if e.get("cell_id"):
        details.append(f"on {e['cell_id']}")
    if e.get("crash_count"):
        details.append(f"crash {e['crash_count']}")
    if e.get("reason"):
        details.append(str(e["reason"]))
    line = f"  {_clock(e.get('at'))}  {what:<11} {who:<5} {', '.join(details)}"
    return _fit(plain(line.rstrip(), lines=False), WIDTH)


def render(story: dict[str, Any]) -> list[str]:
    """The story as lines of at most WIDTH columns, every piece of foreign text shown safe."""
    d = story["definition"]
    lines = [
        *_wrapped("App", f"{story['process_guid']} (domain {story['domain']}, version {story['version']})"),
        *_wrapped("Status", f"{story['status']}: {story['running_instances']} of "
                            f"{story['desired_instances']} running"),
    ]
    if d.get("image"):  # the ref and the digest pinned (the BBS never shows the credentials)
        image = d["image"]
        lines += _wrapped("Image", f"{image.get('ref', '')} ({image.get('digest') or 'not pinned'})")
    if "command" in d:
        lines += _wrapped("Command", " ".join(map(str, d["command"])))
    resources = ", ".join(f"{k} {d[k]}" for k in ("memory_mb", "disk_mb", "ports", "stack") if k in d)
    if resources:
        lines += _wrapped("Resources", resources)
    if story["placement_error"]:
        lines += _wrapped("Placement error", story["placement_error"])
    r = story["rollout"]
    if r is not None:
        text = (f"{r['kind']} v{r['from_version']} -> v{r['to_version']}: {r['state']}, "
                f"{r['done']}/{r['total']} done")
        if r.get("reason"):
            text += f" ({r['reason']})"
        lines += _wrapped("Rollout", text)
    policy = story["restart_policy"]
    lines += ["", "Instances:",
              f"{'INDEX':>5}  {'STATE':<12} {'CELL':<15} {'UPTIME':>7} {'CRASHES':>7}  NEXT RESTART"]
    lines += [instance_line(i) for i in story["instances"]] or ["  (none)"]
    for i in story["instances"]:
        if i["last_crash_reason"]:
            lines += _wrapped(f"  #{i['index']} last crash", i["last_crash_reason"])
        if i["crash_loop"]:
            lines += _wrapped(f"  #{i['index']} {CRASH_LOOP}",
                              f"{i['crashes']} crashes; restarts after a back-off of "
                              f"{duration(i['backoff_s'])} (doubling from "
                              f"{duration(policy['backoff_min'])} to {duration(policy['backoff_max'])})")
        if i["gave_up"]:
            lines += _wrapped(f"  #{i['index']} {GAVE_UP}",
                              f"{i['crashes']} crashes, more than the {policy['max_restarts']} "
                              "restarts allowed")
    lines += ["", f"Events (newest first, the last {story['events_kept']} kept by the BBS):"]
    lines += [event_line(e) for e in story["events"]] or ["  (none since the BBS started)"]
    return lines
