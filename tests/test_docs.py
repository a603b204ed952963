"""Every Python block in the README and in docs/ runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, match in enumerate(BLOCK.finditer(path.read_text())):
            found.append((f"{path.relative_to(ROOT)}#{i + 1}", match.group(1)))
    return found


@pytest.mark.parametrize(("where", "code"), blocks(), ids=[w for w, _ in blocks()])
def test_the_documented_code_runs(where, code):
    # dont_inherit: a block runs as a reader would run it, without this module's `from __future__` import.
    exec(compile(code, where, "exec", dont_inherit=True), {"__name__": "__docs__"})


def test_the_protocol_lists_each_route_once():
    text = (ROOT / "docs" / "protocol.md").read_text()
    table = text.split("| Route | What it does |", 1)[1].split("\n\n", 1)[0]
    routes = [
        route
        for row in table.splitlines()[2:]
        for route in re.findall(r"`([A-Z]+ /[^`?]*)", row.split(" | ")[0])
    ]

    assert "DELETE /api/conversations/{id}" in routes
    assert sorted(r for r in routes if routes.count(r) > 1) == []
