"""How every listing (apps, instances, cells, tasks, tokens, blobs, rollout history...) fits the terminal.

The first column names the row and is never truncated, nor are the columns a listing names as kept (an
instance's cell and figures). When the table is wider than the terminal, the widest other column is
shortened first (ending in `…`, or wrapped if it is a column that wraps), then the next widest, down to its
header's longest word (the header wraps at its spaces); if even that does not fit, columns are left out
(those the listing names to drop, in its order, then the rightmost) and the caption says which (`-o wide`
shows every column, whole). rich's own policy shrinks every column alike, names first to `…`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

# A shortened column keeps at least this many characters, and its header's longest word.
MIN_COLUMN = 5


def natural_width(console: Console, options: ConsoleOptions, column: Column) -> int:
    """The width `column` needs to show its header and every cell whole, on one line each."""
    wide = options.update(width=1_000_000)
    cells: Iterable[Any] = [column.header, *column.cells]
    return max((Measurement.get(console, wide, cell).maximum if not isinstance(cell, Text) else cell.cell_len)
               for cell in cells)


def plan_widths(natural: list[int], least: list[int], budget: int, extra_per_column: int,
                fixed: int, drop_first: Sequence[int] = ()) -> tuple[list[int], list[int]]:
    """Which columns are shown (their positions) and the content width of each, for a table whose borders
    and padding take `fixed` + `extra_per_column` per column, in `budget` characters. A column whose `least`
    is its natural width (column 0 always) is never shortened; the widest of the others is shortened first,
    none below its `least`. Where even that does not fit, the columns of `drop_first` are left out in that
    order, then the rightmost."""
    floors = [natural[i] if i == 0 else min(natural[i], least[i]) for i in range(len(natural))]
    shown = list(range(len(natural)))
    order = [i for i in drop_first if 0 < i < len(natural)]
    order += [i for i in reversed(shown[1:]) if i not in order]

    def needed(columns: list[int]) -> int:
        return sum(floors[i] for i in columns) + fixed + extra_per_column * len(columns)

    for column in order:
        if needed(shown) <= budget:
            break
        shown.remove(column)
    widths = {i: natural[i] for i in shown}
    excess = sum(widths.values()) + fixed + extra_per_column * len(shown) - budget
    while excess > 0:
        candidates = [i for i in shown if widths[i] > floors[i]]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: (widths[i], i))
        widths[widest] -= 1
        excess -= 1
    return [widths[i] for i in shown], shown


class ListingTable(Table):
    """A rich Table that fits itself to the width it is printed in (see the module's docstring). `keep`:
    headers of columns never shortened; `drop`: headers of columns left out first where all cannot fit."""

    def __init__(self, *args: Any, keep: Collection[str] = (), drop: Sequence[str] = (), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.keep = frozenset(keep)
        self.drop = tuple(drop)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.columns and options.max_width < 100_000:
            self._fit(console, options)
        yield from super().__rich_console__(console, options)

    def _fit(self, console: Console, options: ConsoleOptions) -> None:
        natural = [natural_width(console, options, column) for column in self.columns]
        left, right = self.padding[3], self.padding[1]
        fixed = (2 if self.box and self.show_edge else 0) - (1 if self.box else 0)
        if not self.pad_edge:
            fixed -= left + right
        extra_per_column = left + right + (1 if self.box else 0)
        headers = [str(column.header) for column in self.columns]
        # A header wraps at its spaces (MEMORY / FREE) rather than lose letters: its longest word stays.
        least = [whole if header in self.keep else max(MIN_COLUMN, *(len(word) for word in header.split()))
                 for header, whole in zip(headers, natural, strict=True)]
        drop_first = [headers.index(header) for header in self.drop if header in headers]
        widths, shown = plan_widths(natural, least, options.max_width, extra_per_column, fixed, drop_first)
        hidden = [headers[i] for i in range(len(headers)) if i not in shown]
        self.columns[:] = [self.columns[i] for i in shown]
        for column, width, i in zip(self.columns, widths, shown, strict=True):
            if width < natural[i]:
                column.max_width = width
                if column.no_wrap:  # a column made to wrap (an error message) wraps; the others end in …
                    column.overflow = "ellipsis"
                if isinstance(column.header, str):
                    column.header = Text.from_markup(column.header, overflow="ellipsis")
                    column.header.no_wrap = False
            else:
                column.min_width = natural[i]  # never shrunk by rich's own policy (names above all)
        if hidden:
            note = f"not shown (-o wide): {', '.join(hidden)}"
            self.caption = f"{self.caption}; {note}" if self.caption else note
            self.caption_justify = "left"
