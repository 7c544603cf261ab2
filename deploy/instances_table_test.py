"""`vendue instances` with usage at 80, 100 and 120 columns: the cell and the figures never cut."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest

from common.models import ActualLRP

from .client_cmd import instances_table, short_bytes, usage_cells
from .terminal_text import safe_console

MIB = 1024 * 1024


def rendered(table: object, width: int) -> list[str]:
    out = safe_console(width=width, file=io.StringIO())
    out.print(table)
    return out.file.getvalue().splitlines()  # type: ignore[attr-defined]


def test_bytes_and_usage_read_as_cf_app_shows_them() -> None:
    assert [short_bytes(n) for n in (512, 12 * 1024, 201 * MIB, 1024 * MIB, 1536 * MIB)] == [
        "512B", "12K", "201M", "1G", "1.5G"]
    usage = {"cpu": 0.031, "memory_bytes": 201 * MIB, "memory_limit_bytes": 256 * MIB,
             "disk_bytes": 12 * MIB, "disk_limit_bytes": 1024 * MIB}
    assert usage_cells(usage) == ("3.1%", "201M/256M", "12M/1G")
    assert usage_cells({**usage, "cpu": None})[0] == "-"  # one sample so far
    assert usage_cells(None) == ("-", "-", "-")


@pytest.mark.parametrize("width", [80, 100, 120])
def test_the_instances_table_with_usage_fits_the_terminal_and_keeps_names_and_figures(width: int) -> None:
    now = datetime.now(UTC)
    actuals = [ActualLRP(process_guid="web", index=i, instance_guid=f"guid-{i}", cell_id="cell-z1-0007",
                         zone="zone-eu-west-1a", state="RUNNING" if i else "CRASHED",
                         address=f"127.0.0.1:{27000 + i}", since=now, crash_count=i,
                         crash_reason="" if i else "exited with status 137 (out of memory: the OOM killer)",
                         modification_tag={"epoch": "e", "index": 0}) for i in range(3)]
    usage = {f"guid-{i}": {"cpu": 0.031 * i, "memory_bytes": 201 * MIB, "memory_limit_bytes": 256 * MIB,
                           "disk_bytes": 12 * MIB, "disk_limit_bytes": 1024 * MIB} for i in range(1, 3)}
    lines = rendered(instances_table(actuals, "web: 3 desired", usage), width)
    assert max(len(line) for line in lines) <= width, "\n".join(lines)
    rows = [line for line in lines if "cell-z1-0007" in line]
    assert len(rows) == 3, "\n".join(lines)  # one line per instance: the cell's name whole, never wrapped
    assert "6.2%" in rows[2] and "201M/256M" in rows[2] and "12M/1G" in rows[2], rows[2]
    assert rows[0].count("-") >= 3  # the crashed one has no figures
