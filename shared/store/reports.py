"""The curation reports' reads (issue 35 part 3, docs/usage.md "Curation reports"): cards no
recall returned, cards marked unhelpful, and the cards the conflicts report compares.

The card filters are the card list's (:func:`shared.store.listing.card_filter`: text, family,
origin, concepts, dependency); the reports' own parts are composed here with
:mod:`psycopg.sql` (values always bound), and the static reads are named queries
(``reports_*`` in ``queries.sql``). Recall records and feedback are read under row-level
security (migrations 026, 027): only the transaction's workspace's rows are seen. Functions run
on a connection from :meth:`shared.store.database.Database.transaction`.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection, sql

from shared.store.database import Q
from shared.store.listing import ListQuery, card_filter

#: ``ORDER BY`` of each sort of the never-recalled report and whether it is descending by
#: default: ``idle`` (the longest without a recall first: the last recall, else the creation),
#: ``created`` (newest first), ``title``, ``family`` (A-Z)
NEVER_RECALLED_SORTS: dict[str, tuple[str, bool]] = {
    "idle": ("coalesce(h.last_recalled, c.created_at)", False),
    "created": ("c.created_at", True),
    "title": ("lower(c.title)", False),
    "family": ("c.family", False),
}
#: the same for the unhelpful report: ``unhelpful`` (not_helpful + wrong, most first),
#: ``share`` (the unhelpful share of the card's verdicts), ``recalls`` (most first), ``title``,
#: ``family``
UNHELPFUL_SORTS: dict[str, tuple[str, bool]] = {
    "unhelpful": ("(f.not_helpful + f.wrong)", True),
    "share": ("((f.not_helpful + f.wrong)::float8 / (f.helpful + f.not_helpful + f.wrong))", True),
    "recalls": ("coalesce(r.recalls, 0)", True),
    "title": ("lower(c.title)", False),
    "family": ("c.family", False),
}


def _order(sorts: dict[str, tuple[str, bool]], sort: str, desc: bool | None) -> sql.Composable:
    column, default_desc = sorts[sort]
    direction = sql.SQL("DESC" if (default_desc if desc is None else desc) else "ASC")
    return sql.SQL("{} {}, c.id {}").format(sql.SQL(column), direction, direction)


async def never_recalled(conn: AsyncConnection, query: ListQuery, days: int, sort: str,
                         desc: bool | None) -> tuple[list[dict[str, Any]], int]:
    """A page of the cards matching ``query``'s filters that no recall record of the last
    ``days`` days returned, and their total: rows ``{id, family, title, created_at,
    last_recalled (None: no record returned it), recalls (0)}``. A card created within the
    window is counted from its creation (no recall can name it earlier). ``last_recalled`` is
    the newest record that returned the card at all (records are kept for the retention,
    ``MEMARC_RECALL_RETENTION_DAYS``, so older ones are gone).

    :raises InvalidInput: a bad filter (:func:`card_filter`).
    """
    cond, params = card_filter(query)
    params.update(days=days, limit=query.per_page, offset=(query.page - 1) * query.per_page)
    stmt = sql.SQL(Q.reports_never_recalled).format(
        cond=cond, order=_order(NEVER_RECALLED_SORTS, sort, desc))
    rows = await (await conn.execute(stmt, params)).fetchall()
    total = rows[0]["total"] if rows else await _count_past_page(conn, stmt, params)
    return rows, total


async def unhelpful(conn: AsyncConnection, query: ListQuery, days: int, min_feedback: int,
                    sort: str, desc: bool | None) -> tuple[list[dict[str, Any]], int]:
    """A page of the cards matching ``query``'s filters with at least ``min_feedback``
    ``not_helpful`` or ``wrong`` verdicts on the recalls of the last ``days`` days, and their
    total: rows ``{id, family, title, created_at, recalls (records of the window that returned
    the card), helpful, not_helpful, wrong (verdicts on those records, every principal's)}``.

    :raises InvalidInput: a bad filter.
    """
    cond, params = card_filter(query)
    params.update(days=days, min_feedback=min_feedback, limit=query.per_page,
                  offset=(query.page - 1) * query.per_page)
    stmt = sql.SQL(Q.reports_unhelpful).format(
        cond=cond, order=_order(UNHELPFUL_SORTS, sort, desc))
    rows = await (await conn.execute(stmt, params)).fetchall()
    total = rows[0]["total"] if rows else await _count_past_page(conn, stmt, params)
    return rows, total


#: ``ORDER BY`` of each sort of the stale-dependencies report (default direction; ``desc``
#: reverses it): ``stale`` (never seen first, then the longest unseen), ``table`` (A-Z by
#: database, schema, table), ``cards`` (most cards first)
STALE_SORTS: dict[str, tuple[str, bool]] = {
    "stale": ("coalesce(seen.at, '-infinity'::timestamptz)", False),
    "table": ("t.db {d}, t.sch {d}, t.tbl", False),
    "cards": ("t.cards", True),
}


async def stale_dependencies(conn: AsyncConnection, query: ListQuery, days: int, sort: str,
                             desc: bool | None) -> tuple[list[dict[str, Any]], int]:
    """A page of the tables that the dependencies of the cards matching ``query``'s filters
    name and that nothing of the last ``days`` days showed in use (query
    ``reports_stale_dependencies``), and their total: rows ``{database_name, schema_name,
    table_name, cards, examples ([{id, title}], the first three), last_seen (None: no sign
    kept), seen_by (filter | result | schema_run | None)}``.

    :raises InvalidInput: a bad filter.
    """
    cond, params = card_filter(query)
    params.update(days=days, limit=query.per_page, offset=(query.page - 1) * query.per_page)
    column, default_desc = STALE_SORTS[sort]
    direction = "DESC" if (default_desc if desc is None else desc) else "ASC"
    order = sql.SQL(f"{column.replace('{d}', direction)} {direction}, "
                    f"t.db {direction}, t.sch {direction}, t.tbl {direction}")
    stmt = sql.SQL(Q.reports_stale_dependencies).format(cond=cond, order=order)
    rows = await (await conn.execute(stmt, params)).fetchall()
    total = rows[0]["total"] if rows else await _count_past_page(conn, stmt, params)
    return rows, total


async def _count_past_page(conn: AsyncConnection, stmt: sql.Composable,
                           params: dict[str, Any]) -> int:
    """The total of a report whose page came back empty (a page past the last, or none): the
    same statement's first row."""
    if params["offset"] == 0:
        return 0
    row = await (await conn.execute(stmt, {**params, "limit": 1, "offset": 0})).fetchone()
    return row["total"] if row else 0


async def conflict_cards(conn: AsyncConnection, families: list[str]) -> list[dict[str, Any]]:
    """The cards of ``families`` whose current revision is projected (query
    ``reports_conflict_cards``): ``{id, family, scope, revision, tables (the qualified objects its
    dependencies name, to the table; empty: workspace-wide)}``."""
    cur = await conn.execute(Q.reports_conflict_cards, {"families": families})
    return await cur.fetchall()


async def matching_ids(conn: AsyncConnection, query: ListQuery) -> set[uuid.UUID]:
    """Ids of the cards matching ``query``'s filters (the conflicts report keeps a pair when
    either card matches).

    :raises InvalidInput: a bad filter."""
    cond, params = card_filter(query)
    cur = await conn.execute(sql.SQL(Q.reports_matching_cards).format(cond=cond), params)
    return {row["id"] for row in await cur.fetchall()}


async def state(conn: AsyncConnection) -> tuple[Any, ...]:
    """What the conflicts report depends on (query ``reports_state``): cards, their latest
    change, projections and the latest projection, as one comparable tuple."""
    row = await (await conn.execute(Q.reports_state)).fetchone()
    return (row["cards"], row["updated"], row["projected"], row["projected_at"])
