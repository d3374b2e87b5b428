"""Sessions of the administration pages (migration 018): opened, looked up and ended by the
runtime role; one-time sign-in links created with the migrator login (bootstrap) and redeemed by
the runtime through a definer function.

Only SHA-256 digests of a session's secret and of a link's code are stored.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from shared.store.bootstrap import migrator_transaction
from shared.store.database import Q


async def insert(conn: AsyncConnection, workspace: str, digest: bytes, token_id: uuid.UUID,
                 expires_at: datetime) -> uuid.UUID:
    """Open a session of ``token_id`` (a token of ``workspace``, the transaction's) whose secret
    has the SHA-256 digest ``digest``; returns its id."""
    session_id = uuid.uuid4()
    await conn.execute(Q.admin_sessions_insert, {"id": session_id, "workspace": workspace,
                                                "digest": digest, "token_id": token_id,
                                                "expires_at": expires_at})
    return session_id


async def lookup(conn: AsyncConnection, digest: bytes) -> dict[str, Any] | None:
    """The session whose secret has the digest ``digest``, with its token: ``{session_id,
    workspace_id, token_id, permissions, database_name, schema_name, expires_at, ended_at,
    token_expires_at, revoked_at}``, or None (any workspace: call before one is known)."""
    return await (await conn.execute(Q.admin_sessions_principal, {"digest": digest})).fetchone()


async def end(conn: AsyncConnection, digest: bytes) -> None:
    """End the session whose secret has the digest ``digest`` (in its workspace's transaction)."""
    await conn.execute(Q.admin_sessions_end, {"digest": digest})


async def redeem_link(conn: AsyncConnection, digest: bytes) -> dict[str, Any] | None:
    """Redeem the sign-in link whose code has the digest ``digest``: its token ``{token_id,
    workspace_id, permissions, database_name, schema_name, expires_at, revoked_at}``, or None when
    there is no such link, or it was used or expired (it can be redeemed once)."""
    return await (await conn.execute(Q.admin_sessions_redeem_link, {"digest": digest})).fetchone()


async def purge_ended(conn: AsyncConnection, grace_seconds: float) -> tuple[int, int]:
    """Delete, in every workspace, the sessions that ended (signed out, expired, or their token
    revoked or expired) and the sign-in links used or expired more than ``grace_seconds`` ago;
    returns how many of each ``(sessions, links)``."""
    row = await (await conn.execute(Q.admin_sessions_purge_ended,
                                    {"grace": grace_seconds})).fetchone()
    return row["sessions"], row["links"]


def insert_link(migrator_url: str, schema: str, workspace: str, token_id: uuid.UUID,
                digest: bytes, expires_at: datetime) -> dict[str, Any]:
    """Bootstrap (migrator login): record a one-time sign-in link for ``token_id`` whose code has
    the digest ``digest``; returns ``{created_at, expires_at}``."""
    with migrator_transaction(migrator_url, schema) as conn:
        return conn.execute(Q.admin_sessions_insert_link, {
            "digest": digest, "workspace": workspace, "token_id": token_id,
            "expires_at": expires_at}).fetchone()
