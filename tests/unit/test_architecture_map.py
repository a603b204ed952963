"""docs/architecture.md's map matches the package.

- "Where things are": every module under ``dcaf_like/`` (an ``__init__.py`` may be named, need not be)
  is named in the first column of the table by its path relative to ``dcaf_like/``
  (``application/inbox.py``), and every path named there exists.
- The layers table at the top names every folder and top-level module of the package.
- "The dependency rule, enforced": the layers it lists are those of the import-linter ``layers``
  contract in ``pyproject.toml``, in order.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dcaf_like"
DOC = (ROOT / "docs" / "architecture.md").read_text()


def section(title: str) -> str:
    """The text under ``## <title>``, up to the next heading of that level."""
    return DOC.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def named_in_map() -> set[str]:
    """The ``.py`` paths in the first column of the map's table."""
    rows = [line for line in section("Where things are").splitlines() if line.startswith("| ")]
    return {path for row in rows for path in re.findall(r"`([^`]+\.py)`", row.split("|")[1])}


def modules() -> set[str]:
    return {
        path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py") if path.name != "__init__.py"
    }


def test_every_module_of_the_package_is_named_in_where_things_are():
    assert sorted(modules() - named_in_map()) == []


def test_where_things_are_names_no_module_that_is_gone():
    assert sorted(path for path in named_in_map() if not (PACKAGE / path).is_file()) == []


def test_the_layers_table_names_every_folder_and_top_level_module():
    intro = DOC.split("\n## ", 1)[0]
    rows = [line.split("|") for line in intro.splitlines() if line.startswith("| ")]
    named = {name for row in rows[1:] for name in re.findall(r"`([^`]+)`", row[2])}
    packages = {path.name + "/" for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    top_modules = {path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    tops = packages | top_modules

    assert sorted(tops - named) == []


def test_the_dependency_rule_lists_the_layers_of_the_contract():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [contract["layers"] for contract in contracts if contract["type"] == "layers"]
    block = section("The dependency rule, enforced").split("```text\n", 1)[1].split("```", 1)[0]

    assert block.splitlines() == layers
