"""A listing that fits the terminal: the widest column that may be cut is cut first (with an ellipsis),
then the next widest, until the table fits; the columns that name things are never cut.

Rich alone shrinks every column in proportion, cutting names as readily as an address; piped output (a
console a million columns wide) is never cut.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rich.table import Table
from rich.text import Text

MIN_CUT_WIDTH = 4  # a cut column keeps at least this much: "ab…" still says something
# A rich table of the default box draws "│ " before each column, " " after it and a last "│".
PER_COLUMN = 3


def fitted_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], width: int,
                 keep: Collection[str] = (), right: Collection[str] = (), drop: Sequence[str] = ()) -> Table:
    """A table of `rows` (rich markup) under `headers` at most `width` columns wide where it can be: the
    columns not in `keep` are cut, widest first; where cutting them all to MIN_CUT_WIDTH is not enough,
    the columns in `drop` are left out, in that order (--json and a wider terminal still show them)."""
    shown = list(range(len(headers)))
    widths = [Text(h).cell_len for h in headers]
    for row in rows:
        for n, cell in enumerate(row):
            widths[n] = max(widths[n], Text.from_markup(cell).cell_len)

    def least(columns: list[int]) -> int:
        return sum(widths[n] if headers[n] in keep else min(widths[n], MIN_CUT_WIDTH) for n in columns) + \
            PER_COLUMN * len(columns) + 1

    for name in drop:
        if least(shown) <= width:
            break
        shown = [n for n in shown if headers[n] != name]
    excess = sum(widths[n] for n in shown) + PER_COLUMN * len(shown) + 1 - width
    limits: dict[int, int] = {}
    while excess > 0:
        cuttable = [n for n in shown if headers[n] not in keep and widths[n] > MIN_CUT_WIDTH]
        if not cuttable:
            break
        widest = max(cuttable, key=lambda n: widths[n])  # one column at a time: the widest stays cut first
        widths[widest] -= 1
        limits[widest] = widths[widest]
        excess -= 1
    table = Table(title=title, title_justify="left")
    for n in shown:
        table.add_column(headers[n], no_wrap=True, overflow="ellipsis", max_width=limits.get(n),
                         justify="right" if headers[n] in right else "left")
    for row in rows:
        table.add_row(*(row[n] for n in shown))
    return table
