"""Text an app or a rep wrote, made safe to print on the operator's terminal.

A task's result, a crash or failure reason, an address, a cell id: all of it arrives from programs the
operator does not control. Printed raw, `ESC ] 0 ; TITLE BEL` retitles the terminal, a CSI sequence moves
the cursor or clears the screen, a C1 control (0x80-0x9f) does the same on terminals that take 8-bit
controls, and a bidi override makes a line read other than it is. So every human-readable line and table
cell of the CLI goes through `plain` (or `markup` where rich parses markup): each such character becomes
its visible Python escape (`\\x1b`, `\\x9b`, `\\u202e`), so nothing is lost and nothing acts. `--json` output
is left to the JSON encoder, which escapes every control character already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

# Bidi controls: the embeddings and overrides, the isolates, and the marks (invisible, they reorder text).
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
# C0 and DEL, C1 (ECMA-48's 8-bit controls: 0x9b is CSI, 0x9d OSC), bidi: every one shown, none obeyed.
_UNSAFE = (*range(0x00, 0x20), *range(0x7F, 0xA0), *_BIDI)


def _escaped(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ONE_LINE = {code: _escaped(code) for code in _UNSAFE}
_MULTI_LINE = {code: text for code, text in _ONE_LINE.items() if code not in (0x0A, 0x09)}


def plain(text: object, *, lines: bool = True) -> str:
    """`text` with every control character, C1 control and bidi control shown as its escape; newline and
    tab kept when `lines` (multi-line text such as a task's result), escaped too when not."""
    return str(text).translate(_MULTI_LINE if lines else _ONE_LINE)


def markup(text: object, *, lines: bool = True) -> str:
    """`plain(text)` escaped for rich markup too: `[link=...]` or `[red]` in an app's text stays text."""
    from rich.markup import escape

    return escape(plain(text, lines=lines))


def echo(text: object, *, err: bool = False) -> None:
    """typer.echo for lines that carry text from elsewhere (a BBS's error, a task's result)."""
    typer.echo(plain(text), err=err)


def safe_console(**options: Any) -> Console:
    """A rich Console that shows control characters in every string it renders as escapes. A net under
    `markup`, which each caller still applies to foreign text (markup is parsed from the whole string)."""
    from rich.console import Console

    class _SafeConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Any:
            return super().render_str(plain(text), **kwargs)

    return _SafeConsole(**options)
