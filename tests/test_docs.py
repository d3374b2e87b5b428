"""The manual (docs/) documents what the code has (issue 26), in the spirit of Datasette's
documentation tests (``tests/test_docs.py`` there): the lists are read from the code, never
copied, so a setting, command, option, route or design section added without its documentation
fails here with its name.

- ``mkdocs build --strict`` succeeds (a broken link or anchor is a warning, so an error);
- every setting (``shared.config.SETTINGS``, and every ``MEMARC_*`` variable the runtime reads)
  is in ``docs/settings.md``;
- every ``memarc`` command and subcommand has its heading in ``docs/cli.md``, and each of its
  options appears in that command's section (or, ``-c`` and the like, in the options of every
  client command);
- every route and method of the writer app is in ``docs/http-api.md`` as `` `METHOD /path` ``;
- every ``DESIGN §n`` the code cites (``§5 step 3`` is ``§5.3``) has its heading in
  ``docs/design.md``;
- ``bench/`` holds what reproduces a figure (issue 36): no patch files, and every script is
  named in ``bench/README.md`` with its command.

No service is needed: the app is built as ``tests/test_limits.py`` builds it for its OpenAPI
document (``create_app(load_settings({}))``), which connects to nothing.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: the runtime packages whose environment variables are settings an operator may set
RUNTIME_PACKAGES = ("shared", "writer", "explorer_plugin", "tools")
#: where the code cites the design: sources, SQL, the compose file
CITING = ("*.py", "*.sql", "*.yaml")
#: methods Litestar answers on its own for every route
IMPLICIT_METHODS = {"OPTIONS", "HEAD"}


def doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


# ---- the build ----

def test_the_manual_builds_with_warnings_as_errors(tmp_path):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.exists():
        pytest.fail(f"{mkdocs} is missing: install the docs extra (pip install -e '.[docs]', "
                    "which the test extra includes)")
    done = subprocess.run([str(mkdocs), "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists()
    for page in ("design", "settings", "cli", "http-api"):
        assert (tmp_path / "site" / f"{page}.html").exists(), page  # use_directory_urls: false


def test_the_readmes_links_into_the_manual_exist():
    """The README is outside the site (mkdocs does not check it): its links into ``docs/``."""
    links = re.findall(r"\]\((docs/[^)#]+)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(links) >= 11
    assert [link for link in links if not (ROOT / link).is_file()] == []


# ---- settings ----

def runtime_variables() -> set[str]:
    """Every setting of ``shared.config.SETTINGS``, and every whole ``MEMARC_*`` name in the
    runtime packages' sources (the CLI's ``MEMARC_URL`` and the like are read outside the table;
    a name ending in ``_`` is a prefix in a message, not a variable)."""
    from shared.config import SETTINGS

    names = {row.variable for row in SETTINGS}
    for package in RUNTIME_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            names |= set(re.findall(r"\bMEMARC_[A-Z0-9_]*[A-Z0-9]\b",
                                    path.read_text(encoding="utf-8")))
    return names


def test_every_setting_is_in_the_settings_chapter():
    documented = set(re.findall(r"`(MEMARC_[A-Z0-9_]+)`", doc("settings.md")))
    names = runtime_variables()
    assert len(names) > 40
    assert sorted(names - documented) == []


# ---- the CLI ----

def commands() -> dict[str, argparse.ArgumentParser]:
    """``"memarc list"``, ``"memarc workspace create"``, …: every command line that runs a
    handler, with its parser (the commands with subcommands too, as ``memarc workspace``)."""
    from writer.cli import build_parser

    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if words:
            found[" ".join(["memarc", *words])] = parser
        for action in nested:
            for name, child in action.choices.items():
                walk(child, [*words, name])

    walk(build_parser(), [])
    return found


def cli_sections() -> dict[str, str]:
    """``docs/cli.md``'s sections by heading (``### memarc list`` → its text)."""
    parts = re.split(r"^#{2,3} (.+)$", doc("cli.md"), flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_command_has_its_section_in_the_cli_chapter():
    sections = cli_sections()
    found = commands()
    assert len(found) > 35
    top = sorted(name for name in found if name.count(" ") == 1)
    assert [name for name in top if name not in sections] == []
    text = doc("cli.md")
    nested = sorted(name for name in found if name.count(" ") > 1)
    assert [name for name in nested if f"`{name} " not in text and f"`{name}`" not in text] == []


def test_every_option_is_in_its_commands_section():
    sections = cli_sections()
    common = sections["Options of every client command"]
    missing = []
    for name, parser in commands().items():
        top = " ".join(name.split()[:2])
        section = sections.get(top, "") + common
        for action in parser._actions:
            spellings = [o for o in action.option_strings if o not in ("-h", "--help", "--json")]
            if spellings and not any(re.search(rf"(?<![\w-]){re.escape(o)}\b", section)
                                     for o in spellings):
                missing.append(f"{name} {'/'.join(spellings)}")
    assert missing == []


# ---- the HTTP API ----

def routes() -> list[str]:
    """`` `METHOD /path` `` of every route and method of the writer (path parameters without
    their types: ``{workspace_id}``); the MCP endpoint, a mounted ASGI app, as ``POST /mcp``."""
    from shared.config import load_settings
    from writer.app import create_app

    app = create_app(load_settings({}))
    found = []
    for route in app.routes:
        path = re.sub(r"\{(\w+):[^}]+\}", r"{\1}", route.path)
        methods = set(getattr(route, "methods", None) or ()) - IMPLICIT_METHODS
        for method in sorted(methods or {"POST"}):
            found.append(f"`{method} {path}`")
    return found


def test_every_route_is_in_the_http_api_chapter():
    found = routes()
    assert len(found) > 50 and "`POST /api/workspaces/{workspace_id}/memory/search`" in found
    text = doc("http-api.md")
    assert [route for route in found if route not in text] == []


# ---- the design ----

def sources() -> list[Path]:
    """The repository's files of the :data:`CITING` kinds, outside hidden folders (the venv, the
    embedded state) and the built site."""
    found = []
    for top in sorted(ROOT.iterdir()):
        if top.name.startswith(".") or top.name == "site":
            continue
        paths = [top] if top.is_file() else top.rglob("*")
        found += [p for p in paths if p.is_file() and any(p.match(c) for c in CITING)]
    return found


def cited_sections() -> dict[str, set[str]]:
    """Each design section the code cites (``"5.3"``) with the files that cite it. Read:
    ``DESIGN §3``, ``§3-4`` (a range), ``§3, §5``, ``§4 and §8``, ``§5 step 3`` and
    ``§5 steps 3-4`` (steps of §5), across line breaks."""
    cited: dict[str, set[str]] = {}
    section = r"§\d+(?:\.\d+)?(?:-\d+)?"
    pattern_text = (rf"DESIGN\s+({section}(?:\s*(?:,|and)\s*{section})*)"
                    r"(?:\s+steps?\s+(\d+)(?:\s*-\s*(\d+))?)?")
    for path in sources():
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in re.finditer(pattern_text, text):
            numbers = []
            for part in re.split(r"\s*(?:,|and)\s*", match.group(1)):
                bounds = [b.strip().lstrip("§") for b in part.split("-")]
                if len(bounds) == 2 and "." not in part:
                    numbers += [str(n) for n in range(int(bounds[0]), int(bounds[1]) + 1)]
                else:
                    numbers.append(bounds[0])
            if match.group(2):
                last = int(match.group(3) or match.group(2))
                numbers += [f"{numbers[-1]}.{s}" for s in range(int(match.group(2)), last + 1)]
            for n in numbers:
                cited.setdefault(n, set()).add(str(path.relative_to(ROOT)))
    return cited


def design_headings() -> set[str]:
    """The numbers of ``docs/design.md``'s headings (``## §5 Verified recall`` → ``"5"``)."""
    return set(re.findall(r"^#{2,4} §(\d+(?:\.\d+)?) \S", doc("design.md"), flags=re.M))


def test_the_citation_reader_reads_every_form():
    """The forms of citation the code uses, read as they mean (so the next test checks them)."""
    cited = cited_sections()
    for n in ("2", "3", "4", "5", "5.3", "6", "7", "8", "9", "10", "11", "12"):
        assert n in cited, n
    assert "5.1" in cited and "5.4" in cited  # "§5 step 1", "§5 steps 3-4"


def test_every_cited_design_section_has_its_heading():
    headings = design_headings()
    cited = cited_sections()
    assert {n: sorted(files)[:3] for n, files in cited.items() if n not in headings} == {}


def test_the_design_chapter_says_what_design_means():
    assert re.search(r'"DESIGN §n" means\s+section §n of this chapter', doc("design.md"))


# ---- bench/ ----

#: bench modules that are no scripts: the package and the scripts' shared helper
BENCH_HELPERS = {"__init__.py", "_archive.py"}
#: scripts whose README section is being written elsewhere (none now)
BENCH_PENDING: set[str] = set()


def test_bench_holds_what_reproduces_a_figure_with_its_command():
    """Issue 36: a dropped experiment is a paragraph of bench/README's "Tried and dropped"
    naming the commit to ``git show``, not a patch or a script left in the folder; every script
    in ``bench/`` is run by a command line of bench/README.md."""
    bench = ROOT / "bench"
    assert sorted(str(p.relative_to(ROOT)) for p in bench.rglob("*.patch")) == []
    readme = (bench / "README.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in bench.glob("*.py"))
    unnamed = [name for name in scripts if name not in BENCH_HELPERS | BENCH_PENDING
               and not re.search(rf"\.venv/bin/python bench/{re.escape(name)}\b", readme)]
    assert unnamed == []
    assert "## Tried and dropped" in readme

