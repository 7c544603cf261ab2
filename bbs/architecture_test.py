"""The BBS's import structure, read from its source (ast): no module of bbs/ imports the auctioneer, the rep
or deploy/ (the placement engine, placement/, is a library and may be), and bbs/'s modules import one
another without a cycle (every import counts, a function's own or a type checker's too: a cycle hidden in
a late import is still one)."""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("auctioneer", "rep", "deploy")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def bbs_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / "bbs").rglob("*.py")) if "migrations" not in p.parts}


def imported(name: str, path: Path, modules: Collection[str] = ()) -> Iterator[str]:
    """Every module `name` imports: a `from X import Y` names X.Y when that is one of `modules`, else X."""
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
                yield submodule if submodule in modules else source


def import_graph() -> dict[str, set[str]]:
    modules = bbs_modules()
    return {
        name: {i for i in imported(name, path, modules) if i in modules and i != name}
        for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for target in sorted(graph[node]):
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


def test_no_bbs_module_imports_the_auctioneer_the_rep_or_deploy() -> None:
    offending = [
        (name, target)
        for name, path in bbs_modules().items()
        for target in imported(name, path)
        if target.split(".")[0] in FORBIDDEN
    ]
    assert offending == [], f"bbs/ must not depend on the services or the CLI: {offending}"


def test_the_bbs_modules_import_one_another_without_a_cycle() -> None:
    graph = import_graph()
    assert "bbs.unit_of_work" in graph and "bbs.operations.cells" in graph, sorted(graph)
    assert "bbs.unit_of_work" in graph["bbs.operations.cells"], "the graph lost the relative imports"
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_a_cycle_is_found() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
