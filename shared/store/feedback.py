"""Feedback on recalls (``recall_feedback``, migration 027) and the recall records it is checked
against (``recall_records``, migration 026).

Functions run on a connection of :meth:`shared.store.database.Database.transaction` for the
workspace: row-level security keeps every read and write in it (another workspace's recall is
simply not found). What may be judged (a card the recall returned) is decided by
:mod:`shared.archive.feedback`.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection

from shared.store.database import Q


async def recall(conn: AsyncConnection, recall_id: uuid.UUID) -> dict[str, Any] | None:
    """The workspace's recall record ``recall_id`` (its columns, ``session_id`` and
    ``card_ids`` in rank order among them), or None: no such record in this workspace (never
    written, purged past the retention, or another workspace's)."""
    return await (await conn.execute(Q.feedback_recall_get, {"id": recall_id})).fetchone()


async def lock(conn: AsyncConnection, recall_id: uuid.UUID, actor: str) -> None:
    """Serialise the feedback of ``actor`` on ``recall_id`` until the transaction ends."""
    await conn.execute(Q.feedback_recall_lock, {"id": recall_id, "actor": actor})


async def of_actor(conn: AsyncConnection, recall_id: uuid.UUID,
                   actor: str) -> dict[uuid.UUID, tuple[str, str | None]]:
    """``actor``'s verdicts on ``recall_id``: card -> (verdict, note)."""
    rows = await (await conn.execute(Q.feedback_of_actor,
                                     {"id": recall_id, "actor": actor})).fetchall()
    return {row["card_id"]: (row["verdict"], row["note"]) for row in rows}


async def upsert(conn: AsyncConnection, workspace: str, recall_id: uuid.UUID, actor: str,
                 verdicts: list[tuple[uuid.UUID, str, str | None]], via: str,
                 review_id: str | None = None) -> list[dict[str, Any]]:
    """Store ``actor``'s ``(card, verdict, note)`` on ``recall_id`` (replacing its earlier
    verdict on a card); the stored rows ``{card_id, actor, verdict, note, via, review_id,
    created_at, updated_at}``."""
    cur = await conn.execute(Q.feedback_upsert, {
        "workspace": workspace, "id": recall_id, "actor": actor, "via": via,
        "review_id": review_id, "cards": [c for c, _, _ in verdicts],
        "verdicts": [v for _, v, _ in verdicts], "notes": [n for _, _, n in verdicts]})
    return await cur.fetchall()


async def review_helpful(conn: AsyncConnection, workspace: str, session_id: str,
                         cards: list[uuid.UUID], actor: str,
                         review_id: str) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Record ``helpful`` from ``actor`` (the reviewer) for each of ``cards`` on the session's
    newest recall that returned it (a card no recall of the session returned gets none; a
    verdict the reviewer already gave there stays); the ``(card, recall)`` pairs recorded."""
    cur = await conn.execute(Q.feedback_review_helpful, {
        "workspace": workspace, "session": session_id, "cards": cards, "actor": actor,
        "review_id": review_id})
    return [(row["card_id"], row["recall_id"]) for row in await cur.fetchall()]


async def of_recall(conn: AsyncConnection, recall_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every verdict on ``recall_id``, by card, newest first."""
    return await (await conn.execute(Q.feedback_of_recall, {"id": recall_id})).fetchall()


async def of_card(conn: AsyncConnection, card_uuid: uuid.UUID,
                  limit: int) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """A card's verdict counts (``{helpful, not_helpful, wrong}``, zeros included) and its
    ``limit`` newest verdicts, each with the recall's ``query_text`` and ``mode``."""
    counts = {"helpful": 0, "not_helpful": 0, "wrong": 0}
    for row in await (await conn.execute(Q.feedback_card_counts,
                                         {"card_id": card_uuid})).fetchall():
        counts[row["verdict"]] = row["n"]
    recent = await (await conn.execute(Q.feedback_card_recent,
                                       {"card_id": card_uuid, "limit": limit})).fetchall()
    return counts, recent


async def recalls(conn: AsyncConnection, *, actor: str | None, mode: str | None, limit: int,
                  offset: int) -> tuple[list[dict[str, Any]], int]:
    """A page of the workspace's recall records, newest first (``{id, actor, session_id, mode,
    query_text, results, created_at, verdicts}``), and how many there are."""
    params = {"actor": actor, "mode": mode, "limit": limit, "offset": offset}
    rows = await (await conn.execute(Q.feedback_recalls_page, params)).fetchall()
    total = (await (await conn.execute(Q.feedback_recalls_count, params)).fetchone())["n"]
    return rows, total
