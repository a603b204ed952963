"""Fail on a measured figure in a comment or docstring under dcaf_like/ (ADR 17: a comment keeps the
reason only; figures go in docs/benchmarks.md, where they say how they were measured), and on a
reference to this project's tracker (``(issue 26)``), which a reader of the code cannot follow (an
upstream project's public issue, ``uvicorn issue 3149``, is a reference a reader can follow).

    python scripts/lint_figures.py [PATH ...]     # default: dcaf_like/; exit 1 naming each line
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from pathlib import Path

FIGURE = re.compile(
    r"callgrind|µs\b|instructions per|(?:^|[(;,#] ?)issue \d|\d+(?:\.\d+)? ?ms instead"
    r"|\b(?:cost|costs|took|takes|saves?) (?:about )?a (?:tenth|third|quarter|sixth|half)"
    r"|\ba (?:tenth|third|quarter|sixth) of (?:an?|the) [\w' ]*(?:cost|CPU|time)\b"
    r"|\b\d+(?:\.\d+)?x (?:faster|slower)",
    re.IGNORECASE,
)


def prose(source: str) -> list[tuple[int, str]]:
    """The comments and string literals standing alone (docstrings) of `source`, with their lines."""
    found = []
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for i, token in enumerate(tokens):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
        elif token.type == tokenize.STRING:
            before = tokens[i - 1].type if i else tokenize.NEWLINE
            if before in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
                for offset, line in enumerate(token.string.splitlines()):
                    found.append((token.start[0] + offset, line))
    return found


def offences(path: Path) -> list[str]:
    return [
        f"{path}:{line}: a figure or a tracker reference in code ({match.group(0)!r}): "
        "keep the reason, put the figure in docs/benchmarks.md"
        for line, text in prose(path.read_text())
        if (match := FIGURE.search(text))
    ]


def main(paths: list[str]) -> int:
    roots = [Path(p) for p in paths or ["dcaf_like"]]
    files = [f for root in roots for f in ([root] if root.is_file() else sorted(root.rglob("*.py")))]
    found = [line for f in files for line in offences(f)]
    if found:
        print("\n".join(found), file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
