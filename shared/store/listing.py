"""Card listings: the list query, a page of cards, facet counts and the text search.

One :class:`ListQuery` serves the API list, the CLI list and the explorer list. The WHERE clause
is composed here with :mod:`psycopg.sql` (values always bound); the text search runs through the
owner function ``card_text_matches`` (migration 004) over the card's visible text (the
``search_text`` column of migration 008: title, scope, concepts and content values, never the
content's keys or JSON syntax). Functions run on a connection from
:meth:`shared.store.database.Database.transaction`.
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
    sort: str = "updated"
    desc: bool | None = None
    page: int = 1
    per_page: int = 20


SORTS: dict[str, tuple[str, bool]] = {  # column, descending by default
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
    cur = await conn.execute(Q.card_text_matches, {"pattern": pattern})
    return [row["id"] for row in await cur.fetchall()]


def _list_where(query: ListQuery, skip: str | None = None,
                matches: list[uuid.UUID] | None = None) -> tuple[sql.Composable, dict[str, Any]]:
    """WHERE clause and parameters of a listing; ``skip`` leaves out one facet's own filter;
    ``matches`` are the text search's ids from :func:`text_matches` (searched here otherwise).
    No filter at all gives empty parameters.

    :raises InvalidInput: any filter out of bounds.
    """
    for f in query.family:
        if f not in models.FAMILIES:
            raise InvalidInput(f"unknown family {f!r}", field="family")
    for o in query.origin:
        if o not in models.ORIGINS:
            raise InvalidInput(f"unknown origin {o!r}", field="origin")
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
    levels = [(col, getattr(query, name)) for name, col in (
        ("database", "database_name"), ("schema", "schema_name"), ("table", "table_name"),
        ("column", "column_name")) if getattr(query, name) is not None
        and not (skip == "database" and name == "database")
        and not (skip == "table" and name in ("table", "column"))]
    if levels:
        conds = sql.SQL(" AND ").join(
            sql.SQL("d.{} = {}").format(sql.Identifier(col), sql.Placeholder(f"dep_{col}"))
            for col, _ in levels)
        where.append(sql.SQL("EXISTS (SELECT 1 FROM card_dependencies d "
                             "WHERE d.card_id = c.id AND {})").format(conds))
        params.update({f"dep_{col}": value for col, value in levels})
    if query.updated_after is not None:
        where.append(sql.SQL("c.updated_at >= %(updated_after)s"))
        params["updated_after"] = query.updated_after
    if query.updated_before is not None:
        where.append(sql.SQL("c.updated_at < %(updated_before)s"))
        params["updated_before"] = query.updated_before
    return sql.SQL(" AND ").join(where), params


async def list_cards(conn: AsyncConnection, query: ListQuery,
                     matches: list[uuid.UUID] | None = None) -> tuple[list[Card], int]:
    """One page of cards in the requested order (ties by id) and the total count. ``matches``:
    the text search's ids when the caller already has them (:func:`text_matches`).

    :raises InvalidInput: page < 1, per_page outside 1..100, unknown sort, or a bad filter.
    """
    if query.page < 1:
        raise InvalidInput("page must be at least 1", field="page")
    if not 1 <= query.per_page <= models.MAX_PER_PAGE:
        raise InvalidInput(f"per_page must be between 1 and {models.MAX_PER_PAGE}", field="per_page")
    if query.sort not in SORTS:
        raise InvalidInput(f"sort must be one of {', '.join(SORTS)}", field="sort")
    if matches is None:
        matches = await text_matches(conn, query)
    cond, params = _list_where(query, matches=matches)
    total_row = await (await conn.execute(
        sql.SQL("SELECT count(*) AS n FROM cards c WHERE {}").format(cond), params)).fetchone()
    column, default_desc = SORTS[query.sort]
    descending = default_desc if query.desc is None else query.desc
    direction = sql.SQL("DESC" if descending else "ASC")
    params.update(limit=query.per_page, offset=(query.page - 1) * query.per_page)
    cur = await conn.execute(
        sql.SQL("SELECT c.id FROM cards c WHERE {} ORDER BY {} {}, c.id {} "
                "LIMIT %(limit)s OFFSET %(offset)s").format(
            cond, sql.SQL(column), direction, direction), params)
    ids = [row["id"] for row in await cur.fetchall()]
    found = await cards.get_many(conn, ids)
    return [found[i] for i in ids if i in found], total_row["n"]


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
    """:func:`facet_counts` of a text search, in one statement: the matching cards (within the
    date range) are read once, each facet filter evaluated once per card as a flag, and every
    facet counted from those rows with the flags of the other filters."""
    params: dict[str, Any] = {"facet_limit": limit}

    def where(part: ListQuery, skip: str | None = None) -> sql.Composable:
        cond, part_params = _list_where(part, skip, matches)
        params.update(part_params)
        return cond

    deps = ListQuery(database=query.database, schema=query.schema, table=query.table,
                     column=query.column)
    base = sql.SQL(
        "SELECT c.id, c.family, c.origin, c.concepts, {family} AS f_family, "
        "{origin} AS f_origin, {concepts} AS f_concepts, {dep} AS f_dep, "
        "{dep_other_db} AS f_dep_other_db, {dep_other_table} AS f_dep_other_table "
        "FROM cards c WHERE {base}").format(
        family=where(ListQuery(family=query.family)),
        origin=where(ListQuery(origin=query.origin)),
        concepts=where(ListQuery(concepts=query.concepts)),
        dep=where(deps), dep_other_db=where(deps, skip="database"),
        dep_other_table=where(deps, skip="table"),
        base=where(ListQuery(q=query.q, updated_after=query.updated_after,
                             updated_before=query.updated_before)))
    top = sql.SQL(" GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT %(facet_limit)s")
    parts = [
        sql.SQL("SELECT 0 AS k, 'family' AS facet, v, n FROM (SELECT family AS v, count(*) AS n "
                "FROM base WHERE f_origin AND f_concepts AND f_dep{}) f").format(top),
        sql.SQL("SELECT 1 AS k, 'origin', v, n FROM (SELECT origin AS v, count(*) AS n "
                "FROM base WHERE f_family AND f_concepts AND f_dep{}) f").format(top),
        sql.SQL("SELECT 2 AS k, 'concepts', v, n FROM (SELECT v, count(*) AS n FROM base, "
                "unnest(base.concepts) v WHERE f_family AND f_origin AND f_dep{}) f").format(top),
        sql.SQL("SELECT 3 AS k, 'database', v, n FROM (SELECT v, count(*) AS n FROM "
                "(SELECT DISTINCT d.database_name AS v, d.card_id FROM base b "
                "JOIN card_dependencies d ON d.card_id = b.id WHERE b.f_family AND b.f_origin "
                "AND b.f_concepts AND b.f_dep_other_db) p{}) f").format(top),
    ]
    if query.database is not None:  # tables are listed within a database
        params["facet_db"] = query.database
        parts.append(sql.SQL(
            "SELECT 4 AS k, 'table', v, n FROM (SELECT v, count(*) AS n FROM "
            "(SELECT DISTINCT d.table_name AS v, d.card_id FROM base b "
            "JOIN card_dependencies d ON d.card_id = b.id WHERE d.table_name IS NOT NULL "
            "AND d.database_name = %(facet_db)s AND b.f_family AND b.f_origin AND b.f_concepts "
            "AND b.f_dep_other_table) p{}) f").format(top))
    stmt = sql.SQL("WITH base AS MATERIALIZED ({}) SELECT facet, v, n FROM ({}) u "
                   "ORDER BY k, n DESC, v").format(base, sql.SQL(" UNION ALL ").join(parts))
    out: dict[str, dict[str, int]] = {f: {} for f in FACETS if f != "table" or query.database}
    for row in await (await conn.execute(stmt, params)).fetchall():
        out[row["facet"]][row["v"]] = row["n"]
    return out
