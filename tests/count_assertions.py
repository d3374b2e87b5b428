"""How big the suite is, for docs/development.md: the ``assert`` statements of ``tests/`` (AST
nodes, so a string or comment saying "assert" does not count) and of each file.

    .venv/bin/python tests/count_assertions.py [--files]

The count of tests is pytest's: ``.venv/bin/python -m pytest --collect-only -q | tail -1``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def count(path: Path) -> int:
    """The ``assert`` statements of one Python file."""
    return sum(isinstance(node, ast.Assert) for node in ast.walk(ast.parse(path.read_text())))


def main() -> None:
    per_file = {p.relative_to(HERE.parent): count(p) for p in sorted(HERE.rglob("*.py"))}
    if "--files" in sys.argv:
        for path, n in per_file.items():
            print(f"{n:6d}  {path}")
    print(f"{sum(per_file.values())} assert statements in {len(per_file)} files")


if __name__ == "__main__":
    main()
