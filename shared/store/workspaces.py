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
    row = await (await conn.execute(Q.workspaces_get, {"workspace": workspace_id})).fetchone()
    if row is None:
        raise NotFound(f"no workspace {workspace_id!r}")
    return row


async def list_all(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every workspace ``{id, language, created_at}``, through the definer function
    ``workspace_list()`` (the caller filters by permission afterwards)."""
    return await (await conn.execute(Q.workspaces_list)).fetchall()


async def removals_pending(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Removed workspaces whose index collection is still to drop, ``[{id, workspace}]`` oldest
    first (``memarc workspace delete``; the definer function of migration 013)."""
    return await (await conn.execute(Q.workspaces_removals_pending)).fetchall()


async def removal_index_result(conn: AsyncConnection, removal_id: int,
                               error: str | None) -> None:
    """Record the worker's attempt to drop a removed workspace's collection: done (``error``
    None), or still pending with ``error``."""
    await conn.execute(Q.workspaces_removals_index_result, {"id": removal_id, "error": error})


async def index_collection(conn: AsyncConnection) -> dict[str, Any] | None:
    """The workspace's recorded index ``{collection, recorded_at, dense_model, dense_model_path,
    previous_collection, previous_dense_model, previous_dense_model_path, switched_at}``
    (migrations 022, 025): None when none was recorded yet; ``collection`` None while a lost one
    is being rebuilt; ``dense_model``/``dense_model_path`` None for the process's configured
    model (:func:`model_of`); ``previous_*`` the index a shadow switch replaced and kept."""
    return await (await conn.execute(Q.workspaces_index_collection)).fetchone()


def model_of(row: dict[str, Any] | None, previous: bool = False) -> tuple[str, str | None] | None:
    """The dense model recorded for an index (:data:`shared.index.embedding.ModelKey`), the
    previous one's with ``previous``; None for the process's configured model."""
    if row is None:
        return None
    name = row["previous_dense_model" if previous else "dense_model"]
    return (name, row["previous_dense_model_path" if previous else "dense_model_path"]) \
        if name else None


async def switch_index_collection(conn: AsyncConnection, workspace_id: str, collection: str,
                                  model: tuple[str, str | None] | None) -> None:
    """Make ``collection``, built with ``model`` (None: the configured one), the workspace's
    index and keep the one it replaces as the previous index (migration 025)."""
    await conn.execute(Q.workspaces_switch_index_collection, {
        "workspace": workspace_id, "collection": collection,
        "dense_model": model[0] if model else None, "dense_model_path": model[1] if model else None})


async def forget_previous_index(conn: AsyncConnection, workspace_id: str) -> None:
    """Record that the workspace has no previous index any more (dropped or lost)."""
    await conn.execute(Q.workspaces_forget_previous_index, {"workspace": workspace_id})


async def record_index_collection(conn: AsyncConnection, workspace_id: str,
                                  collection: str | None) -> None:
    """Record ``collection`` as the one holding the workspace's valid projections (None: the
    recorded one was lost, and none is valid until a rebuild switches to a new one)."""
    await conn.execute(Q.workspaces_record_index_collection,
                       {"workspace": workspace_id, "collection": collection})
