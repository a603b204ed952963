"""The dependency rule, checked on the source: the domain imports only the standard library and
itself; the application layer imports no adapter, facade or SDK. (import-linter checks the same
contracts in `make lint`; this test also knows what "standard library" means.)"""

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


@pytest.mark.parametrize("path", modules_of("application"), ids=lambda p: p.name)
def test_the_application_layer_imports_only_the_standard_library_the_domain_and_itself(path):
    for name in imported_modules(path):
        root = name.split(".")[0]
        inward = name.startswith(("dcaf_like.domain", "dcaf_like.application"))
        assert root in sys.stdlib_module_names or inward, f"{path.name} imports {name}"
