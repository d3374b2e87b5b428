"""The repository: every read and write of the archive tables, on a connection from
:meth:`shared.store.database.Database.transaction` (role and workspace already set).

Functions here neither commit nor check permissions; :mod:`shared.archive.cards` does both.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import msgspec
import psycopg
from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from shared import models
from shared.errors import InvalidInput, NotFound
from shared.models import Card, CardWrite, Dependency, ImportCard, IncomingLink, Link, card_id_str
from shared.store.database import Q

#: Version of the projected text, payload and model set. Raising it makes every older projection
#: pending (DESIGN §4); ship a numbered migration that records the change.
#: 1: migrations/002; 2: the privacy filter redacts secrets in the text and payload (migrations/005).
PROJECTION_FORMAT = 2


async def check_projection_format(db: Any) -> None:
    """Refuse to run when this code's projection format is not recorded in the database.

    :raises SchemaOutdated: the migration recording ``PROJECTION_FORMAT`` was not applied.
    """
    from shared.errors import SchemaOutdated

    async with db.transaction(None, read_only=True) as conn:
        row = await (await conn.execute(Q.projection_format_latest)).fetchone()
    recorded = row["format"] if row else None
    if recorded != PROJECTION_FORMAT:
        raise SchemaOutdated(
            f"this code projects format {PROJECTION_FORMAT} but the database records format "
            f"{recorded}: run `memarc migrate` (a format change ships with its migration)")


def index_status(row: dict[str, Any]) -> str:
    """``current`` / ``pending`` / ``failed`` for a card row from ``cards_get``."""
    if row["projected_revision"] == row["revision"] and row["projected_format"] == PROJECTION_FORMAT:
        return "current"
    return "failed" if row.get("has_failed_op") else "pending"


def _card_from_row(row: dict[str, Any]) -> Card:
    return Card(
        id=card_id_str(row["id"]),
        workspace=row["workspace_id"],
        family=row["family"],
        title=row["title"],
        scope=row["scope"],
        origin=row["origin"],
        source=msgspec.convert(row["source"], models.Source) if row["source"] else None,
        concepts=list(row["concepts"]),
        dependencies=[Dependency(**d) for d in row["dependencies"]],
        links=[Link(**link) for link in row["links"]],
        content=dict(row["content"]),
        revision=row["revision"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        index_status=index_status(row),  # type: ignore[arg-type]
    )


async def workspace(conn: AsyncConnection, workspace_id: str) -> dict[str, Any]:
    """The workspace row ``{id, language, created_at}``.

    :raises NotFound: no such workspace (or not visible under RLS).
    """
    row = await (await conn.execute(Q.workspace_get, {"workspace": workspace_id})).fetchone()
    if row is None:
        raise NotFound(f"no workspace {workspace_id!r}")
    return row


async def get_cards(conn: AsyncConnection, ids: list[uuid.UUID]) -> dict[uuid.UUID, Card]:
    """Full cards for ``ids`` (missing ids are absent from the mapping)."""
    if not ids:
        return {}
    cur = await conn.execute(Q.cards_get, {"ids": ids})
    return {row["id"]: _card_from_row(row) for row in await cur.fetchall()}


async def get_card(conn: AsyncConnection, card_uuid: uuid.UUID) -> Card:
    """One full card.

    :raises NotFound: no such card in the transaction's workspace.
    """
    cards = await get_cards(conn, [card_uuid])
    if card_uuid not in cards:
        raise NotFound(f"no card {card_id_str(card_uuid)} in this workspace")
    return cards[card_uuid]


async def incoming_links(conn: AsyncConnection, card_uuid: uuid.UUID) -> list[IncomingLink]:
    """Links into a card, by source id."""
    cur = await conn.execute(Q.incoming_links, {"card_id": card_uuid})
    return [IncomingLink(**row) for row in await cur.fetchall()]


async def resolve_link_targets(conn: AsyncConnection, links: list[models.LinkIn],
                               self_id: uuid.UUID | None = None) -> list[tuple[uuid.UUID, str]]:
    """Check that every link target is a card of this workspace.

    :raises InvalidInput: a target is not a card id, is the card itself, or is not in this
        workspace (another workspace's card is indistinguishable from a missing one).
    """
    resolved: list[tuple[uuid.UUID, str]] = []
    for i, link in enumerate(links):
        target = models.parse_card_id(link.target)
        if target is None:
            raise InvalidInput(f"links[{i}].target {link.target!r} is not a card id (mem-<uuid>)",
                               field=f"links[{i}].target")
        if target == self_id:
            raise InvalidInput(f"links[{i}]: a card cannot link to itself", field=f"links[{i}].target")
        resolved.append((target, link.meaning.strip()))
    if resolved:
        cur = await conn.execute(Q.card_ids_existing, {"ids": [t for t, _ in resolved]})
        existing = {row["id"] for row in await cur.fetchall()}
        for i, (target, _) in enumerate(resolved):
            if target not in existing:
                raise InvalidInput(
                    f"links[{i}].target {card_id_str(target)} is not a card of this workspace",
                    field=f"links[{i}].target",
                )
    return resolved


async def _write_dependencies(conn: AsyncConnection, workspace_id: str, card_uuid: uuid.UUID,
                              deps: list[Dependency], replace: bool) -> None:
    if replace:
        await conn.execute(Q.dependencies_delete, {"card_id": card_uuid})
    if deps:
        async with conn.cursor() as cur:
            await cur.executemany(Q.dependency_insert, [
                {"workspace": workspace_id, "card_id": card_uuid, "ordinal": i,
                 "database": d.database, "schema": d.schema, "table": d.table, "column": d.column}
                for i, d in enumerate(deps)
            ])


async def _write_links(conn: AsyncConnection, workspace_id: str, card_uuid: uuid.UUID,
                       links: list[tuple[uuid.UUID, str]], replace: bool) -> None:
    if replace:
        await conn.execute(Q.links_delete_outgoing, {"card_id": card_uuid})
    if links:
        async with conn.cursor() as cur:
            await cur.executemany(Q.link_insert, [
                {"workspace": workspace_id, "source_id": card_uuid, "target_id": t, "meaning": m}
                for t, m in links
            ])


async def insert_card(conn: AsyncConnection, workspace_id: str, body: CardWrite | ImportCard,
                      *, origin: str, source: models.Source | None = None,
                      card_uuid: uuid.UUID | None = None,
                      links: list[tuple[uuid.UUID, str]] | None = None) -> tuple[uuid.UUID, int]:
    """Insert a validated card with its dependencies and (already resolved) links.

    :returns: ``(card uuid, revision)``.
    """
    card_uuid = card_uuid or uuid.uuid4()
    cur = await conn.execute(Q.card_insert, {
        "workspace": workspace_id, "id": card_uuid, "family": body.family, "title": body.title,
        "scope": body.scope, "origin": origin,
        "source": Jsonb(msgspec.to_builtins(source)) if source else None,
        "concepts": body.concepts, "content": Jsonb(body.content),
    })
    revision = (await cur.fetchone())["revision"]
    await _write_dependencies(conn, workspace_id, card_uuid, body.dependencies, replace=False)
    if links:
        await _write_links(conn, workspace_id, card_uuid, links, replace=False)
    return card_uuid, revision


async def update_card(conn: AsyncConnection, workspace_id: str, card_uuid: uuid.UUID,
                      body: CardWrite, links: list[tuple[uuid.UUID, str]]) -> int:
    """Replace a card's content, dependencies and outgoing links if ``body.revision`` is current.

    Origin and source are kept (an administrator's edit never changes provenance).

    :returns: the new revision.
    :raises NotFound: no such card. :raises StaleRevision: the card has another revision.
    """
    from shared.errors import StaleRevision

    row = await (await conn.execute(Q.card_revision_for_update, {"id": card_uuid})).fetchone()
    if row is None:
        raise NotFound(f"no card {card_id_str(card_uuid)} in this workspace")
    family = (await (await conn.execute(Q.card_family, {"id": card_uuid})).fetchone())["family"]
    if family != body.family:
        raise InvalidInput(f"a card's family cannot change ({family} -> {body.family}); create a "
                           "new card instead", field="family")
    if row["revision"] != body.revision:
        raise StaleRevision(
            f"card {card_id_str(card_uuid)} is at revision {row['revision']}, "
            f"the update edits revision {body.revision}",
            current_revision=row["revision"],
        )
    cur = await conn.execute(Q.card_update, {
        "id": card_uuid, "revision": body.revision, "family": body.family, "title": body.title,
        "scope": body.scope, "concepts": body.concepts, "content": Jsonb(body.content),
    })
    revision = (await cur.fetchone())["revision"]
    await _write_dependencies(conn, workspace_id, card_uuid, body.dependencies, replace=True)
    await _write_links(conn, workspace_id, card_uuid, links, replace=True)
    return revision


async def delete_card(conn: AsyncConnection, card_uuid: uuid.UUID) -> None:
    """Delete a card; dependencies, links both ways and its projection row cascade.

    :raises NotFound: no such card.
    """
    row = await (await conn.execute(Q.card_delete, {"id": card_uuid})).fetchone()
    if row is None:
        raise NotFound(f"no card {card_id_str(card_uuid)} in this workspace")


async def insert_op(conn: AsyncConnection, workspace_id: str, card_uuid: uuid.UUID, op: str,
                    revision: int | None) -> int:
    """Record a projection operation in the outbox; returns its id."""
    cur = await conn.execute(Q.op_insert, {"workspace": workspace_id, "card_id": card_uuid,
                                           "op": op, "revision": revision})
    return (await cur.fetchone())["id"]


async def record_activity(conn: AsyncConnection, workspace_id: str, *, actor: str, verb: str,
                          outcome: str, card_uuid: uuid.UUID | None = None,
                          detail: dict[str, Any] | None = None) -> None:
    """Append an activity record (who, verb, card, outcome, time)."""
    await conn.execute(Q.activity_insert, {
        "workspace": workspace_id, "actor": actor, "verb": verb, "card_id": card_uuid,
        "outcome": outcome, "detail": Jsonb(detail) if detail else None,
    })


async def pending_ops(conn: AsyncConnection, limit: int = 100, offset: int = 0) -> tuple[list[dict], int]:
    """Incomplete projection operations (pending, running, failed) and their total count."""
    cur = await conn.execute(Q.ops_pending_list, {"limit": limit, "offset": offset})
    rows = await cur.fetchall()
    total = (await (await conn.execute(Q.ops_pending_count)).fetchone())["n"]
    return rows, total


async def projection_state(conn: AsyncConnection, card_uuid: uuid.UUID) -> dict[str, Any] | None:
    """``{revision, projected_revision, projected_format}`` of a card, or None when it is gone."""
    return await (await conn.execute(Q.projection_state, {"card_id": card_uuid})).fetchone()


async def projection_counts(conn: AsyncConnection) -> dict[str, int]:
    """``{cards, current}``: how many cards the workspace has and how many are projected."""
    return await (await conn.execute(Q.projection_counts, {"format": PROJECTION_FORMAT})).fetchone()


async def family_counts(conn: AsyncConnection) -> dict[str, int]:
    """Cards per family."""
    cur = await conn.execute(Q.family_counts)
    return {row["family"]: row["n"] for row in await cur.fetchall()}


# ---- the list query (API list, CLI list, explorer list) ----

class ListQuery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Filters, sort and page of a card listing (API list, CLI list, explorer list).

    - ``q``: a ``mem-`` card id, or a case-insensitive substring of the title or content;
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
    """Ids of the cards whose title or content contains ``query.q`` (case-insensitive), or None
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
            # title or content ILIKE the pattern, through the owner function of migration 004
            # (under row-level security ILIKE could not use the trigram indexes)
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
    cards = await get_cards(conn, ids)
    return [cards[i] for i in ids if i in cards], total_row["n"]


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


async def activity(conn: AsyncConnection, *, verb: str | None = None,
                   card_uuid: uuid.UUID | None = None, outcome: str | None = None,
                   limit: int = 50, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Activity records, newest first, and their total: every state change and every rejected
    or failed attempt (who, verb, card, outcome, time, detail). ``outcome`` matches a prefix
    (``rejected`` finds ``rejected:invalid_input``)."""
    params = {"verb": verb, "card_id": card_uuid, "outcome": outcome, "limit": limit,
              "offset": offset}
    rows = await (await conn.execute(Q.activity_list, params)).fetchall()
    total = (await (await conn.execute(Q.activity_count, params)).fetchone())["n"]
    return rows, total


def is_unique_violation(exc: BaseException) -> bool:
    """True for a PostgreSQL unique violation."""
    return isinstance(exc, psycopg.errors.UniqueViolation)


# ---- workflow (issue 6) ----

async def add_links(conn: AsyncConnection, workspace_id: str, card_uuid: uuid.UUID,
                    links: list[tuple[uuid.UUID, str]]) -> None:
    """Add (already resolved) outgoing links to a card inserted earlier in this transaction.

    A review inserts all its new cards first and links them afterwards, so links between two new
    cards of one review (in either direction, cycles included) resolve inside one transaction.
    """
    await _write_links(conn, workspace_id, card_uuid, links, replace=False)
