"""SQL runs only in the store: the named queries and every ``execute`` stay in ``shared/store/``.

Every named query of ``shared/store/queries.sql`` is defined once, used, and run only by modules
under ``shared/store/``; no other runtime module executes SQL.

Read from the source (the ``ast`` of every module), so a query or an ``execute`` that slips into
another layer fails here before review.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUERIES = ROOT / "shared" / "store" / "queries.sql"
STORE = "shared/store/"
#: the runtime packages, where only the store may run SQL
RUNTIME = ("shared", "writer", "explorer_plugin")
#: every Python package of the repository, where only the store may import ``Q``
EVERYWHERE = (*RUNTIME, "tests", "bench")

#: TEMPORARY. The workflow modules still run their own SQL until the workflow split (issue 12,
#: the other helper's branch) moves it into shared/store/workflow.py and
#: shared/store/schema_changes.py. This set must be empty after that merge (the lead empties it,
#: then deletes shared/store/repository.py, the old names these modules still import).
NOT_YET_MOVED = {"shared/workflow/proposals.py", "shared/workflow/schema_changes.py"}
#: TEMPORARY, as above: a workflow query that no module uses, left to the workflow split.
UNUSED_NOT_YET_MOVED = {"wf_card_revisions"}


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


def _imports_repository(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
                node.module == "shared.store.repository"
                or (node.module == "shared.store" and any(a.name == "repository" for a in node.names))):
            return True
    return False


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
    assert sorted(defined - set(used_by) - UNUSED_NOT_YET_MOVED) == [], "queries nobody uses"
    outside = {name: sorted(p for p in paths if not p.startswith(STORE) and p not in NOT_YET_MOVED)
               for name, paths in used_by.items()}
    assert {n: p for n, p in outside.items() if p} == {}


def test_only_the_store_imports_the_queries():
    importers = [path for path, tree in _modules(*EVERYWHERE).items()
                 if _imports_q(tree) and not path.startswith(STORE) and path not in NOT_YET_MOVED]
    assert importers == []


def test_no_runtime_module_outside_the_store_executes_sql():
    found = {path: lines for path, tree in _modules(*RUNTIME).items()
             if not path.startswith(STORE) and path not in NOT_YET_MOVED
             and (lines := _executes(tree))}
    assert found == {}


def test_the_old_repository_module_serves_only_the_modules_not_yet_moved():
    importers = {path for path, tree in _modules(*EVERYWHERE).items() if _imports_repository(tree)}
    assert importers <= NOT_YET_MOVED
