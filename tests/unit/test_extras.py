"""A missing optional dependency is reported one way (dcaf_like/extras.py): what needs it and the one
command that installs its extra, the missing module named on the error."""

from __future__ import annotations

import ast
from pathlib import Path

import dcaf_like
from dcaf_like.extras import install, missing

PACKAGE = Path(dcaf_like.__file__).parent


def test_the_error_names_what_needs_the_extra_the_command_and_the_missing_module() -> None:
    cause = ImportError("No module named 'agno'", name="agno")

    error = missing("AgnoRuntime needs agno", "agno", cause)

    assert str(error) == 'AgnoRuntime needs agno: pip install "dcaf-like[agno]"'
    assert error.name == "agno"
    assert install("local") == 'pip install "dcaf-like[local]"'


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string nodes that are docstrings (which may show the command to a reader)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def test_no_module_writes_an_install_command_of_its_own() -> None:
    """Every error about a missing extra goes through dcaf_like.extras: one wording, one package name."""
    written = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "extras.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
            if ("dcaf-like[" in text or "dcaf_like[" in text) and id(node) not in docstrings:
                written.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert written == []
