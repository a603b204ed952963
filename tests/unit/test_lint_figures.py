"""The lint that keeps measured figures and tracker references out of the code's comments (ADR 17;
docs/benchmarks.md, "Figures behind the code's choices")."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "lint_figures.py"


@pytest.fixture(scope="module")
def lint():
    spec = importlib.util.spec_from_file_location("lint_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "offending",
    [
        "# keywords cost a third more\nx = 1\n",
        'def f():\n    """Quicker: 11.4 ms instead of 17.5."""\n',
        "# measured with callgrind\n",
        "x = 1  # see (issue 26)\n",
        '"""Sorted first: about a tenth of the framework\'s cost of a turn."""\n',
    ],
)
def test_a_figure_or_a_tracker_reference_in_a_comment_or_docstring_fails(lint, tmp_path, offending):
    source = tmp_path / "module.py"
    source.write_text(offending)

    assert lint.main([str(source)]) == 1


def test_the_reason_alone_and_figures_in_code_pass(lint, tmp_path):
    source = tmp_path / "module.py"
    source.write_text(
        '"""A lease is renewed after a third of the lease; see uvicorn issue 3149."""\n'
        "# Positional: every turn builds these (docs/benchmarks.md).\n"
        'TIMEOUT_MS = "11.4 ms instead of 17.5"  # a string in code, not prose\n'
    )

    assert lint.main([str(source)]) == 0


def test_the_package_passes(lint):
    assert lint.main([str(SCRIPT.parents[1] / "dcaf_like")]) == 0
