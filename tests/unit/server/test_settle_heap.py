"""The heap of a process this package serves from (docs/benchmarks.md, "Figures behind the code's
choices": `settle_heap`). Each check runs in a child process: the suite's own collector stays as it is."""

from __future__ import annotations

import subprocess
import sys


def _in_a_child(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_a_served_process_collects_less_often_and_skips_what_it_loaded_at_start():
    said = _in_a_child(
        "import gc; from dcaf_like.server.serving import settle_heap, SERVER_GC_THRESHOLDS;"
        "settle_heap(); print(gc.get_threshold() == SERVER_GC_THRESHOLDS, gc.get_freeze_count() > 0,"
        " SERVER_GC_THRESHOLDS[0] > 700)"
    )

    assert said == "True True True"


def test_thresholds_the_process_chose_itself_are_kept():
    said = _in_a_child(
        "import gc; gc.set_threshold(2000, 5, 5); from dcaf_like.server.serving import settle_heap;"
        "settle_heap(); print(gc.get_threshold())"
    )

    assert said == "(2000, 5, 5)"
