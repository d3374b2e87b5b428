"""Authentication's reads of API tokens: the look-up by digest and the last-use stamp.

Both go through definer functions of the schema (``authenticate_token``, ``touch_token``), so the
runtime role never reads the tokens table itself; creating and revoking tokens is bootstrap
(:mod:`shared.store.bootstrap`, migrator credentials).
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection

from shared.store.database import Q


async def lookup(conn: AsyncConnection, digest: bytes) -> dict[str, Any] | None:
    """The token whose SHA-256 digest is ``digest``: ``{token_id, workspace_id, permissions,
    database_name, schema_name, expires_at, revoked_at}``, or None when there is none."""
    return await (await conn.execute(Q.authentication_lookup, {"digest": digest})).fetchone()


async def touch(conn: AsyncConnection, token_id: uuid.UUID) -> None:
    """Stamp a token's last use (``last_used_at``, at most once a minute)."""
    await conn.execute(Q.authentication_touch, {"token_id": token_id})
