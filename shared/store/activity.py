"""The activity log (``activity``): who did what to which card, with what outcome, and when.

Functions run on a connection from :meth:`shared.store.database.Database.transaction`; when a
record is written (in the use case's transaction, or in one of its own for a rejection) is
decided by :mod:`shared.archive.activity` and the use cases (DESIGN §8).
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from shared.store.database import Q


async def record(conn: AsyncConnection, workspace_id: str, *, actor: str, verb: str,
                 outcome: str, card_uuid: uuid.UUID | None = None,
                 detail: dict[str, Any] | None = None) -> None:
    """Append an activity record (who, verb, card, outcome, time; ``detail`` as JSON)."""
    await conn.execute(Q.activity_insert, {
        "workspace": workspace_id, "actor": actor, "verb": verb, "card_id": card_uuid,
        "outcome": outcome, "detail": Jsonb(detail) if detail else None,
    })


async def record_projection_outcomes(conn: AsyncConnection, workspace_id: str, *, actor: str,
                                     verb: str, outcome: str,
                                     failures: list[tuple[uuid.UUID, int | None, str]],
                                     ) -> list[uuid.UUID]:
    """Record projections that did not happen, one record per card ``(card, revision, message)``
    with ``{revision, message}`` as detail, skipping a card whose newest record is already this
    same verb, outcome and revision (a retried failure is recorded once per revision and
    outcome). Returns the cards recorded."""
    if not failures:
        return []
    cur = await conn.execute(Q.activity_insert_projection_outcomes, {
        "workspace": workspace_id, "actor": actor, "verb": verb, "outcome": outcome,
        "cards": [f[0] for f in failures], "revisions": [f[1] for f in failures],
        "messages": [f[2][:500] for f in failures]})
    return [row["card_id"] for row in await cur.fetchall()]


async def entries(conn: AsyncConnection, *, verb: str | None = None,
                  card_uuid: uuid.UUID | None = None, outcome: str | None = None,
                  limit: int = 50, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Activity records of the workspace, newest first, and their total: every state change
    and every rejected or failed attempt ``{id, at, actor, verb, card_id, outcome, detail}``.
    ``outcome`` matches a prefix (``rejected`` finds ``rejected:invalid_input``)."""
    params = {"verb": verb, "card_id": card_uuid, "outcome": outcome, "limit": limit,
              "offset": offset}
    rows = await (await conn.execute(Q.activity_list, params)).fetchall()
    total = (await (await conn.execute(Q.activity_count, params)).fetchone())["n"]
    return rows, total
