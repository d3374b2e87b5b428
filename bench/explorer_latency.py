"""Latency of the explorer's card list at 50,000 cards against Datasette's own table page.

Datasette's page reads a SQLite copy of the same rows. Run: ``.venv/bin/python bench/explorer_latency.py`` (needs a PostgreSQL
superuser URL, see ``bench/_archive.py``; no models, no index: the list page reads PostgreSQL only).

1. Archive: a fresh database ``memarc_bench_explorer`` migrated to 003, then 50,000 cards in
   workspace ``bench`` (plus 5,000 in ``other``, so row-level security has rows to hide), derived
   from the bundled BIRD cards: copies with new ids, title variants, origins (import / workflow /
   manual with their sources), creation and update times spread over two years, the originals'
   concepts and dependencies, links between the cards of one copy, a recorded projection for 98 %
   of the cards and open (pending or failed) operations for the rest, a done operation for every
   card. Rows are written with COPY. Then migration 004 (the list indexes) is applied and timed.
2. SQLite copy: the same rows read back from PostgreSQL into one ``cards`` table with an FTS5
   table (``cards_fts``: title, content) and indexes on the filtered and sorted columns, as a
   Datasette user would publish it; dependencies become JSON arrays ``databases`` (database names)
   and ``tables`` (``database.table``) so that Datasette's ``__arraycontains`` filter expresses the
   one-entry rule for database and database + table.
3. One Datasette process serves both: the explorer plugin (root actor, its own read-only pool) and
   the SQLite file (``suggest_facets`` off, facet and SQL time limits raised to 10 s so that every
   requested facet is computed rather than skipped). Each scenario requests the same page from both
   through ``datasette.client``, alternating, after two warm-up requests each; facets are requested
   on both sides (family, origin, concepts, databases, and tables when a database is filtered).
4. The scenarios run three times in the same run: with migration 004; with 004 but without its
   trigram indexes (no pg_trgm, as on the embedded server); and before 004 (its indexes dropped,
   003's restored, text search as the ILIKE condition 003 ran under row-level security in every
   statement of the page). ``--explain`` instead prints the execution time of every statement
   of the list page per scenario (``--plans`` with the plans).

Text search differs by design: the explorer matches a case-insensitive substring of the card's
visible text (title, scope, concepts, content values: migration 008's ``search_text``, stored
lower-cased since 015 and matched as ``LIKE lower(pattern)``, which is ILIKE's own definition);
Datasette's ``_search`` matches FTS5 tokens of title and content. The printed totals show both counts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import admin_url  # noqa: E402
from bench.recall_latency import pct  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.models import ImportCard  # noqa: E402
from shared.store.database import MIGRATIONS_DIR  # noqa: E402
from shared.store.migrations import migrate  # noqa: E402
from shared.models import PROJECTION_FORMAT  # noqa: E402

WORKSPACE = "bench"
LIST_MIGRATION = 4
NOW = datetime(2026, 11, 1, tzinfo=timezone.utc)
TITLE_VARIANTS = ("", "Finance: ", "Ops: ", "Sales: ", "Marketing: ", "Support: ", "Risk: ",
                  "Product: ", "HR: ", "Legal: ", "Data team: ")
CONTENT_NOTES = ("", "Checked with the data owner.", "Confirmed in the quarterly review.",
                 "Applies since the 2025 migration.", "Reviewed by the analytics guild.")

# (label, explorer parameters, Datasette table-page parameters)
SCENARIOS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("no filter, newest first", {}, {"_sort_desc": "updated_at"}),
    ("family", {"family": "sql_rule"}, {"family__exact": "sql_rule", "_sort_desc": "updated_at"}),
    ("text search", {"q": "driver"}, {"_search": "driver", "_sort_desc": "updated_at"}),
    ("family+database+concept+text",
     {"family": "solved_question", "database": "formula_1", "concepts": "moderate", "q": "race"},
     {"family__exact": "solved_question", "databases__arraycontains": "formula_1",
      "concepts__arraycontains": "moderate", "_search": "race", "_sort_desc": "updated_at"}),
    ("database+table (one entry), by title",
     {"database": "financial", "table": "loan", "_sort": "title"},
     {"tables__arraycontains": "financial.loan", "databases__arraycontains": "financial",
      "_sort": "title"}),
    ("origin+updated range",
     {"origin": "workflow", "updated_after": "2026-03-01", "updated_before": "2026-06-01"},
     {"origin__exact": "workflow", "updated_at__gte": "2026-03-01", "updated_at__lt": "2026-06-01",
      "_sort_desc": "updated_at"}),
    ("concept+database, page 5",
     {"concepts": "card_games", "database": "card_games", "_page": 5},
     {"concepts__arraycontains": "card_games", "databases__arraycontains": "card_games",
      "_sort_desc": "updated_at", "_page": 5}),
    ("no filter, page 50", {"_page": 50}, {"_sort_desc": "updated_at", "_page": 50}),
]


def _url(base: str, dbname: str) -> str:
    p = urlsplit(base)
    return urlunsplit((p.scheme, p.netloc, "/" + dbname, p.query, p.fragment))


def derive(originals: list[ImportCard], n: int, seed: int = 5) -> list[dict[str, Any]]:
    """``n`` cards from the originals: copy ``k`` of original ``i`` is the ``k * len + i``-th
    card, with a title variant, an origin, times and links to copy ``k`` of the link targets."""
    rng = random.Random(seed)
    keys = {c.key: i for i, c in enumerate(originals)}
    out: list[dict[str, Any]] = []
    copies = -(-n // len(originals))
    for k in range(copies):
        ids = [uuid.uuid4() for _ in originals]
        for i, c in enumerate(originals):
            if len(out) == n:
                return out
            roll = rng.random()
            if roll < 0.8:
                origin, source = "import", {"dataset": "bird_minidev", "record": f"{c.key}#{k}"}
            elif roll < 0.95:
                origin = "workflow"
                source = {"session_id": f"sess-{rng.randrange(10**6):06d}",
                          "decision_ids": [f"d{rng.randrange(100)}"]}
            else:
                origin, source = "manual", None
            created = NOW - timedelta(days=rng.uniform(0, 730))
            updated = created + (NOW - created) * rng.random() ** 2
            content = dict(c.content)
            note = CONTENT_NOTES[k % len(CONTENT_NOTES)]
            if note:
                first = next(iter(content))
                content[first] = f"{content[first]} {note}"
            prefix = TITLE_VARIANTS[k % len(TITLE_VARIANTS)]
            title = (prefix + c.title)[:200] if k < len(TITLE_VARIANTS) else \
                f"{prefix}{c.title}"[:190] + f" (v{k})"
            links = [(ids[keys[link.target]], link.meaning) for link in c.links
                     if link.target in keys and keys[link.target] < len(originals)]
            out.append({"id": ids[i], "family": c.family, "title": title, "scope": c.scope,
                        "origin": origin, "source": source, "concepts": list(c.concepts),
                        "content": content, "created_at": created, "updated_at": updated,
                        "dependencies": c.dependencies, "links": links})
    return out


def write_postgres(url: str, workspace: str, cards: list[dict[str, Any]], seed: int = 7) -> None:
    """COPY ``cards`` with their dependencies, links, projections and operations (as superuser:
    row-level security does not apply, the rows carry their workspace)."""
    rng = random.Random(seed)
    present = {c["id"] for c in cards}
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SET search_path TO memory")
        with cur.copy("COPY cards (workspace_id, id, family, title, scope, origin, source, "
                      "concepts, content, revision, created_at, updated_at) FROM STDIN") as cp:
            for c in cards:
                cp.write_row((workspace, c["id"], c["family"], c["title"], c["scope"],
                              c["origin"], Jsonb(c["source"]) if c["source"] else None,
                              c["concepts"], Jsonb(c["content"]), 1, c["created_at"],
                              c["updated_at"]))
        with cur.copy("COPY card_dependencies (workspace_id, card_id, ordinal, database_name, "
                      "schema_name, table_name, column_name) FROM STDIN") as cp:
            for c in cards:
                for i, d in enumerate(c["dependencies"]):
                    cp.write_row((workspace, c["id"], i, d.database, d.schema, d.table, d.column))
        with cur.copy("COPY card_links (workspace_id, source_id, target_id, meaning) "
                      "FROM STDIN") as cp:
            for c in cards:
                for target, meaning in dict(c["links"]).items():
                    if target in present:
                        cp.write_row((workspace, c["id"], target, meaning))
        with cur.copy("COPY projection_ops (workspace_id, card_id, op, revision, status, "
                      "attempts, last_error, created_at, updated_at, completed_at) "
                      "FROM STDIN") as cp:
            projected = []
            for c in cards:
                at = c["updated_at"]
                roll = rng.random()
                if roll < 0.98:
                    cp.write_row((workspace, c["id"], "upsert", 1, "done", 1, None, at, at, at))
                    projected.append(c)
                elif roll < 0.995:
                    cp.write_row((workspace, c["id"], "upsert", 1, "pending", 0, None, at, at,
                                  None))
                else:
                    cp.write_row((workspace, c["id"], "upsert", 1, "failed", 5,
                                  "IndexUnavailable: Qdrant is unavailable: ConnectError", at, at,
                                  None))
        with cur.copy("COPY projections (workspace_id, card_id, revision, format, projected_at) "
                      "FROM STDIN") as cp:
            for c in projected:
                cp.write_row((workspace, c["id"], 1, PROJECTION_FORMAT, c["updated_at"]))
        conn.commit()


def export_sqlite(url: str, workspace: str, path: Path) -> int:
    """The workspace's cards, read back from PostgreSQL, as a Datasette-ready SQLite file."""
    with psycopg.connect(url) as conn:
        conn.execute("SET search_path TO memory")
        rows = conn.execute("""
            SELECT 'mem-' || c.id::text, c.title, c.family, c.scope, c.origin, c.concepts,
                   c.content, c.revision, c.created_at, c.updated_at,
                   coalesce(array_agg(ARRAY[d.database_name, d.schema_name, d.table_name,
                                            d.column_name] ORDER BY d.ordinal)
                            FILTER (WHERE d.card_id IS NOT NULL), '{}'),
                   CASE WHEN p.revision = c.revision THEN 'current'
                        WHEN EXISTS (SELECT 1 FROM projection_ops o WHERE o.card_id = c.id
                                     AND o.status = 'failed') THEN 'failed'
                        ELSE 'pending' END
            FROM cards c LEFT JOIN card_dependencies d ON d.card_id = c.id
            LEFT JOIN projections p ON p.card_id = c.id
            WHERE c.workspace_id = %s
            GROUP BY c.id, p.revision""", [workspace]).fetchall()
    if path.exists():
        path.unlink()
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE cards (id TEXT PRIMARY KEY, title TEXT, family TEXT, scope TEXT, origin TEXT,
            concepts TEXT, databases TEXT, tables TEXT, dependencies TEXT, content TEXT,
            revision INTEGER, created_at TEXT, updated_at TEXT, index_status TEXT);
    """)

    def iso(t: datetime) -> str:
        return t.astimezone(timezone.utc).isoformat(timespec="seconds")

    out = []
    for (cid, title, family, scope, origin, concepts, content, revision, created, updated, deps,
         status) in rows:
        databases = sorted({d[0] for d in deps})
        tables = sorted({f"{d[0]}.{d[2]}" for d in deps if d[2]})
        qualified = [".".join(x for x in d if x) for d in deps]
        out.append((cid, title, family, scope, origin, json.dumps(concepts), json.dumps(databases),
                    json.dumps(tables), json.dumps(qualified), "\n".join(content.values()),
                    revision, iso(created), iso(updated), status))
    db.executemany("INSERT INTO cards VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", out)
    db.executescript("""
        CREATE VIRTUAL TABLE cards_fts USING fts5(title, content, content="cards");
        INSERT INTO cards_fts (rowid, title, content) SELECT rowid, title, content FROM cards;
        CREATE INDEX cards_family ON cards (family);
        CREATE INDEX cards_origin ON cards (origin);
        CREATE INDEX cards_updated ON cards (updated_at);
        CREATE INDEX cards_created ON cards (created_at);
        CREATE INDEX cards_title ON cards (title);
        ANALYZE;
    """)
    db.commit()
    db.close()
    return len(out)


def build_archive(n: int, other: int, dbname: str = "memarc_bench_explorer"
                  ) -> tuple[str, float, dict[str, str], dict[str, str]]:
    """The benchmark database: ``(url, seconds to apply migration 004, indexes it added, indexes
    it dropped)``, indexes as ``{name: definition}``."""
    base = admin_url()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    url = _url(base, dbname)
    login = urlsplit(base).username
    before = Path(tempfile.mkdtemp(prefix="memarc-migrations-"))
    for path in MIGRATIONS_DIR.glob("[0-9][0-9][0-9]_*.sql"):
        if int(path.name[:3]) < LIST_MIGRATION:
            shutil.copy(path, before)
    migrate(url, "memory", runtime_login=login, folder=before)
    shutil.rmtree(before)
    originals = read_cards(bundled_cards())
    for workspace, count, seed in ((WORKSPACE, n, 5), ("other", other, 6)):
        # the workspace row of the schema before 004, written like the cards below (the
        # bootstrap of today, create_workspace, reads tables of later migrations)
        with psycopg.connect(url) as conn:
            conn.execute("INSERT INTO memory.workspaces (id, language) VALUES (%s, 'en')",
                         [workspace])
        t0 = time.perf_counter()
        write_postgres(url, workspace, derive(originals, count, seed))
        print(f"wrote {count:,} cards to workspace {workspace!r} in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    indexes_before = _indexes(url)
    t0 = time.perf_counter()
    applied = migrate(url, "memory", runtime_login=login)
    seconds = time.perf_counter() - t0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    after = _indexes(url)
    added = {k: v for k, v in after.items() if indexes_before.get(k) != v}
    dropped = {k: v for k, v in indexes_before.items() if after.get(k) != v}
    print(f"applied {applied} in {seconds:.1f} s; indexes added: {', '.join(added) or 'none'}; "
          f"replaced or dropped: {', '.join(dropped) or 'none'}", flush=True)
    return url, seconds, added, dropped


def _indexes(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT indexname, indexdef FROM pg_indexes "
                                 "WHERE schemaname = 'memory'").fetchall())


@contextlib.contextmanager
def _ilike_in_place() -> Any:
    """The list query as it was before migration 004: ILIKE on the RLS-filtered cards, in every
    statement of the page."""
    from psycopg import sql as _sql

    from shared.store import listing

    originals = listing._list_where, listing.text_matches, listing.list_cards_and_facets
    function = _sql.SQL("c.id IN (SELECT card_text_matches(%(q_like)s))")
    ilike = _sql.SQL("(c.title ILIKE %(q_like)s OR c.content::text ILIKE %(q_like)s)")

    def where(query: Any, skip: str | None = None, matches: Any = None) -> Any:
        cond, params = originals[0](query, skip, matches)
        return _replace(cond, function, ilike), params

    async def no_matches(conn: Any, query: Any) -> None:
        return None

    async def by_parts(conn: Any, query: Any, limit: int = 30) -> Any:
        found, total = await listing.list_cards(conn, query)
        return found, total, await listing.facet_counts(conn, query, limit)

    listing._list_where, listing.text_matches = where, no_matches
    listing.list_cards_and_facets = by_parts  # a statement per part, as before 015
    try:
        yield
    finally:
        listing._list_where, listing.text_matches, listing.list_cards_and_facets = originals


def _replace(composed: Any, old: Any, new: Any) -> Any:
    """``composed`` with the part equal to ``old`` replaced by ``new`` (one level of joins)."""
    from psycopg import sql as _sql

    if composed == old:
        return new
    if isinstance(composed, _sql.Composed):
        return _sql.Composed([_replace(part, old, new) for part in composed])
    return composed


def _datasette_params(params: dict[str, Any]) -> list[tuple[str, Any]]:
    pairs = [(k, v) for k, v in params.items() if k != "_page"]
    facets = [("_facet", "family"), ("_facet", "origin"), ("_facet_array", "concepts"),
              ("_facet_array", "databases")]
    if any(k.startswith("databases__") for k in params):
        facets.append(("_facet_array", "tables"))
    return pairs + facets + [("_size", 20)]


async def _next_token(ds: Any, path: str, pairs: list[tuple[str, Any]], page: int) -> str | None:
    """Datasette paginates by keyset (``_next``): walk to page ``page`` once (without facets,
    which do not change the token), keep its token."""
    pairs = [p for p in pairs if not p[0].startswith("_facet")]
    token = None
    for _ in range(page - 1):
        r = await ds.client.get(path + ".json",
                                params=pairs + ([("_next", token)] if token else []))
        token = r.json()["next"]
        if token is None:
            break
    return token


async def measure(ds: Any, cookies: dict[str, str], repeat: int) -> list[dict[str, Any]]:
    """p50/p95 per scenario: the explorer page, Datasette's table page with the same facets, and
    Datasette's page without facets; requests rotate between the three."""
    results = []
    for label, mine, theirs in SCENARIOS:
        ours_path = f"/-/memory/{WORKSPACE}"
        their_pairs = _datasette_params(theirs)
        if theirs.get("_page", 1) > 1:
            token = await _next_token(ds, "/explorer/cards", their_pairs, theirs["_page"])
            their_pairs.append(("_next", token))
        bare = [p for p in their_pairs if not p[0].startswith("_facet")]
        calls = {
            "memarc": functools.partial(ds.client.get, ours_path, params=mine, cookies=cookies),
            "datasette": functools.partial(ds.client.get, "/explorer/cards", params=their_pairs),
            "nofacets": functools.partial(ds.client.get, "/explorer/cards", params=bare),
        }
        times: dict[str, list[float]] = {side: [] for side in calls}
        for side, call in calls.items():
            for _ in range(2):
                r = await call()
                if r.status_code != 200:
                    raise RuntimeError(f"{side} {label}: HTTP {r.status_code}: {r.text[:300]}")
        for i in range(repeat):
            order = list(calls)[i % 3:] + list(calls)[:i % 3]
            for side in order:
                t0 = time.perf_counter()
                r = await calls[side]()
                times[side].append(time.perf_counter() - t0)
                if r.status_code != 200:
                    raise RuntimeError(f"{side} {label}: HTTP {r.status_code}")
        ours = (await ds.client.get(ours_path + ".json", params=mine, cookies=cookies)).json()
        theirs_json = (await ds.client.get("/explorer/cards.json", params=their_pairs)).json()
        results.append({
            "label": label,
            "memarc_total": ours["total"],
            "datasette_total": theirs_json["filtered_table_rows_count"],
            "memarc_rows": len(ours["cards"]), "datasette_rows": len(theirs_json["rows"]),
            **{f"{side}_{q}": pct(v, p) * 1000 for side, v in times.items()
               for q, p in (("p50", 0.5), ("p95", 0.95))},
        })
    return results


def print_table(title: str, results: list[dict[str, Any]]) -> None:
    print(title)
    print(f"{'scenario':<38} {'total memarc/ds':>16} {'memarc p50':>10} {'p95':>8} "
          f"{'datasette p50':>13} {'p95':>8} {'ratio p50':>9} {'ratio p95':>9} "
          f"{'ds no facets p50':>16} {'p95':>8}")
    for r in results:
        totals = f"{r['memarc_total']:,}/{r['datasette_total']:,}"
        print(f"{r['label']:<38} {totals:>16} {r['memarc_p50']:>8.1f}ms {r['memarc_p95']:>6.1f}ms "
              f"{r['datasette_p50']:>11.1f}ms {r['datasette_p95']:>6.1f}ms "
              f"{r['memarc_p50'] / r['datasette_p50']:>9.2f} "
              f"{r['memarc_p95'] / r['datasette_p95']:>9.2f} "
              f"{r['nofacets_p50']:>14.1f}ms {r['nofacets_p95']:>6.1f}ms")
    print("ratio = memarc / Datasette with the same facets (below 1: the explorer is faster)")
    print(flush=True)


class _Explaining:
    """A connection proxy that runs every statement under EXPLAIN ANALYZE first and prints its
    execution time (and, with ``plans``, the plan)."""

    def __init__(self, conn: Any, plans: bool) -> None:
        self._conn, self._plans = conn, plans

    async def execute(self, stmt: Any, params: Any = None) -> Any:
        from psycopg import sql as _sql

        text = stmt if isinstance(stmt, str) else stmt.as_string(self._conn)
        cur = await self._conn.execute(_sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + _sql.SQL(text),
                                       params)
        plan = [r["QUERY PLAN"] for r in await cur.fetchall()]
        print(f"{plan[-1].strip():<30} {' '.join(text.split())[:110]}")
        if self._plans:
            print("\n".join("    " + line for line in plan))
        return await self._conn.execute(stmt, params)


async def explain(url: str, plans: bool) -> None:
    """Time every statement of the list page for each scenario (as the reader role, in a
    read-only transaction, as the explorer runs them)."""
    from explorer_plugin.params import list_query
    from shared.store import listing
    from shared.store.database import Database

    class _Req:
        def __init__(self, params: dict[str, Any]) -> None:
            from datasette.utils import MultiParams

            self.args = MultiParams({k: [str(v)] for k, v in params.items()})

    db = Database(url, "memory")
    await db.open()
    try:
        for label, mine, _ in SCENARIOS:
            query, _ = list_query(_Req(mine))
            print(f"== {label}: {mine}")
            async with db.transaction(WORKSPACE, role="reader", read_only=True) as conn:
                proxy = _Explaining(conn, plans)
                await listing.list_cards_and_facets(proxy, query)  # as the explorer's page
    finally:
        await db.close()


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cards", type=int, default=50_000)
    ap.add_argument("--other", type=int, default=5_000, help="cards of a second workspace")
    ap.add_argument("--repeat", type=int, default=30, help="timed requests per scenario and side")
    ap.add_argument("--phases", type=int, choices=(1, 2, 3), default=3,
                    help="1: with migration 004 only; 2: also without pg_trgm; 3: also before 004")
    ap.add_argument("--keep", action="store_true", help="reuse the database of a previous run")
    ap.add_argument("--dbname", default="memarc_bench_explorer",
                    help="the benchmark database (dropped and created unless --keep)")
    ap.add_argument("--only", metavar="TEXT",
                    help="run only the scenarios whose label contains TEXT (e.g. 'text')")
    ap.add_argument("--explain", action="store_true",
                    help="print the execution time of every list-page statement and stop")
    ap.add_argument("--plans", action="store_true", help="with --explain: print the plans too")
    args = ap.parse_args(argv)
    from datasette.app import Datasette

    if args.only:
        global SCENARIOS
        SCENARIOS = [s for s in SCENARIOS if args.only in s[0]]
        if not SCENARIOS:
            ap.error(f"no scenario label contains {args.only!r}")

    if args.keep:
        url, seconds, added, dropped = (_url(admin_url(), args.dbname), float("nan"),
                                        {}, {})
    else:
        url, seconds, added, dropped = build_archive(args.cards, args.other, args.dbname)
    if args.explain:
        await explain(url, args.plans)
        return
    folder = Path(tempfile.mkdtemp(prefix="memarc-bench-explorer-"))
    path = folder / "explorer.db"
    t0 = time.perf_counter()
    rows = export_sqlite(url, WORKSPACE, path)
    print(f"exported {rows:,} cards to SQLite ({path.stat().st_size / 1e6:.1f} MB) in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    ds = Datasette([str(path)], metadata={"plugins": {"memarc-explorer": {
        "database_url": url, "schema": "memory"}}},
        settings={"suggest_facets": False, "facet_time_limit_ms": 10_000,
                  "sql_time_limit_ms": 10_000, "default_page_size": 20})
    await ds.invoke_startup()
    cookies = {"ds_actor": ds.sign({"a": {"id": "root"}}, "actor")}
    with_indexes = await measure(ds, cookies, args.repeat)
    print_table(f"with migration 004 ({len(added)} indexes: {', '.join(added)})", with_indexes)
    phases = [("with migration 004", with_indexes)]
    trigram = [name for name in added if "trgm" in name]
    if trigram and args.phases >= 2:
        # the embedded server's case: no pg_trgm, so no trigram indexes
        with psycopg.connect(url, autocommit=True) as conn:
            for name in trigram:
                conn.execute(f"DROP INDEX memory.{name}")
        phases.append(("004 without pg_trgm", await measure(ds, cookies, args.repeat)))
        print_table("migration 004 without its trigram indexes (no pg_trgm, as on the embedded "
                    "server)", phases[-1][1])
    if added and args.phases == 3:
        # back to 003's indexes, and text search as the ILIKE condition 003 ran
        with psycopg.connect(url, autocommit=True) as conn:
            for name in added:
                conn.execute(f"DROP INDEX IF EXISTS memory.{name}")
            for definition in dropped.values():
                conn.execute(definition)
            conn.execute("ANALYZE")
        with _ilike_in_place():
            phases.append(("before 004", await measure(ds, cookies, args.repeat)))
        print_table("before migration 004 (003's indexes, text search by ILIKE under RLS)",
                    phases[-1][1])
        print("explorer p50 / p95 (ms) per phase")
        print(f"{'scenario':<38} " + " ".join(f"{name:>22}" for name, _ in phases))
        for i, (label, _, _) in enumerate(SCENARIOS):
            cells = [f"{r[i]['memarc_p50']:.0f} / {r[i]['memarc_p95']:.0f}" for _, r in phases]
            print(f"{label:<38} " + " ".join(f"{c:>22}" for c in cells))
    print(f"\nmigration 004 on {args.cards + args.other:,} cards: {seconds:.1f} s")
    from explorer_plugin import resources

    await resources.close(ds)
    shutil.rmtree(folder)


if __name__ == "__main__":
    asyncio.run(main())
