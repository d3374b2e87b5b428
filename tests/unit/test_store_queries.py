"""SQL runs only in the store: the named queries and every ``execute`` stay in ``shared/store/``.

Every named query of ``shared/store/queries.sql`` is defined once, used, and run only by modules
under ``shared/store/``; no other runtime module executes SQL. Each query is named and filed after
the store module that runs it (``store/X.py`` runs the ``X_...`` queries of the ``X`` section) and
says what it does in a description line under its name.

Read from the source (the ``ast`` of every module), so a query or an ``execute`` that slips into
another layer fails here before review.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUERIES = ROOT / "shared" / "store" / "queries.sql"
STORE = "shared/store/"
#: the runtime packages, where only the store may run SQL
RUNTIME = ("shared", "writer", "explorer_plugin")
#: every Python package of the repository, where only the store may import ``Q``
EVERYWHERE = (*RUNTIME, "tests", "bench")



def _modules(*packages: str) -> dict[str, ast.Module]:
    return {path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
            for package in packages for path in sorted((ROOT / package).rglob("*.py"))}


def _query_names(tree: ast.Module) -> set[str]:
    """``<name>`` of every ``Q.<name>`` in a module."""
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "Q"}


def _imports_q(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.ImportFrom) and node.module == "shared.store.database"
               and any(alias.name == "Q" for alias in node.names) for node in ast.walk(tree))


def _executes(tree: ast.Module) -> list[int]:
    """Lines that call ``.execute(`` or ``.executemany(`` on anything."""
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("execute", "executemany")]



def _sections() -> dict[str, tuple[str | None, bool]]:
    """Each named query -> (the store module its section names, whether a description follows).

    A section starts with ``-- ==== <module>...(shared/store/<module>.py) ====``."""
    found: dict[str, tuple[str | None, bool]] = {}
    lines = QUERIES.read_text(encoding="utf-8").splitlines()
    module = None
    for i, line in enumerate(lines):
        if header := re.match(r"^-- ==== (\w+)\b.*\(shared/store/(\w+)\.py\b.*====$", line):
            module = header[2] if header[1] == header[2] else None
        elif named := re.match(r"^-- name: (\S+)\s*$", line):
            described = i + 1 < len(lines) and bool(re.match(r"^-- \S", lines[i + 1]))
            found[named[1]] = (module, described)
    return found


def test_every_named_query_is_defined_once():
    names = re.findall(r"^-- name: (\S+)\s*$", QUERIES.read_text(encoding="utf-8"), flags=re.M)
    assert names
    assert [n for n, count in Counter(names).items() if count > 1] == []


def test_every_named_query_is_used_and_only_from_the_store():
    defined = set(re.findall(r"^-- name: (\S+)\s*$", QUERIES.read_text(encoding="utf-8"),
                             flags=re.M))
    used_by: dict[str, set[str]] = {}
    for path, tree in _modules(*EVERYWHERE).items():
        for name in _query_names(tree):
            used_by.setdefault(name, set()).add(path)
    assert sorted(set(used_by) - defined) == [], "Q.<name> without a query in queries.sql"
    assert sorted(defined - set(used_by)) == [], "queries nobody uses"
    outside = {name: sorted(p for p in paths if not p.startswith(STORE))
               for name, paths in used_by.items()}
    assert {n: p for n, p in outside.items() if p} == {}


def test_only_the_store_imports_the_queries():
    importers = [path for path, tree in _modules(*EVERYWHERE).items()
                 if _imports_q(tree) and not path.startswith(STORE)]
    assert importers == []


def test_no_runtime_module_outside_the_store_executes_sql():
    found = {path: lines for path, tree in _modules(*RUNTIME).items()
             if not path.startswith(STORE) and (lines := _executes(tree))}
    assert found == {}


def test_every_query_is_named_and_filed_after_the_store_module_that_runs_it():
    sections = _sections()
    assert len(sections) > 100
    wrong = []
    for path, tree in _modules("shared/store").items():
        module = Path(path).stem
        wrong += [f"{path} runs {name}" for name in _query_names(tree)
                  if not name.startswith(f"{module}_") or sections[name][0] != module]
    assert wrong == []


def test_every_named_query_has_a_description():
    assert [name for name, (_, described) in _sections().items() if not described] == []
