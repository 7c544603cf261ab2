"""Diego's models and Vendue's, both ways (docs/diego-api.md): pure functions, no I/O.

Into Vendue: a Diego DesiredLRP (or TaskDefinition) becomes the body of Vendue's own desire, its run action
the command and env, its download actions artifacts, a `docker://` rootfs an image; what Vendue cannot
honour is refused (`Unsupported`, answered as InvalidRequest naming it). The Diego message itself travels
along in the body's `diego` field (base64 protobuf, sealed at rest with command and env), so that what
Vendue does not act on (routes, log and metrics guids, annotation, egress rules, ...) reads back unchanged.

Out of Vendue: the stored Diego message when there is one, with what Vendue owns (instances, the
modification tag, a command or env changed through Vendue's own API) written over it; else one made from
Vendue's definition.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any, Literal

from .pb import diego_pb2 as pb

MASK = "***"  # bbs/redact.py's: env values a reader may not see
PRELOADED = "preloaded:"
DOCKER_SCHEMES = ("docker:///", "docker://")
DEFAULT_DIEGO_STACK = "cflinuxfs4"
MAX_START_TIMEOUT_S = 3600.0  # common.models.HealthCheck's bound
DEFAULT_MEMORY_MB, DEFAULT_DISK_MB = 256, 1024  # common.models.PlacementFields': what a Diego 0 becomes

ACTUAL_PRESENCE = {"ORDINARY": pb.ActualLRP.ORDINARY, "EVACUATING": pb.ActualLRP.EVACUATING,
                   "SUSPECT": pb.ActualLRP.SUSPECT}
TASK_STATE = {"PENDING": pb.Task.Pending, "RUNNING": pb.Task.Running, "COMPLETED": pb.Task.Completed,
              "RESOLVING": pb.Task.Resolving}


# The wrappers of an action tree: groups of actions, and one action wrapped.
GROUPS: tuple[Literal["serial_action", "codependent_action", "parallel_action"], ...] = (
    "serial_action", "codependent_action", "parallel_action")
WRAPPERS: tuple[Literal["timeout_action", "try_action", "emit_progress_action"], ...] = (
    "timeout_action", "try_action", "emit_progress_action")


class Unsupported(ValueError):
    """A Diego field Vendue cannot honour: answered InvalidRequest with this text (it names the field)."""


# --- into Vendue -----------------------------------------------------------------------------------------


def _walk(action: pb.Action, where: str) -> tuple[list[tuple[str, pb.RunAction]], list[pb.DownloadAction]]:
    """The run and download actions of an action tree, each run with where it sits. Wrappers (serial,
    codependent, parallel, timeout, try, emit-progress) are followed; an upload is refused."""
    runs: list[tuple[str, pb.RunAction]] = []
    downloads: list[pb.DownloadAction] = []
    if action.HasField("run_action"):
        runs.append((where, action.run_action))
    elif action.HasField("download_action"):
        downloads.append(action.download_action)
    elif action.HasField("upload_action"):
        raise Unsupported(f"{where}.upload_action: Vendue does not upload files out of an instance")
    else:
        children: list[tuple[str, pb.Action]] = []
        for name in GROUPS:
            if action.HasField(name):
                group = getattr(action, name)
                children = [(f"{where}.{name}.actions[{i}]", a) for i, a in enumerate(group.actions)]
        for wrapper in WRAPPERS:
            if action.HasField(wrapper):
                children = [(f"{where}.{wrapper}.action", getattr(action, wrapper).action)]
        for child_where, child in children:
            child_runs, child_downloads = _walk(child, child_where)
            runs += child_runs
            downloads += child_downloads
    return runs, downloads


def _artifact(download: pb.DownloadAction, where: str) -> dict[str, Any]:
    if download.checksum_algorithm.lower() != "sha256" or not download.checksum_value:
        raise Unsupported(f"{where}.download_action: Vendue fetches artifacts by their sha256 "
                          "(checksum_algorithm sha256 and checksum_value)")
    dest = download.to.lstrip("/") or "."
    return {"digest": f"sha256:{download.checksum_value.lower()}", "url": download.__getattribute__("from"),
            "dest": dest}


def _root_fs(root_fs: str, username: str, password: str) -> dict[str, Any]:
    """`stack` or `image` for a Diego rootfs: `preloaded:<stack>` or `docker://[host]/<ref>`."""
    if not root_fs:
        return {}
    if root_fs.startswith(PRELOADED):
        return {"stack": root_fs[len(PRELOADED):]}
    for scheme in DOCKER_SCHEMES:
        if root_fs.startswith(scheme):
            ref = root_fs[len(scheme):].lstrip("/")
            image: dict[str, Any] = {"ref": ref.replace("#", ":", 1)}
            if username or password:
                image["credentials"] = {"username": username, "password": password}
            return {"image": image}
    raise Unsupported(f"root_fs: {root_fs!r}: Vendue runs preloaded:<stack> or docker://<image> only")


def _refuse_unsupported(message: Any, names: tuple[str, ...]) -> None:
    for name in names:
        if len(getattr(message, name)):
            raise Unsupported(f"{name}: not supported by Vendue")


def _run_and_artifacts(setup: pb.Action | None, action: pb.Action, where: str
                       ) -> tuple[pb.RunAction, list[dict[str, Any]]]:
    runs, downloads = _walk(action, where)
    if setup is not None:
        setup_runs, setup_downloads = _walk(setup, "setup")
        if setup_runs:
            raise Unsupported(f"{setup_runs[0][0]}.run_action: Vendue runs one command; a run action in the "
                              "setup is not supported")
        downloads = setup_downloads + downloads
    if len(runs) != 1:
        found = "none" if not runs else ", ".join(w for w, _ in runs)
        raise Unsupported(f"{where}: Vendue runs exactly one run action (found {found})")
    run_where, run = runs[0]
    if not run.path:
        raise Unsupported(f"{run_where}.run_action.path: required")
    if run.dir:
        raise Unsupported(f"{run_where}.run_action.dir: Vendue runs every command from the instance's "
                          "directory")
    return run, [_artifact(d, "setup") for d in downloads]


def _env(*lists: Any) -> dict[str, str]:
    env: dict[str, str] = {}
    for variables in lists:
        for variable in variables:
            env[variable.name] = variable.value
    return env


def lrp_body(lrp: pb.DesiredLRP) -> dict[str, Any]:
    """Vendue's desire (a DesiredLRPCreate body) for a Diego DesiredLRP; raises Unsupported."""
    _refuse_unsupported(lrp, ("image_layers", "cached_dependencies", "volume_mounts", "sidecars"))
    if not lrp.HasField("action"):
        raise Unsupported("action: required")
    run, artifacts = _run_and_artifacts(lrp.setup if lrp.HasField("setup") else None, lrp.action, "action")
    ports = list(lrp.ports)
    checked = lrp.HasField("monitor") or bool(lrp.check_definition)
    health: dict[str, Any] = {"type": "port" if checked and ports else "process"}
    timeout_ms = lrp.start_timeout_ms or lrp.deprecated_start_timeout_s * 1000
    if timeout_ms > 0:
        health["timeout_s"] = min(timeout_ms / 1000.0, MAX_START_TIMEOUT_S)
    body: dict[str, Any] = {
        "process_guid": lrp.process_guid,
        "instances": lrp.instances,
        "command": [run.path, *run.args],
        "env": _env(lrp.environment_variables, run.env),
        "ports": ports,
        "health_check": health,
        "placement_tags": list(lrp.placement_tags),
        "artifacts": artifacts,
        **_root_fs(lrp.root_fs, lrp.image_username, lrp.image_password),
        "diego": encode(_stored(lrp)),
    }
    if lrp.domain:
        body["domain"] = lrp.domain
    if lrp.memory_mb > 0:
        body["memory_mb"] = lrp.memory_mb
    if lrp.disk_mb > 0:
        body["disk_mb"] = lrp.disk_mb
    return body


def task_body(guid: str, domain: str, definition: pb.TaskDefinition) -> dict[str, Any]:
    """Vendue's task (a TaskCreate body) for a Diego DesireTaskRequest; raises Unsupported."""
    _refuse_unsupported(definition, ("image_layers", "cached_dependencies", "volume_mounts"))
    if not definition.HasField("action"):
        raise Unsupported("task_definition.action: required")
    run, artifacts = _run_and_artifacts(None, definition.action, "task_definition.action")
    body: dict[str, Any] = {
        "task_guid": guid,
        "command": [run.path, *run.args],
        "env": _env(definition.environment_variables, run.env),
        "placement_tags": list(definition.placement_tags),
        "artifacts": artifacts,
        **_root_fs(definition.root_fs, definition.image_username, definition.image_password),
        "diego": encode(_without_image_credentials(definition)),
    }
    if definition.completion_callback_url:
        body["completion_callback_url"] = definition.completion_callback_url
    if domain:
        body["domain"] = domain
    if definition.memory_mb > 0:
        body["memory_mb"] = definition.memory_mb
    if definition.disk_mb > 0:
        body["disk_mb"] = definition.disk_mb
    return body


def _stored(lrp: pb.DesiredLRP) -> pb.DesiredLRP:
    """What is kept of a DesiredLRP: all of it but what Vendue owns and writes back on every read."""
    kept = pb.DesiredLRP()
    kept.CopyFrom(lrp)
    kept.ClearField("instances")
    kept.ClearField("modification_tag")
    return _without_image_credentials(kept)


def _without_image_credentials(message: Any) -> Any:
    """`message` (a DesiredLRP or a TaskDefinition) without its registry credentials: they are the image's
    `credentials`, sealed at rest and shown to nobody (bbs/redact.py); the kept message is neither."""
    if not (message.image_username or message.image_password):
        return message
    kept = type(message)()
    kept.CopyFrom(message)
    kept.ClearField("image_username")
    kept.ClearField("image_password")
    return kept


def encode(message: Any) -> str:
    return base64.b64encode(message.SerializeToString()).decode()


def decode_stored(text: str | None, message: Any) -> Any | None:
    """The message kept in a definition's `diego` field, or None (none kept, or masked for this caller)."""
    if not text or text == MASK:
        return None
    try:
        message.ParseFromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        return None
    return message


def updated_lrp(current: pb.DesiredLRP, update: pb.DesiredLRPUpdate) -> pb.DesiredLRP:
    """`current` with a Diego DesiredLRPUpdate applied: routes, annotation, metric tags (the instances
    are Vendue's own, changed by the operation)."""
    changed = _stored(current)
    if update.HasField("routes"):
        changed.routes.CopyFrom(update.routes)
    if update.HasField("annotation"):
        changed.annotation = update.annotation
    if len(update.metric_tags):
        changed.ClearField("metric_tags")
        for name, value in update.metric_tags.items():
            changed.metric_tags[name].CopyFrom(value)
    return changed


# --- out of Vendue ---------------------------------------------------------------------------------------


def nanos(iso_time: str | None) -> int:
    """Diego's timestamps: Unix nanoseconds."""
    if not iso_time:
        return 0
    return int(datetime.fromisoformat(iso_time).timestamp() * 1_000_000_000)


def _run_action(command: list[str], env: dict[str, str]) -> pb.RunAction:
    run = pb.RunAction(path=command[0] if command else "", args=command[1:])
    run.env.extend(pb.EnvironmentVariable(name=k, value=v) for k, v in env.items())
    return run


def _setup(artifacts: list[dict[str, Any]]) -> pb.Action | None:
    downloads = [pb.Action(download_action=pb.DownloadAction(
        artifact=a.get("dest") or ".", to=a.get("dest") or ".", checksum_algorithm="sha256",
        checksum_value=str(a["digest"]).removeprefix("sha256:"), **{"from": a.get("url") or ""}))
        for a in artifacts]
    if not downloads:
        return None
    if len(downloads) == 1:
        return downloads[0]
    return pb.Action(serial_action=pb.SerialAction(actions=downloads))


def _root_fs_of(wire: dict[str, Any]) -> str:
    image = wire.get("image")
    if image:
        return "docker:///" + str(image["ref"])
    return PRELOADED + str(wire.get("stack") or DEFAULT_DIEGO_STACK)


def _runs(action: pb.Action) -> list[pb.RunAction]:
    runs, _ = _walk_lenient(action)
    return runs


def _walk_lenient(action: pb.Action) -> tuple[list[pb.RunAction], int]:
    try:
        found, downloads = _walk(action, "action")
    except Unsupported:
        return [], 0
    return [run for _, run in found], len(downloads)


def _synthesized_lrp(wire: dict[str, Any]) -> pb.DesiredLRP:
    lrp = pb.DesiredLRP(root_fs=_root_fs_of(wire), memory_mb=int(wire.get("memory_mb") or 0),
                        disk_mb=int(wire.get("disk_mb") or 0),
                        ports=[int(p) for p in wire.get("ports") or []],
                        placement_tags=list(wire.get("placement_tags") or []),
                        log_guid=str(wire["process_guid"]))
    lrp.action.run_action.CopyFrom(_run_action(list(wire.get("command") or []), dict(wire.get("env") or {})))
    setup = _setup(list(wire.get("artifacts") or []))
    if setup is not None:
        lrp.setup.CopyFrom(setup)
    health = wire.get("health_check") or {}
    if health.get("timeout_s"):
        lrp.start_timeout_ms = int(float(health["timeout_s"]) * 1000)
    return lrp


def _command_env_drifted(stored: Any, action: pb.Action, env_lists: list[Any], wire: dict[str, Any]) -> bool:
    """Whether Vendue's command or env is no longer what the stored Diego message says (changed through
    Vendue's own API since): then the stored run action is replaced."""
    runs = _runs(action)
    if len(runs) != 1:
        return True
    run = runs[0]
    env = _env(*env_lists, run.env)
    return [run.path, *run.args] != list(wire.get("command") or []) or env != dict(wire.get("env") or {})


def _resources_drifted(lrp: pb.DesiredLRP, wire: dict[str, Any]) -> None:
    """What Vendue acts on and its own API may change (memory, disk, ports, placement tags), written over
    the stored message where it no longer says the same (0 memory or disk: Vendue's default)."""
    for name, default in (("memory_mb", DEFAULT_MEMORY_MB), ("disk_mb", DEFAULT_DISK_MB)):
        own = int(wire.get(name) or 0)
        kept = getattr(lrp, name)
        if own and kept != own and not (kept == 0 and own == default):
            setattr(lrp, name, own)
    ports = [int(p) for p in wire.get("ports") or []]
    if list(lrp.ports) != ports:
        lrp.ClearField("ports")
        lrp.ports.extend(ports)
    tags = list(wire.get("placement_tags") or [])
    if list(lrp.placement_tags) != tags:
        lrp.ClearField("placement_tags")
        lrp.placement_tags.extend(tags)


def _replace_run(action: pb.Action, run: pb.RunAction) -> None:
    """The one run action of `action` replaced by `run`, in place (anything else: the action becomes it)."""
    if action.HasField("run_action"):
        action.run_action.CopyFrom(run)
        return
    for name in GROUPS:
        if action.HasField(name):
            for child in getattr(action, name).actions:
                if _runs(child):
                    _replace_run(child, run)
                    return
    for wrapper in WRAPPERS:
        if action.HasField(wrapper):
            _replace_run(getattr(action, wrapper).action, run)
            return
    action.Clear()
    action.run_action.CopyFrom(run)


def diego_lrp(wire: dict[str, Any], *, sees_env: bool = True) -> pb.DesiredLRP:
    """A Vendue desired LRP (its JSON wire form) as Diego's DesiredLRP."""
    stored = decode_stored(wire.get("diego"), pb.DesiredLRP())
    if stored is None:
        lrp = _synthesized_lrp(wire)
    else:
        lrp = stored
        if _command_env_drifted(stored, lrp.action, [lrp.environment_variables], wire):
            lrp.ClearField("environment_variables")
            run = _run_action(list(wire.get("command") or []), dict(wire.get("env") or {}))
            _replace_run(lrp.action, run)
        _resources_drifted(lrp, wire)
    lrp.process_guid = str(wire["process_guid"])
    lrp.domain = str(wire.get("domain") or "")
    lrp.instances = int(wire.get("instances") or 0)
    tag = wire.get("modification_tag") or {}
    lrp.modification_tag.CopyFrom(pb.ModificationTag(epoch=str(tag.get("epoch", "")),
                                                      index=int(tag.get("index", 0))))
    if not sees_env:
        _mask_env(lrp)
    return lrp


def scheduling_info(lrp: pb.DesiredLRP) -> pb.DesiredLRPSchedulingInfo:
    info = pb.DesiredLRPSchedulingInfo(
        desired_lrp_key=pb.DesiredLRPKey(process_guid=lrp.process_guid, domain=lrp.domain,
                                         log_guid=lrp.log_guid),
        annotation=lrp.annotation, instances=lrp.instances,
        desired_lrp_resource=pb.DesiredLRPResource(memory_mb=lrp.memory_mb, disk_mb=lrp.disk_mb,
                                                   root_fs=lrp.root_fs, max_pids=lrp.max_pids),
        modification_tag=lrp.modification_tag, placement_tags=list(lrp.placement_tags))
    if lrp.HasField("routes"):
        info.routes.CopyFrom(lrp.routes)
    return info


def routing_info(lrp: pb.DesiredLRP) -> pb.DesiredLRP:
    """What Diego's routing-info read carries of a desired LRP: its key, instances, routes, tags."""
    info = pb.DesiredLRP(process_guid=lrp.process_guid, domain=lrp.domain, instances=lrp.instances,
                         log_guid=lrp.log_guid, modification_tag=lrp.modification_tag)
    if lrp.HasField("routes"):
        info.routes.CopyFrom(lrp.routes)
    for name, value in lrp.metric_tags.items():
        info.metric_tags[name].CopyFrom(value)
    return info


def _mask_env(message: Any) -> None:
    """Every env value in `message` (environment variables and run actions, at any depth) `***`."""
    for field, value in message.ListFields():
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue  # no env in a scalar or a map (routes, metric tags)
        repeated = _repeated(field)
        if field.message_type.name == "EnvironmentVariable":
            for variable in value:
                variable.value = MASK
        elif repeated:
            for item in value:
                _mask_env(item)
        else:
            _mask_env(value)


def _repeated(field: Any) -> bool:
    # protobuf 7 says is_repeated; older runtimes only have the label.
    repeated = getattr(field, "is_repeated", None)
    return bool(repeated) if repeated is not None else field.label == field.LABEL_REPEATED


def masked_message(text: str, *, task: bool) -> str:
    """A stored Diego message (base64) with every env value `***` (MASK when it does not decode)."""
    message = decode_stored(text, pb.TaskDefinition() if task else pb.DesiredLRP())
    if message is None:
        return MASK
    _mask_env(message)
    return encode(message)


def _net_info(wire: dict[str, Any]) -> pb.ActualLRPNetInfo:
    info = pb.ActualLRPNetInfo(address=str(wire.get("host") or ""),
                               preferred_address=pb.ActualLRPNetInfo.HOST)
    info.ports.extend(pb.PortMapping(container_port=int(p["container_port"]), host_port=int(p["host_port"]))
                      for p in wire.get("ports") or [])
    return info


def diego_actual(wire: dict[str, Any]) -> pb.ActualLRP:
    """A Vendue actual LRP (its JSON wire form) as Diego's ActualLRP: the same states (UNCLAIMED, CLAIMED,
    RUNNING, CRASHED) and presences, Vendue's crash reason and placement error as they are."""
    tag = wire.get("modification_tag") or {}
    actual = pb.ActualLRP(
        actual_lrp_key=pb.ActualLRPKey(process_guid=str(wire["process_guid"]), index=int(wire["index"]),
                                       domain=str(wire.get("domain") or "")),
        actual_lrp_instance_key=pb.ActualLRPInstanceKey(instance_guid=str(wire.get("instance_guid") or ""),
                                                        cell_id=str(wire.get("cell_id") or "")),
        crash_count=int(wire.get("crash_count") or 0), crash_reason=str(wire.get("crash_reason") or ""),
        state=str(wire.get("state") or "UNCLAIMED"), placement_error=str(wire.get("placement_error") or ""),
        since=nanos(wire.get("since")),
        modification_tag=pb.ModificationTag(epoch=str(tag.get("epoch", "")), index=int(tag.get("index", 0))),
        presence=ACTUAL_PRESENCE.get(str(wire.get("presence") or "ORDINARY"), pb.ActualLRP.ORDINARY),
        availability_zone=str(wire.get("zone") or ""),
    )
    if wire.get("state") in ("CLAIMED", "RUNNING"):
        actual.actual_lrp_net_info.CopyFrom(_net_info(wire))
    if wire.get("state") == "RUNNING":
        actual.routable = True
    return actual


def actual_info(actual: pb.ActualLRP) -> pb.ActualLRPInfo:
    """The part of an ActualLRP an instance-changed event carries before and after."""
    info = pb.ActualLRPInfo(
        actual_lrp_net_info=actual.actual_lrp_net_info, crash_count=actual.crash_count,
        crash_reason=actual.crash_reason, state=actual.state, placement_error=actual.placement_error,
        since=actual.since, modification_tag=actual.modification_tag, presence=actual.presence,
        availability_zone=actual.availability_zone)
    if actual.HasField("routable"):
        info.routable = actual.routable
    return info


def diego_task(wire: dict[str, Any], *, sees_env: bool = True) -> pb.Task:
    """A Vendue task (its JSON wire form) as Diego's Task."""
    definition = decode_stored(wire.get("diego"), pb.TaskDefinition())
    if definition is None:
        definition = pb.TaskDefinition(root_fs=_root_fs_of(wire), memory_mb=int(wire.get("memory_mb") or 0),
                                       disk_mb=int(wire.get("disk_mb") or 0),
                                       placement_tags=list(wire.get("placement_tags") or []),
                                       completion_callback_url=str(wire.get("completion_callback_url") or ""))
        definition.action.run_action.CopyFrom(_run_action(list(wire.get("command") or []),
                                                          dict(wire.get("env") or {})))
    task = pb.Task(
        task_definition=definition, task_guid=str(wire["task_guid"]), domain=str(wire.get("domain") or ""),
        created_at=nanos(wire.get("created_at")), updated_at=nanos(wire.get("updated_at")),
        first_completed_at=nanos(wire.get("first_completed_at")),
        state=TASK_STATE.get(str(wire.get("state")), pb.Task.Invalid), cell_id=str(wire.get("cell_id") or ""),
        result=str(wire.get("result") or ""), failed=bool(wire.get("failed")),
        failure_reason=str(wire.get("failure_reason") or ""),
        rejection_count=int(wire.get("rejection_count") or 0),
    )
    if not sees_env:
        _mask_env(task)
    return task


def diego_cell(wire: dict[str, Any], rep_state_url: str) -> pb.CellPresence:
    """A Vendue cell (GET /v1/cells's item) as Diego's CellPresence; `rep_state_url`: where Diego's
    client finds the cell's state (it asks `<rep_url>/state`)."""
    total = wire.get("total") or {}
    capacity = pb.CellCapacity(memory_mb=int(total.get("memory_mb", 0)), disk_mb=int(total.get("disk_mb", 0)),
                               containers=int(total.get("containers", 0)))
    cell = pb.CellPresence(
        cell_id=str(wire["cell_id"]), rep_address=str(wire.get("rep_url") or ""),
        zone=str(wire.get("zone") or ""), capacity=capacity,
        placement_tags=list(wire.get("placement_tags") or []),
        optional_placement_tags=list(wire.get("optional_placement_tags") or []),
        rep_url=rep_state_url,
    )
    stacks = list(wire.get("stacks") or [])
    preloaded = [s for s in stacks if s != "docker"]
    cell.rootfs_providers.append(pb.Provider(name="preloaded", properties=preloaded))
    if "docker" in stacks:
        cell.rootfs_providers.append(pb.Provider(name="docker"))
    return cell
