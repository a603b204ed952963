"""The application's modules stay small enough to read whole (issue 37, "The house, round two")."""

from pathlib import Path

import dcaf_like.application

LONGEST = 600
ROOT = Path(dcaf_like.application.__file__).parent


def test_no_application_module_is_over_600_lines() -> None:
    """A module that grows past the limit is split by reason to change, as turn.py and tool_steps.py were."""
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(ROOT.rglob("*.py"))
    }
    assert sizes, "no module found under dcaf_like/application/"
    too_long = {name: lines for name, lines in sizes.items() if lines > LONGEST}
    assert not too_long, f"over {LONGEST} lines: {too_long}"
