"""How every listing (apps, instances, cells, tasks, tokens, blobs, rollout history...) fits the terminal.

The first column names the row and is never truncated. When the table is wider than the terminal, the
widest other column is shortened first (ending in `…`, or wrapped if it is a column that wraps), then the
next widest, down to its header's longest word (the header wraps at its spaces); if even that does not
fit, the rightmost columns are left out and the caption says which (`-o wide` shows every column,
whole). rich's own policy shrinks every column alike, names first to `…`.
"""

from __future__ import annotations

from collections.abc import Iterable
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
                fixed: int) -> tuple[list[int], int]:
    """The content width of each column, and how many columns (from the left) are shown, for a table whose
    borders and padding take `fixed` + `extra_per_column` per column, in `budget` characters. Column 0
    keeps its natural width; the widest of the others is shortened first, none below its `least`."""
    shown = len(natural)

    def floor(i: int) -> int:
        return natural[i] if i == 0 else min(natural[i], least[i])

    while shown > 1 and sum(floor(i) for i in range(shown)) + fixed + extra_per_column * shown > budget:
        shown -= 1
    widths = natural[:shown]
    excess = sum(widths) + fixed + extra_per_column * shown - budget
    while excess > 0:
        candidates = [i for i in range(1, shown) if widths[i] > floor(i)]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: (widths[i], i))
        widths[widest] -= 1
        excess -= 1
    return widths, shown


class ListingTable(Table):
    """A rich Table that fits itself to the width it is printed in (see the module's docstring)."""

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
        # A header wraps at its spaces (MEMORY / FREE) rather than lose letters: its longest word stays.
        least = [max(MIN_COLUMN, *(len(word) for word in str(column.header).split()))
                 for column in self.columns]
        widths, shown = plan_widths(natural, least, options.max_width, extra_per_column, fixed)
        hidden = [str(column.header) for column in self.columns[shown:]]
        del self.columns[shown:]
        for column, width, whole in zip(self.columns, widths, natural[:shown], strict=True):
            if width < whole:
                column.max_width = width
                if column.no_wrap:  # a column made to wrap (an error message) wraps; the others end in …
                    column.overflow = "ellipsis"
                if isinstance(column.header, str):
                    column.header = Text.from_markup(column.header, overflow="ellipsis")
                    column.header.no_wrap = False
            else:
                column.min_width = whole  # never shrunk by rich's own policy (names above all)
        if hidden:
            note = f"not shown (-o wide): {', '.join(hidden)}"
            self.caption = f"{self.caption}; {note}" if self.caption else note
            self.caption_justify = "left"
