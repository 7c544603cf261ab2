"""What a cell's outbox holds, as plain data, and the lifecycle JSON written straight from it.

A sim host reports every one of its instances claimed and then running: building a pydantic model per
report and dumping it again was a third of the rep's CPU per instance. The records here are named
tuples with the wire models' field names (so code and tests read them the same way), and the writer
produces exactly the bytes `HostLifecycle(...).model_dump_json()` would (reports_test.py pins that).
Task completions are rare and stay `TaskCompletion` models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring  # C; json.dumps(ensure_ascii=False)'s string encoder
from typing import NamedTuple, Protocol

from common.models import TaskCompletion


class Port(NamedTuple):
    container_port: int
    host_port: int


class HostPort(Protocol):
    """A port mapping as executors report it: a `Port` or a `PortMapping`."""

    @property
    def container_port(self) -> int: ...

    @property
    def host_port(self) -> int: ...


class Ref(NamedTuple):
    """An instance claimed (ClaimedInstance on the wire, with its version) or removed (InstanceRef)."""

    process_guid: str
    index: int  # type: ignore[assignment]  # the wire's name; shadows tuple.index
    instance_guid: str
    version: int = 1  # the definition version it was started for: a claim names it


class Running(NamedTuple):
    """RunningInstanceReport on the wire."""

    process_guid: str
    index: int  # type: ignore[assignment]  # the wire's name; shadows tuple.index
    instance_guid: str
    host: str
    ports: Sequence[HostPort]


class Crash(NamedTuple):
    """CrashReport on the wire."""

    process_guid: str
    index: int  # type: ignore[assignment]  # the wire's name; shadows tuple.index
    instance_guid: str
    reason: str


@dataclass(slots=True)
class Reports:
    """One cell's pending (or in-flight) reports: the fields of CellLifecycle, in its field order."""

    claimed: list[Ref] = field(default_factory=list)
    running: list[Running] = field(default_factory=list)
    crashed: list[Crash] = field(default_factory=list)
    removed: list[Ref] = field(default_factory=list)
    tasks_started: list[str] = field(default_factory=list)
    tasks_completed: list[TaskCompletion] = field(default_factory=list)

    def __len__(self) -> int:
        return (
            len(self.claimed)
            + len(self.running)
            + len(self.crashed)
            + len(self.removed)
            + len(self.tasks_started)
            + len(self.tasks_completed)
        )

    def then(self, newer: Reports) -> Reports:
        """These reports followed by newer ones, field by field (a retried batch stays ahead)."""
        return Reports(
            self.claimed + newer.claimed,
            self.running + newer.running,
            self.crashed + newer.crashed,
            self.removed + newer.removed,
            self.tasks_started + newer.tasks_started,
            self.tasks_completed + newer.tasks_completed,
        )


def _refs(refs: list[Ref], out: list[str]) -> None:
    enc = encode_basestring
    out.append(
        ",".join(
            f'{{"process_guid":{enc(p)},"index":{i},"instance_guid":{enc(g)}}}' for p, i, g, _ in refs
        )
    )


def _claims(refs: list[Ref], out: list[str]) -> None:
    enc = encode_basestring
    out.append(
        ",".join(
            f'{{"process_guid":{enc(p)},"index":{i},"instance_guid":{enc(g)},"version":{v}}}'
            for p, i, g, v in refs
        )
    )


def write_cell(reports: Reports, out: list[str]) -> None:
    """Append the JSON of CellLifecycle(reports) to `out` (pieces to join)."""
    enc = encode_basestring
    out.append('{"claimed":[')
    _claims(reports.claimed, out)
    out.append('],"running":[')
    out.append(
        ",".join(
            f'{{"process_guid":{enc(p)},"index":{i},"instance_guid":{enc(g)},"host":{enc(h)},"ports":['
            + ",".join(f'{{"container_port":{q.container_port},"host_port":{q.host_port}}}' for q in ports)
            + "]}"
            for p, i, g, h, ports in reports.running
        )
    )
    out.append('],"crashed":[')
    out.append(
        ",".join(
            f'{{"process_guid":{enc(p)},"index":{i},"instance_guid":{enc(g)},"reason":{enc(why)}}}'
            for p, i, g, why in reports.crashed
        )
    )
    out.append('],"removed":[')
    _refs(reports.removed, out)
    out.append('],"tasks_started":[')
    out.append(",".join(map(enc, reports.tasks_started)))
    out.append('],"tasks_completed":[')
    out.append(",".join(c.model_dump_json() for c in reports.tasks_completed))
    out.append("]}")


def host_json(cells: Sequence[tuple[str, Reports]]) -> bytes:
    """HostLifecycle(cells=dict(cells)).model_dump_json(), as UTF-8 bytes (cell ids are distinct)."""
    out = ['{"cells":{']
    for n, (cell_id, reports) in enumerate(cells):
        out.append(f"{',' if n else ''}{encode_basestring(cell_id)}:")
        write_cell(reports, out)
    out.append("}}")
    return "".join(out).encode()
