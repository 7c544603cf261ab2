"""The width policy every listing shares (deploy/listing.py): printed as rich prints to a terminal of 80, 100
and 120 columns, the names stay whole, the widest other column is cut first, nothing passes the edge."""

from __future__ import annotations

import pytest
from rich.console import Console

from .listing import ListingTable, plan_widths

CELL_COLUMNS = ("CELL", "ZONE", "STATE", "MEMORY FREE", "DISK FREE", "CONTAINERS FREE", "INSTANCES",
                "STARTING", "INSECURE", "ISOLATION", "REP")
NAMES = ("cell-zone-a-0-a-rather-long-name", "cell-1", "cell-zone-b-2")


def cells_table() -> ListingTable:
    table = ListingTable(title="3 cell(s)", title_justify="left")
    for column in CELL_COLUMNS:
        table.add_column(column, no_wrap=True)
    for name in NAMES:
        table.add_row(name, "z1", "present, cordoned", "1024 / 4096 MB", "2048 / 8192 MB", "10 / 256", "3",
                      "0", "no", "cgroup-v2 disk:ext4", "https://127.0.0.1:29123/with/a/long/path")
    return table


def printed(table: ListingTable, width: int) -> list[str]:
    console = Console(width=width, color_system=None, force_terminal=False)
    with console.capture() as captured:
        console.print(table)
    return captured.get().splitlines()


@pytest.mark.parametrize("width", [80, 100, 120])
def test_names_stay_whole_and_nothing_passes_the_edge(width: int) -> None:
    lines = printed(cells_table(), width)
    too_long = [line for line in lines if len(line.rstrip()) > width]
    assert too_long == [], f"at {width} columns, expected no line longer, saw {too_long}"
    for name in NAMES:
        shown = "\n".join(lines)
        assert any(f"│ {name} " in line for line in lines), f"{name} not whole at {width}:\n{shown}"


def test_the_widest_other_column_is_cut_first() -> None:
    # REP (40 wide) is cut before anything else: 14 columns too many at 200.
    lines = printed(cells_table(), 200)
    body = "\n".join(lines)
    assert "https://127.0.0.1" in body and "/with/a/long/path" not in body, body
    assert "cgroup-v2 disk:ext4" in body and "present, cordoned" in body and "1024 / 4096 MB" in body, body
    assert max(len(line.rstrip()) for line in lines) <= 200


def test_columns_that_cannot_fit_are_named_in_the_caption() -> None:
    body = "\n".join(printed(cells_table(), 80))
    assert "REP" in body.split("┘")[-1] and "(-o wide)" in body, body
    assert "https://" not in body  # REP left out, not squeezed to nothing


def test_a_wide_console_shows_every_column_whole() -> None:
    body = "\n".join(printed(cells_table(), 1_000_000))
    assert "https://127.0.0.1:29123/with/a/long/path" in body and "…" not in body and "-o wide" not in body


def test_plan_widths_cuts_the_widest_down_to_its_floor_then_leaves_columns_out() -> None:
    # name 10, then 30, 12, 6; 3 per column and 1 for the edge.
    natural, least = [10, 30, 12, 6], [4, 4, 4, 4]
    assert plan_widths(natural, least, 1000, 3, 1) == ([10, 30, 12, 6], [0, 1, 2, 3])
    assert plan_widths(natural, least, 60, 3, 1) == ([10, 19, 12, 6], [0, 1, 2, 3])  # only the widest cut
    assert plan_widths(natural, least, 40, 3, 1) == ([10, 6, 6, 5], [0, 1, 2, 3])  # then level by level
    assert plan_widths(natural, least, 30, 3, 1) == ([10, 5, 5], [0, 1, 2])  # then the rightmost out
    assert plan_widths([60, 30], [4, 4], 20, 3, 1) == ([60], [0])  # the name never shrinks, even past it


def test_kept_columns_are_never_cut_and_named_columns_are_left_out_first() -> None:
    # CELL kept whole; STATE (to drop first) goes before the rightmost columns, before anything is cut
    # below its floor.
    assert plan_widths([4, 20, 10, 8, 8], [4, 20, 5, 5, 5], 50, 3, 1, drop_first=[2]) == (
        [4, 20, 7, 6], [0, 1, 3, 4])
    assert plan_widths([4, 20, 10, 8, 8], [4, 20, 5, 5, 5], 40, 3, 1, drop_first=[2]) == (
        [4, 20, 6], [0, 1, 3])


def test_a_column_made_to_wrap_wraps_instead_of_losing_its_end() -> None:
    table = ListingTable(title="1 app(s)")
    table.add_column("APP", no_wrap=True)
    table.add_column("STRATEGY", no_wrap=True)
    table.add_column("PLACEMENT ERROR")  # wraps
    table.add_row("web", "spread", "insufficient resources: memory " * 4 + "the end")
    lines = printed(table, 80)
    assert max(len(line.rstrip()) for line in lines) <= 80 and "the end" in "\n".join(lines), "\n".join(lines)
