"""The reads and writes of schema-change cleanup (DESIGN §7): runs, deletion receipts, matches.

A run is recorded with its removed tables and columns; the matches are the cards that depend on
them.

Functions run on a connection from :meth:`shared.store.database.Database.transaction` (role and
workspace already set); they neither commit nor check permissions. A run is returned as its row
``{run_id, database_name, schema_name, removed_tables, removed_columns, status, deleted, errors,
recorded_at, completed_at, ...}``; :mod:`shared.archive.schema_changes` converts it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from shared.store.database import Q


async def run(conn: AsyncConnection, run_id: str, *, for_update: bool = False,
              ) -> dict[str, Any] | None:
    """The run's row, or None; ``for_update`` locks the row until the transaction ends."""
    query = Q.schema_changes_runs_get_for_update if for_update else Q.schema_changes_runs_get
    return await (await conn.execute(query, {"run_id": run_id})).fetchone()


async def list_runs(conn: AsyncConnection, *, database: str | None, schema: str | None,
                    limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The workspace's runs, newest first, and how many there are in all; ``database`` /
    ``schema`` (None: any) keep those of one database/schema (a token's binding)."""
    cur = await conn.execute(Q.schema_changes_runs_list, {
        "database": database, "schema": schema, "limit": limit, "offset": offset})
    rows = await cur.fetchall()
    return rows, (rows[0]["total"] if rows else 0)


async def incomplete_run(conn: AsyncConnection, database: str, schema: str) -> str | None:
    """The id of a run of ``database``/``schema`` whose cleanup is still pending, or None."""
    row = await (await conn.execute(Q.schema_changes_runs_open_for_target,
                                    {"database": database, "schema": schema})).fetchone()
    return row["run_id"] if row is not None else None


async def insert_run(conn: AsyncConnection, workspace_id: str, *, run_id: str, database: str,
                     schema: str, tables: Sequence[str], columns: Sequence[tuple[str, str]],
                     digest: str, actor: str) -> dict[str, Any]:
    """Record a run with a pending cleanup phase and the removed objects (``columns``:
    ``(table, column)`` pairs); returns its row.

    :raises psycopg.errors.UniqueViolation: the run id is recorded already.
    """
    cur = await conn.execute(Q.schema_changes_runs_insert, {
        "workspace": workspace_id, "run_id": run_id, "database": database, "schema": schema,
        "tables": list(tables), "columns": Jsonb([{"table": t, "column": c} for t, c in columns]),
        "digest": digest, "actor": actor})
    return await cur.fetchone()


async def finish_run(conn: AsyncConnection, run_id: str, *, status: str, deleted: Sequence[str],
                     errors: Sequence[dict[str, str]], cards_deleted: bool) -> dict[str, Any]:
    """Write a run's deletion receipt (``deleted`` card ids, ``errors`` ``{card_id, error}``) and
    its status (``done`` sets ``completed_at``; ``cleanup_pending`` leaves it to a repeat);
    ``cards_deleted``: every matching card is deleted (sets ``cards_deleted_at`` once). Returns
    its row."""
    cur = await conn.execute(Q.schema_changes_runs_finish, {
        "run_id": run_id, "status": status, "deleted": Jsonb(list(deleted)),
        "errors": Jsonb(list(errors)), "cards_deleted": cards_deleted})
    return await cur.fetchone()


async def complete_run(conn: AsyncConnection, run_id: str) -> dict[str, Any] | None:
    """Mark a run ``done`` whose cards are deleted (``cards_deleted_at`` set); returns its row,
    or None when it is not such a run."""
    return await (await conn.execute(Q.schema_changes_runs_complete, {"run_id": run_id})).fetchone()


async def open_point_deletions(conn: AsyncConnection,
                               card_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """The cards among ``card_ids`` with a point-deletion operation not done yet (pending,
    running or failed), in id order."""
    cur = await conn.execute(Q.schema_changes_open_point_deletions, {"ids": list(card_ids)})
    return [row["card_id"] for row in await cur.fetchall()]


async def cards_depending_on(conn: AsyncConnection, database: str, schema: str,
                             tables: Sequence[str],
                             columns: Sequence[tuple[str, str]]) -> list[uuid.UUID]:
    """Ids (in id order) of the cards with a dependency on a removed object of
    ``database``/``schema``: a removed table covers the table and its columns, a removed column
    (``(table, column)``) only that column. Database- and schema-level dependencies never match."""
    cur = await conn.execute(Q.schema_changes_cards_matching, {
        "database": database, "schema": schema, "tables": list(tables),
        "col_tables": [t for t, _ in columns], "col_names": [c for _, c in columns]})
    return [row["card_id"] for row in await cur.fetchall()]
