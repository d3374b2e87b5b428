"""Workspace rows, read on a transaction of :meth:`shared.store.database.Database.transaction`."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from shared.errors import NotFound
from shared.store.database import Q


async def get(conn: AsyncConnection, workspace_id: str) -> dict[str, Any]:
    """The workspace row ``{id, language, created_at}``.

    :raises NotFound: no such workspace (or not visible under RLS).
    """
    row = await (await conn.execute(Q.workspace_get, {"workspace": workspace_id})).fetchone()
    if row is None:
        raise NotFound(f"no workspace {workspace_id!r}")
    return row


async def list_all(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every workspace ``{id, language, created_at}``, through the definer function
    ``workspace_list()`` (the caller filters by permission afterwards)."""
    return await (await conn.execute(Q.workspace_list)).fetchall()
