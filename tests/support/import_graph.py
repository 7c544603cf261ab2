"""The project's import graph, read from the source with `ast` (nothing is imported or run).

Every import counts, those under `if TYPE_CHECKING:` and inside functions too: a cycle or a dependency
hidden in a late import is still one a reader has to untie. Test modules and test helpers are left out.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "placement", "auctioneer", "bbs", "rep", "deploy")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_product_code(path: Path) -> bool:
    return not (
        path.name.endswith("_test.py")
        or path.name in ("conftest.py", "testing.py")
        or "migrations" in path.relative_to(ROOT).parts
    )


def modules(package: str) -> dict[str, Path]:
    """The product modules of a top-level package, by dotted name."""
    return {module_name(p): p for p in sorted((ROOT / package).rglob("*.py")) if is_product_code(p)}


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every module `name` imports: `from X import Y` names X.Y when that is a known module, else X."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield submodule if submodule in known else source


def import_graph(package: str) -> dict[str, set[str]]:
    """Each module of `package` -> the modules it imports, every target kept (inside or outside)."""
    known = modules(package)
    return {name: set(imported(name, path, known)) - {name} for name, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the graph's own modules (the first repeated at the end), or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for target in sorted(t for t in graph[node] if t in graph):
            if target in on_path:
                return [*path[path.index(target):], target]
            if target not in done and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done and (cycle := visit(start)) is not None:
            return cycle
    return None
