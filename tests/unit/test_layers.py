"""The layers of the code import only what the manual's map allows (docs/development.md,
"Layout"): each folder of ``shared/`` is a layer, the writer and the explorer are adapters over
``shared``, and nothing in production imports the dataset tools at import time.

The rules are read from the imports themselves (``ast``), including imports inside functions, so a
new module that breaks the layering fails here with the offending import named.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: root modules of ``shared``: what every layer uses, and which of them each may import
ROOT_MODULES = {
    "shared.errors": set(),
    "shared.config": set(),
    "shared.enum_errors": set(),
    "shared.validation_words": set(),
    "shared.models": {"shared.errors", "shared.enum_errors"},
    "shared.privacy": {"shared.errors"},
    "shared.auth": {"shared.errors"},
    "shared.cards_file": {"shared.errors", "shared.models"},
    "shared.metrics": set(),
    "shared.private_files": set(),
}
BASICS = set(ROOT_MODULES)
#: root modules of ``shared`` that compose the whole core (the process resources, the arq worker)
COMPOSITION = ("shared.resources", "shared.worker")

#: layer -> the layers (or single modules) it may import, besides itself and the root modules
ALLOWED: dict[str, set[str]] = {
    "shared.store": set(),
    "shared.index": set(),
    "shared.projection": {"shared.store", "shared.index"},
    "shared.recall": {"shared.store", "shared.index"},
    "shared.workflow": set(),
    "shared.evaluation": {"shared.store", "shared.index", "shared.projection", "shared.recall"},
    "shared.archive": {"shared.store", "shared.index", "shared.projection", "shared.recall",
                       "shared.workflow", "shared.evaluation"},
    "shared.resources": {"shared.store", "shared.index", "shared.projection", "shared.archive"},
    "shared.worker": {"shared.store", "shared.projection", "shared.resources",
                      "shared.evaluation", "shared.recall"},
    "writer": {"shared"},
    "explorer_plugin": {"shared"},
    "tools": set(),
}
#: single-module exceptions, each with its reason
EXCEPTIONS = {
    # `memarc convert-bird` imports the converter inside its handler, never at import time
    ("writer.cli.dataset_commands", "tools.bird_cards"),
}
FIRST_PARTY = ("shared", "writer", "explorer_plugin", "tools")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every first-party module ``path`` imports (``from shared import x`` counts as
    ``shared.x``)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names
                         if (ROOT / Path(*f"{base}.{a.name}".split("."))).with_suffix(".py").exists()
                         or (ROOT / Path(*f"{base}.{a.name}".split("."))).is_dir())
    return {m for m in found if m.split(".")[0] in FIRST_PARTY}


def _layer(module: str) -> str:
    if module in ROOT_MODULES or module == "shared":
        return module
    parts = module.split(".")
    if parts[0] == "shared" and len(parts) >= 2:
        return f"shared.{parts[1]}"
    return parts[0]


def _allowed(module: str, target: str) -> bool:
    source = _layer(module)
    if target == "shared" or target in BASICS:
        return source not in ROOT_MODULES or target in ROOT_MODULES[source] or target == source
    if source in ROOT_MODULES or source == "shared":
        return False
    if _layer(target) == source or (module, target) in EXCEPTIONS:
        return True
    return any(target == rule or target.startswith(rule + ".") for rule in ALLOWED[source])


def test_every_import_follows_the_layer_map():
    modules = [p for package in FIRST_PARTY for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(modules) > 50
    wrong = sorted(f"{_module_name(p)} imports {target}" for p in modules
                   for target in _imports(p) if not _allowed(_module_name(p), target))
    assert wrong == []


def test_the_layer_map_knows_every_folder_of_shared():
    folders = {f"shared.{p.name}" for p in (ROOT / "shared").iterdir()
               if p.is_dir() and (p / "__init__.py").exists() and p.name != "data"}
    modules = {f"shared.{p.stem}" for p in (ROOT / "shared").glob("*.py") if p.stem != "__init__"}
    assert folders <= set(ALLOWED)
    assert modules <= set(ROOT_MODULES) | set(COMPOSITION)


def _all_imports(path: Path) -> set[str]:
    """Every module ``path`` imports, first-party or not, as written."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def test_only_the_store_imports_the_database_driver():
    """Driver errors are translated once, in the store: nothing above it sees psycopg."""
    runtime = [p for package in ("shared", "writer", "explorer_plugin")
               for p in sorted((ROOT / package).rglob("*.py"))]
    outside = sorted(f"{_module_name(p)} imports {m}" for p in runtime for m in _all_imports(p)
                     if m.split(".")[0] in ("psycopg", "psycopg_pool")
                     and not _module_name(p).startswith("shared.store"))
    assert outside == []


def test_every_archive_error_class_lives_in_shared_errors():
    import shared.errors

    def subclasses(cls: type) -> set[type]:
        return {cls} | {c for sub in cls.__subclasses__() for c in subclasses(sub)}

    names = {c.__name__ for c in subclasses(shared.errors.ArchiveError)}
    elsewhere = []
    for package in FIRST_PARTY:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "shared" / "errors.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                         for b in getattr(node, "bases", [])}
                if isinstance(node, ast.ClassDef) and bases & names:
                    elsewhere.append(f"{_module_name(path)}.{node.name}")
    assert elsewhere == []


def test_the_rules_reject_an_import_against_the_layers():
    """The check itself can fail: imports the map forbids are refused."""
    assert not _allowed("shared.store.cards", "shared.recall.verified")
    assert not _allowed("shared.index.edge", "shared.store.database")
    assert not _allowed("shared.models", "shared.store.cards")
    assert not _allowed("shared.recall.verified", "shared.archive.cards")
    assert not _allowed("shared.archive.cards", "writer.app")
    assert not _allowed("shared.store.listing", "explorer_plugin.views")
    assert not _allowed("shared.workflow.rules", "shared.store.cards")
    assert not _allowed("shared.projection.queue", "shared.resources")
    assert not _allowed("shared.resources", "shared.worker")
    assert _allowed("shared.archive.cards", "shared.recall.verified")
