"""Recall records (``recall_records``: migration 026, docs/usage.md).

The runtime role inserts and reads records (migration 027) and runs the purge; it never
changes or deletes one itself (the reader role reads them too). :func:`insert` runs in a transaction of the record's
workspace; :func:`purge` in one without a workspace (its definer function deletes in every
workspace).
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from shared.errors import RecordRefused
from shared.store.database import Q


async def insert(conn: AsyncConnection, record_id: uuid.UUID, workspace: str,
                 values: dict[str, Any]) -> None:
    """Insert one recall's record, committed without waiting for the disk (query
    ``recall_records_async_commit``: a crash may lose the last records, never a card);
    ``values`` holds ``actor, session, mode, top, families,
    filters (a dict), query_text, query_digest, card_ids, scores, excluded, timings (a dict)``.

    :raises RecordRefused: PostgreSQL refused the row (the runtime role lacks the privilege, a
        check of the table, or the workspace is gone).
    """
    await conn.execute(Q.recall_records_async_commit)
    try:
        await conn.execute(Q.recall_records_insert, {
            **values, "id": record_id, "workspace": workspace,
            "filters": Jsonb(values["filters"]), "timings": Jsonb(values["timings"])})
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.IntegrityError) as exc:
        raise RecordRefused(f"PostgreSQL refused the recall's record: "
                            f"{exc.diag.message_primary or type(exc).__name__}") from exc


async def purge(conn: AsyncConnection, days: int, batch: int) -> int:
    """Delete, in every workspace, at most ``batch`` records older than ``days`` days, oldest
    first; returns how many."""
    row = await (await conn.execute(Q.recall_records_purge,
                                    {"days": days, "batch": batch})).fetchone()
    return int(row["purged"])
