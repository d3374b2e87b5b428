"""Tracked index rebuilds (``index_rebuilds``): queued, claimed under a lease, finished.

Functions run on a connection from :meth:`shared.store.database.Database.transaction`.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from shared.store.database import Q


async def insert(conn: AsyncConnection, rebuild_id: uuid.UUID, workspace_id: str,
                 actor: str, shadow: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Queue a rebuild of the workspace (a shadow one with ``shadow``, migration 025); returns
    its row, or None when one is already queued or running (a unique index allows one; the
    attempt is rolled back to a savepoint, so the transaction goes on)."""
    try:
        async with conn.transaction():
            return await (await conn.execute(Q.rebuilds_insert, {
                "id": rebuild_id, "workspace": workspace_id, "actor": actor,
                "shadow": Jsonb(shadow) if shadow is not None else None})).fetchone()
    except psycopg.errors.UniqueViolation:
        return None


async def claim(conn: AsyncConnection, rebuild_id: uuid.UUID,
                lease_seconds: int) -> dict[str, Any] | None:
    """Mark a queued rebuild (or a running one whose lease expired) running, with a lease of
    ``lease_seconds`` and its progress reset; returns the row, or None when it is not
    claimable (done, failed, or running under a live lease elsewhere)."""
    return await (await conn.execute(Q.rebuilds_claim, {
        "id": rebuild_id, "lease_seconds": lease_seconds})).fetchone()


async def progress(conn: AsyncConnection, rebuild_id: uuid.UUID, *, done: int, total: int,
                   collection: str, lease_seconds: int) -> None:
    """Record ``done`` of ``total`` cards written into ``collection`` and renew the lease."""
    await conn.execute(Q.rebuilds_progress, {
        "id": rebuild_id, "done": done, "total": total, "collection": collection,
        "lease_seconds": lease_seconds})


async def renew(conn: AsyncConnection, rebuild_id: uuid.UUID, lease_seconds: int) -> None:
    """Renew a running rebuild's lease by ``lease_seconds`` from now."""
    await conn.execute(Q.rebuilds_renew, {"id": rebuild_id, "lease_seconds": lease_seconds})


async def finish(conn: AsyncConnection, rebuild_id: uuid.UUID, *, status: str,
                 summary: dict[str, Any] | None = None, error: str | None = None) -> dict[str, Any]:
    """Close a rebuild as ``done`` (with its summary) or ``failed`` (with the error); returns
    the row."""
    return await (await conn.execute(Q.rebuilds_finish, {
        "id": rebuild_id, "status": status, "error": error,
        "summary": Jsonb(summary) if summary is not None else None})).fetchone()


async def release(conn: AsyncConnection, rebuild_id: uuid.UUID) -> None:
    """Put a running rebuild back in the queue (a graceful stop interrupted it)."""
    await conn.execute(Q.rebuilds_release, {"id": rebuild_id})


async def get(conn: AsyncConnection, rebuild_id: uuid.UUID) -> dict[str, Any] | None:
    """One rebuild of the workspace, or None."""
    return await (await conn.execute(Q.rebuilds_get, {"id": rebuild_id})).fetchone()


async def latest(conn: AsyncConnection) -> dict[str, Any] | None:
    """The workspace's most recently requested rebuild, or None."""
    return await (await conn.execute(Q.rebuilds_latest)).fetchone()


async def open_rebuilds(conn: AsyncConnection) -> list[dict[str, Any]]:
    """``[{workspace_id, rebuild_id, expired_lease}]`` of the rebuilds to (re)start, across
    workspaces: queued (``expired_lease`` None), or running with an expired lease (its expiry
    time, so each restart has a job id of its own); a definer function."""
    return await (await conn.execute(Q.rebuilds_sweep)).fetchall()
