"""The dependency rule, checked on the source: the domain and the ground floor (`concurrency/`)
import only the standard library and themselves; the application layer imports no adapter, facade
or SDK. (import-linter checks the same contracts in `make lint`; this test also knows what "standard
library" means.)"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dcaf_like"


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def modules_of(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("path", modules_of("domain"), ids=lambda p: p.name)
def test_the_domain_imports_only_the_standard_library_and_itself(path):
    for name in imported_modules(path):
        root = name.split(".")[0]
        assert root in sys.stdlib_module_names or name.startswith("dcaf_like.domain"), (
            f"{path.name} imports {name}"
        )


@pytest.mark.parametrize("path", modules_of("concurrency"), ids=lambda p: p.name)
def test_the_ground_floor_imports_only_the_standard_library_and_itself(path):
    for name in imported_modules(path):
        root = name.split(".")[0]
        assert root in sys.stdlib_module_names or name.startswith("dcaf_like.concurrency"), (
            f"{path.name} imports {name}"
        )


@pytest.mark.parametrize("path", modules_of("application"), ids=lambda p: p.name)
def test_the_application_layer_imports_only_the_standard_library_the_domain_and_itself(path):
    for name in imported_modules(path):
        root = name.split(".")[0]
        inward = name.startswith(("dcaf_like.domain", "dcaf_like.application", "dcaf_like.concurrency"))
        assert root in sys.stdlib_module_names or inward, f"{path.name} imports {name}"


def import_cycles(package: str = "dcaf_like") -> list[list[str]]:
    """Groups of the package's modules that import each other, directly or through others (Tarjan)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph(package)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in edges[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while (member := stack.pop()) != module:
                group.append(member)
            if group:
                cycles.append(sorted([module, *group]))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_a_cycle_is_found_where_there_is_one(tmp_path, monkeypatch):
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclic import b\n")
    (package / "b.py").write_text("from cyclic import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (package / "c.py").write_text("from cyclic import a\n")
    assert import_cycles("cyclic") == [["cyclic.a", "cyclic.b"]]


def test_no_module_of_the_package_imports_itself_through_others():
    assert import_cycles() == []
