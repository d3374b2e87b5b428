"""Card listings: the list query, a page of cards, facet counts and the text search.

One :class:`ListQuery` serves the API list, the CLI list and the explorer list. The WHERE clause
is composed here with :mod:`psycopg.sql` (values always bound); the text search runs through the
owner function ``listing_text_matches`` (migration 004) over the card's visible text (the
``search_text`` column of migration 008, lower-cased since 015: title, scope, concepts and content
values, never the content's keys or JSON syntax); a list page with text search comes from one
statement over ``card_text_match_rows`` (015), which returns the matching cards' listed columns.
Functions run on a connection from :meth:`shared.store.database.Database.transaction`.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import msgspec
from psycopg import AsyncConnection, sql

from shared import models
from shared.errors import InvalidInput
from shared.models import Card
from shared.store import cards
from shared.store.database import Q


class ListQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Filters, sort and page of a card listing (API list, CLI list, explorer list).

    - ``q``: a ``mem-`` card id, or a case-insensitive literal substring of the card's visible
      text: its title, scope, concepts or a content value (the SQL included), not a content key;
    - ``family``, ``origin``: any of the values given;
    - ``concepts``: all of them;
    - ``database`` / ``schema`` / ``table`` / ``column``: one dependency entry must carry every
      level given (never pieced together from two entries); a gap (a column without its table,
      a table without its database) is refused;
    - ``updated_after`` / ``updated_before``: ``updated_at`` range (UTC, inclusive / exclusive);
    - ``sort``: ``updated`` (default, newest first), ``created`` (newest first), ``title`` or
      ``family`` (A-Z); ``desc`` reverses the default; ties always break by id.
    """

    q: str | None = None
    family: list[str] = []
    origin: list[str] = []
    concepts: list[str] = []
    database: str | None = None
    schema: str | None = None
    table: str | None = None
    column: str | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    sort: models.Sort = "updated"
    desc: bool | None = None
    page: int = 1
    per_page: int = 20


#: The column of each sort (:data:`shared.models.SORTS`) and whether it is descending by default.
SORT_ORDER: dict[models.Sort, tuple[str, bool]] = {
    "updated": ("c.updated_at", True),
    "created": ("c.created_at", True),
    "title": ("lower(c.title)", False),
    "family": ("c.family", False),
}
#: Facets of a listing: family, origin, concepts, database, table.
FACETS = ("family", "origin", "concepts", "database", "table")


def _text_pattern(query: ListQuery) -> str | None:
    """The ILIKE pattern of a text search (``q`` that is not a card id), else None."""
    if not query.q or models.parse_card_id(query.q) is not None:
        return None
    return "%" + query.q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def text_matches(conn: AsyncConnection, query: ListQuery) -> list[uuid.UUID] | None:
    """Ids of the cards whose visible text (title, scope, concepts, content values) contains
    ``query.q`` (case-insensitive, literally), or None
    when ``q`` is absent or a card id. One search serves every statement of a list page.

    :raises InvalidInput: any filter out of bounds (checked before searching).
    """
    _list_where(query)  # checks every filter
    pattern = _text_pattern(query)
    if pattern is None:
        return None
    cur = await conn.execute(Q.listing_text_matches, {"pattern": pattern})
    return [row["id"] for row in await cur.fetchall()]


def card_filter(query: ListQuery) -> tuple[sql.Composable, dict[str, Any]]:
    """The WHERE condition (over ``cards c``) and parameters of ``query``'s filters, as the card
    list applies them (the curation reports filter their cards with it); sort and page are the
    caller's.

    :raises InvalidInput: any filter out of bounds.
    """
    return _list_where(query)


def _list_where(query: ListQuery, skip: str | None = None,
                matches: list[uuid.UUID] | None = None) -> tuple[sql.Composable, dict[str, Any]]:
    """WHERE clause and parameters of a listing; ``skip`` leaves out one facet's own filter;
    ``matches`` are the text search's ids from :func:`text_matches` (searched here otherwise).
    No filter at all gives empty parameters.

    :raises InvalidInput: any filter out of bounds.
    """
    for f in query.family:
        if f not in models.FAMILIES:
            raise InvalidInput(f"unknown family {f!r}; allowed: {', '.join(models.FAMILIES)}",
                               field="family")
    for o in query.origin:
        if o not in models.ORIGINS:
            raise InvalidInput(f"unknown origin {o!r}; allowed: {', '.join(models.ORIGINS)}",
                               field="origin")
    if len(query.concepts) > models.MAX_CONCEPTS:
        raise InvalidInput(f"at most {models.MAX_CONCEPTS} concepts", field="concepts")
    for name in ("q", "database", "schema", "table", "column"):
        value = getattr(query, name)
        models.reject_nul(value, name)
        if value is not None and len(value) > models.MAX_QUERY:
            raise InvalidInput(f"{name} is longer than {models.MAX_QUERY} characters", field=name)
    if query.column and not query.table:
        raise InvalidInput("a column filter needs a table filter", field="column")
    if (query.table or query.schema) and not query.database:
        raise InvalidInput("a schema or table filter needs a database filter", field="database")
    where: list[sql.Composable] = [sql.SQL("true")]
    params: dict[str, Any] = {}
    if query.q:
        card_uuid = models.parse_card_id(query.q)
        if card_uuid is not None:
            where.append(sql.SQL("c.id = %(q_id)s"))
            params["q_id"] = card_uuid
        elif matches is not None:
            where.append(sql.SQL("c.id = ANY(%(q_ids)s)"))
            params["q_ids"] = matches
        else:
            # the visible text ILIKE the pattern, through the owner function of migration 004
            # (under row-level security ILIKE could not use the trigram index)
            where.append(sql.SQL("c.id IN (SELECT card_text_matches(%(q_like)s))"))
            params["q_like"] = _text_pattern(query)
    if query.family and skip != "family":
        where.append(sql.SQL("c.family = ANY(%(families)s)"))
        params["families"] = query.family
    if query.origin and skip != "origin":
        where.append(sql.SQL("c.origin = ANY(%(origins)s)"))
        params["origins"] = query.origin
    if query.concepts and skip != "concepts":
        where.append(sql.SQL("c.concepts @> %(concepts)s::text[]"))
        params["concepts"] = query.concepts
    entry = _dependency_entry(query, skip, params)
    if entry is not None:
        where.append(sql.SQL("EXISTS (SELECT 1 FROM card_dependencies d "
                             "WHERE d.card_id = c.id AND {})").format(entry))
    if query.updated_after is not None:
        where.append(sql.SQL("c.updated_at >= %(updated_after)s"))
        params["updated_after"] = query.updated_after
    if query.updated_before is not None:
        where.append(sql.SQL("c.updated_at < %(updated_before)s"))
        params["updated_before"] = query.updated_before
    return sql.SQL(" AND ").join(where), params


def _dependency_entry(query: ListQuery, skip: str | None,
                      params: dict[str, Any]) -> sql.Composable | None:
    """The condition one dependency row ``d`` must meet for the query's dependency filters
    (every level given, on the same entry), its values added to ``params``; ``skip``
    (``database`` or ``table``) leaves out that facet's levels. None when no level is left."""
    levels = [(col, getattr(query, name)) for name, col in (
        ("database", "database_name"), ("schema", "schema_name"), ("table", "table_name"),
        ("column", "column_name")) if getattr(query, name) is not None
        and not (skip == "database" and name == "database")
        and not (skip == "table" and name in ("table", "column"))]
    if not levels:
        return None
    params.update({f"dep_{col}": value for col, value in levels})
    return sql.SQL(" AND ").join(
        sql.SQL("d.{} = {}").format(sql.Identifier(col), sql.Placeholder(f"dep_{col}"))
        for col, _ in levels)


def _check_page(query: ListQuery) -> None:
    """:raises InvalidInput: page < 1, per_page outside 1..100 or an unknown sort."""
    if query.page < 1:
        raise InvalidInput("page must be at least 1", field="page")
    if not 1 <= query.per_page <= models.MAX_PER_PAGE:
        raise InvalidInput(f"per_page must be between 1 and {models.MAX_PER_PAGE}", field="per_page")
    if query.sort not in models.SORTS:
        raise InvalidInput(f"sort must be one of {', '.join(models.SORTS)}", field="sort")


def _order(query: ListQuery) -> sql.Composable:
    """``ORDER BY`` terms of the query's sort (ties by id, in the same direction)."""
    column, default_desc = SORT_ORDER[query.sort]
    direction = sql.SQL("DESC" if (default_desc if query.desc is None else query.desc) else "ASC")
    return sql.SQL("{} {}, c.id {}").format(sql.SQL(column), direction, direction)


async def list_cards(conn: AsyncConnection, query: ListQuery,
                     matches: list[uuid.UUID] | None = None) -> tuple[list[Card], int]:
    """One page of cards in the requested order (ties by id) and the total count. ``matches``:
    the text search's ids when the caller already has them (:func:`text_matches`).

    :raises InvalidInput: page < 1, per_page outside 1..100, unknown sort, or a bad filter.
    """
    _check_page(query)
    if matches is None:
        if _text_pattern(query) is not None:
            found_cards, total, _ = await _text_search_page(conn, query, None)
            return found_cards, total
        matches = await text_matches(conn, query)
    cond, params = _list_where(query, matches=matches)
    total_row = await (await conn.execute(
        sql.SQL("SELECT count(*) AS n FROM cards c WHERE {}").format(cond), params)).fetchone()
    params.update(limit=query.per_page, offset=(query.page - 1) * query.per_page)
    cur = await conn.execute(
        sql.SQL("SELECT c.id FROM cards c WHERE {} ORDER BY {} "
                "LIMIT %(limit)s OFFSET %(offset)s").format(cond, _order(query)), params)
    ids = [row["id"] for row in await cur.fetchall()]
    found = await cards.get_many(conn, ids)
    return [found[i] for i in ids if i in found], total_row["n"]


async def list_cards_and_facets(conn: AsyncConnection, query: ListQuery, limit: int = 30
                                ) -> tuple[list[Card], int, dict[str, dict[str, int]]]:
    """:func:`list_cards` and :func:`facet_counts` of one query (the explorer's list page):
    ``(cards, total, facets)``. A text search reads its matching cards once and answers the
    page, the total and every facet from one statement over them
    (:func:`_text_search_page`); otherwise as the two functions do.

    :raises InvalidInput: as :func:`list_cards`.
    """
    if _text_pattern(query) is not None:
        _check_page(query)
        return await _text_search_page(conn, query, limit)
    found, total = await list_cards(conn, query)
    return found, total, await facet_counts(conn, query, limit)


async def facet_counts(conn: AsyncConnection, query: ListQuery, limit: int = 30,
                       matches: list[uuid.UUID] | None = None) -> dict[str, dict[str, int]]:
    """Counts per value of each facet (:data:`FACETS`) over the cards matching every filter of
    ``query`` except the facet's own, so a count says how many cards selecting that value adds.
    At most ``limit`` values per facet, most frequent first (ties by value). ``matches`` as in
    :func:`list_cards`; with a text search every facet comes from one statement over the matching
    cards, otherwise from one statement per facet.

    :raises InvalidInput: a bad filter.
    """
    if matches is None:
        matches = await text_matches(conn, query)
    if matches is not None:
        return await _facet_counts_of_matches(conn, query, limit, matches)
    out: dict[str, dict[str, int]] = {}
    for facet in FACETS:
        cond, params = _list_where(query, skip=facet, matches=matches)
        filtered = bool(params)
        params["facet_limit"] = limit
        if facet in ("family", "origin"):
            stmt = sql.SQL("SELECT c.{col} AS v, count(*) AS n FROM cards c WHERE {cond} "
                           "GROUP BY 1").format(col=sql.Identifier(facet), cond=cond)
        elif facet == "concepts":
            stmt = sql.SQL("SELECT v, count(*) AS n FROM cards c, unnest(c.concepts) v "
                           "WHERE {cond} GROUP BY 1").format(cond=cond)
        else:
            col = sql.Identifier("database_name" if facet == "database" else "table_name")
            extra = sql.SQL("")
            if facet == "table":
                if query.database is None:
                    continue  # tables are listed within a database
                extra = sql.SQL(" AND d.database_name = %(facet_db)s")
                params["facet_db"] = query.database
            # (value, card) pairs counted once each; without any other filter every card of
            # the workspace counts, so the dependency rows alone answer
            cards = sql.SQL("") if not filtered else sql.SQL(
                " AND d.card_id IN (SELECT c.id FROM cards c WHERE {})").format(cond)
            stmt = sql.SQL("SELECT v, count(*) AS n FROM (SELECT DISTINCT d.{col} AS v, d.card_id "
                           "FROM card_dependencies d WHERE d.{col} IS NOT NULL{extra}{cards}) p "
                           "GROUP BY 1").format(col=col, extra=extra, cards=cards)
        stmt = sql.SQL("SELECT v, n FROM ({}) f ORDER BY n DESC, v LIMIT %(facet_limit)s").format(stmt)
        rows = await (await conn.execute(stmt, params)).fetchall()
        out[facet] = {r["v"]: r["n"] for r in rows}
    return out


async def _facet_counts_of_matches(conn: AsyncConnection, query: ListQuery, limit: int,
                                   matches: list[uuid.UUID]) -> dict[str, dict[str, int]]:
    """:func:`facet_counts` of a text search whose ids are known, in one statement
    (:func:`_search_statement` over the cards with those ids)."""
    stmt, params = _search_statement(query, limit, page=False, matches=matches)
    return _facets_of(query, await (await conn.execute(stmt, params)).fetchall())


async def _text_search_page(conn: AsyncConnection, query: ListQuery, limit: int | None
                            ) -> tuple[list[Card], int, dict[str, dict[str, int]]]:
    """A page of a text search, its total and (unless ``limit`` is None) its facets, from one
    statement over the rows of ``card_text_match_rows`` (migration 015: the search returns the
    columns the page filters, sorts and counts by, so no card is read twice), then the page's
    cards."""
    stmt, params = _search_statement(query, limit, page=True)
    rows = await (await conn.execute(stmt, params)).fetchall()
    total = next(r["n"] for r in rows if r["facet"] == "total")
    ids = [uuid.UUID(r["v"]) for r in sorted((r for r in rows if r["facet"] == "page"),
                                             key=lambda r: r["n"])]
    found = await cards.get_many(conn, ids)
    facets = _facets_of(query, rows) if limit is not None else {}
    return [found[i] for i in ids if i in found], total, facets


def _facets_of(query: ListQuery, rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The facet rows of :func:`_search_statement`'s result as ``{facet: {value: count}}``."""
    out: dict[str, dict[str, int]] = {f: {} for f in FACETS if f != "table" or query.database}
    for row in rows:
        if row["facet"] in out:
            out[row["facet"]][row["v"]] = row["n"]
    return out


def _search_statement(query: ListQuery, limit: int | None, *, page: bool,
                      matches: list[uuid.UUID] | None = None
                      ) -> tuple[sql.Composable, dict[str, Any]]:
    """One statement over the cards of a text search: the matching cards (within the date range)
    are read once (``base``: from ``card_text_match_rows``, or by id when ``matches`` are
    given), each card's dependency rows once (one aggregate per card gives the dependency
    filters as flags and the card's distinct databases, and tables of the selected database),
    each other facet filter evaluated once per card as a flag, and every part counted from
    those rows: the total and the page's ids in order (``page``; rows ``('total', NULL, n)`` and
    ``('page', id, position)``) and each facet with the flags of the other filters (unless
    ``limit`` is None; rows ``(facet, value, count)``, at most ``limit`` per facet, most
    frequent first). Columns: ``facet``, ``v``, ``n``."""
    params: dict[str, Any] = {"facet_limit": limit}

    def where(part: ListQuery) -> sql.Composable:
        cond, part_params = _list_where(part, None, matches)
        params.update(part_params)
        return cond

    dates = ListQuery(updated_after=query.updated_after, updated_before=query.updated_before)
    if matches is None:
        source, cond = sql.SQL("card_text_match_rows(%(q_like)s) c"), where(dates)
        params["q_like"] = _text_pattern(query)
    else:
        source, cond = sql.SQL("cards c"), where(
            ListQuery(q=query.q, updated_after=query.updated_after,
                      updated_before=query.updated_before))
    # the dependency flags (every level on one entry; a facet's own levels left out of its
    # flag) and, for the facets, the card's distinct databases and tables, from its rows
    facets = limit is not None
    deps: dict[str, sql.Composable] = {}
    for name, skip in (("f_dep", None), ("f_dep_other_db", "database"),
                       ("f_dep_other_table", "table")):
        entry = _dependency_entry(query, skip, params)
        deps[name] = (sql.SQL("true") if entry is None
                      else sql.SQL("coalesce(bool_or({}), false)").format(entry))
    if facets:
        deps["dbs"] = sql.SQL("array_agg(DISTINCT d.database_name)")
        deps["tables"] = sql.SQL("array_agg(DISTINCT d.table_name) FILTER (WHERE d.table_name "
                                 "IS NOT NULL AND d.database_name = %(facet_db)s)")
        params["facet_db"] = query.database
    flags = {name: where(ListQuery(**{name: getattr(query, name)}))
             for name in ("family", "origin", "concepts")}
    if facets or query.database is not None:
        # A card's dependency rows matter only when it passes at least two of the three other
        # filters (every facet and the total combine the dependency flags with two or three of
        # them) and, without a dependency filter, only when it passes all three (for the
        # database and table facets); other cards skip the lookup (their aggregates are empty).
        fa, fo, fc = flags.values()
        needed = (sql.SQL("({} AND {}) OR ({} AND {}) OR ({} AND {})").format(fa, fo, fa, fc, fo, fc)
                  if query.database is not None
                  else sql.SQL("{} AND {} AND {}").format(fa, fo, fc))
        lateral = sql.SQL(" CROSS JOIN LATERAL (SELECT {} FROM card_dependencies d "
                          "WHERE d.card_id = c.id AND ({})) x").format(sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(expr, sql.Identifier(name)) for name, expr in deps.items()),
            needed)
        dep_cols = sql.SQL(", ").join(sql.SQL("x.{}").format(sql.Identifier(n)) for n in deps)
    else:  # no dependency filter and no facets: no dependency row is read
        lateral = sql.SQL("")
        dep_cols = sql.SQL("true AS f_dep")
    base = sql.SQL(
        "SELECT c.id, c.family, c.origin, c.concepts, c.title, c.created_at, c.updated_at, "
        "{family} AS f_family, {origin} AS f_origin, {concepts} AS f_concepts, {dep_cols} "
        "FROM {source}{lateral} WHERE {cond}").format(
        family=flags["family"], origin=flags["origin"], concepts=flags["concepts"],
        dep_cols=dep_cols, source=source, lateral=lateral, cond=cond)
    parts: list[sql.Composable] = []
    if page:
        params.update(limit=query.per_page, offset=(query.page - 1) * query.per_page)
        every = sql.SQL("f_family AND f_origin AND f_concepts AND f_dep")
        parts += [
            sql.SQL("SELECT -2 AS k, 'total' AS facet, NULL::text AS v, count(*) AS n "
                    "FROM base WHERE {}").format(every),
            sql.SQL("SELECT -1, 'page', p.id::text, p.pos FROM (SELECT c.id, row_number() OVER "
                    "(ORDER BY {order}) AS pos FROM base c WHERE {every} ORDER BY {order} "
                    "LIMIT %(limit)s OFFSET %(offset)s) p").format(order=_order(query),
                                                                  every=every)]
    if facets:
        top = sql.SQL(" GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT %(facet_limit)s")
        parts += [
            sql.SQL("SELECT 0 AS k, 'family' AS facet, v, n FROM (SELECT family AS v, count(*) "
                    "AS n FROM base WHERE f_origin AND f_concepts AND f_dep{}) f").format(top),
            sql.SQL("SELECT 1 AS k, 'origin', v, n FROM (SELECT origin AS v, count(*) AS n "
                    "FROM base WHERE f_family AND f_concepts AND f_dep{}) f").format(top),
            sql.SQL("SELECT 2 AS k, 'concepts', v, n FROM (SELECT v, count(*) AS n FROM base, "
                    "unnest(base.concepts) v WHERE f_family AND f_origin AND f_dep{}) f"
                    ).format(top),
            sql.SQL("SELECT 3 AS k, 'database', v, n FROM (SELECT v, count(*) AS n FROM base, "
                    "unnest(base.dbs) v WHERE f_family AND f_origin AND f_concepts "
                    "AND f_dep_other_db{}) f").format(top),
        ]
        if query.database is not None:  # tables are listed within a database
            parts.append(sql.SQL(
                "SELECT 4 AS k, 'table', v, n FROM (SELECT v, count(*) AS n FROM base, "
                "unnest(base.tables) v WHERE f_family AND f_origin AND f_concepts "
                "AND f_dep_other_table{}) f").format(top))
    stmt = sql.SQL("WITH base AS MATERIALIZED ({}) SELECT facet, v, n FROM ({}) u "
                   "ORDER BY k, n DESC, v").format(base, sql.SQL(" UNION ALL ").join(parts))
    return stmt, params
