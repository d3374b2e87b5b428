"""The PostgreSQL reads of verified recall: verification rows for index hits (DESIGN §5)."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection

from shared.store.database import Q


async def candidate_rows(conn: AsyncConnection, ids: list[uuid.UUID],
                         links_per_card: int) -> list[dict[str, Any]]:
    """What verification needs of the cards ``ids`` (missing cards are absent): ``{id, family,
    scope, concepts, revision, projected_revision, projected_format, dependencies, links}``, the
    dependencies as ``[database, schema, table, column]`` lists in ordinal order and ``links``
    the first ``links_per_card`` outgoing link targets in target-id order (DESIGN §5.3)."""
    cur = await conn.execute(Q.verification_candidates, {"ids": ids, "per_card": links_per_card})
    return await cur.fetchall()
