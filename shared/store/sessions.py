"""The session workflow's reads and writes (DESIGN §5-6): proposals, review receipts, the reuse
candidates, the cards decided in a session.

Also the look-ups of review and solved-index: which link targets exist, re-queued operations.

Functions run on a connection from :meth:`shared.store.database.Database.transaction` (role and
workspace already set); they neither commit nor check permissions. Payloads (a proposal, a
receipt) are stored and returned as JSON builtins; :mod:`shared.archive.sessions` converts them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from shared.models import CardWrite, card_id_str
from shared.store.database import Q


class StoredProposal(msgspec.Struct, frozen=True):
    """A proposal row: its key, kind, family (the card's for an update), the card an update edits
    and the revision it was drafted against, and the proposal as sent (JSON builtins)."""

    key: str
    kind: str
    family: str
    card_id: uuid.UUID | None
    base_revision: int | None
    proposal: dict[str, Any]
    #: the order the proposals were stored in (a summary's version names the last it shows)
    seq: int = 0
    #: the existing card an addition reused when it was stored, if any
    reuse_card_id: uuid.UUID | None = None
    #: the proposal's content was erased with the card it carried (only key, kind and
    #: decisions are left in ``proposal``)
    erased: bool = False


class StoredReceipt(msgspec.Struct, frozen=True):
    """A review receipt row: review and session ids, the digest of the review request, and the
    receipt as returned (JSON builtins)."""

    review_id: str
    session_id: str
    request_digest: str
    result: dict[str, Any]


async def session_proposals(conn: AsyncConnection, session_id: str) -> list[StoredProposal]:
    """The session's proposals in the order they were stored (empty for an unknown session),
    erased ones included (``erased``)."""
    cur = await conn.execute(Q.sessions_proposals_for_session, {"session_id": session_id})
    return [StoredProposal(key=r["key"], kind=r["kind"], family=r["family"],
                           card_id=r["card_id"], base_revision=r["base_revision"],
                           proposal=r["proposal"], reuse_card_id=r["reuse_card_id"], seq=r["seq"],
                           erased=r["erased_at"] is not None)
            for r in await cur.fetchall()]


async def list_sessions(conn: AsyncConnection, status: str, limit: int) -> list[dict[str, Any]]:
    """The workspace's sessions with proposals, latest proposal first (``status``: ``open``,
    ``reviewed`` or ``all``; at most ``limit``): rows ``{session_id, additions, updates, stale,
    erased, first_proposed_at, last_proposed_at, proposed_by, review_id, outcome, reviewed_by,
    reviewed_at}`` (the review's fields None when not reviewed)."""
    cur = await conn.execute(Q.sessions_list, {"status": status, "limit": limit})
    return list(await cur.fetchall())


async def count_proposals(conn: AsyncConnection, session_id: str) -> int:
    """How many proposals the session holds."""
    row = await (await conn.execute(Q.sessions_proposals_count, {"session_id": session_id})).fetchone()
    return row["n"]


async def insert_proposal(conn: AsyncConnection, workspace_id: str, session_id: str, *, key: str,
                          kind: str, family: str, card_id: uuid.UUID | None,
                          base_revision: int | None, reuse_card_id: uuid.UUID | None,
                          proposal: dict[str, Any], digest: str, actor: str) -> None:
    """Store one proposal of a session (``proposal``: the request as sent, JSON builtins;
    ``reuse_card_id``: the existing card an addition reuses, if any).

    :raises psycopg.errors.UniqueViolation: the session already holds ``key``.
    """
    await conn.execute(Q.sessions_proposals_insert, {
        "workspace": workspace_id, "session_id": session_id, "key": key, "kind": kind,
        "family": family, "card_id": card_id, "base_revision": base_revision,
        "reuse_card_id": reuse_card_id, "proposal": Jsonb(proposal), "digest": digest,
        "actor": actor})


async def loose_content_cards(conn: AsyncConnection,
                              bodies: Sequence[CardWrite]) -> list[list[uuid.UUID]]:
    """For each body, the existing cards of its family whose content matches it loosely
    (``normalized_content()``, migration 003: whitespace collapsed, lower-cased), oldest first:
    the candidates among which the reuse rule finds the same card or a possible duplicate."""
    found: list[list[uuid.UUID]] = [[] for _ in bodies]
    if not bodies:
        return found
    cur = await conn.execute(Q.sessions_cards_loose_content, {
        "families": [b.family for b in bodies], "contents": [Jsonb(b.content) for b in bodies]})
    for row in await cur.fetchall():
        found[row["i"] - 1].append(row["id"])
    return found


async def receipt(conn: AsyncConnection, review_id: str) -> StoredReceipt | None:
    """The receipt stored under ``review_id``, or None."""
    row = await (await conn.execute(Q.sessions_receipts_get, {"review_id": review_id})).fetchone()
    return _receipt(row)


async def session_receipts(conn: AsyncConnection, session_id: str) -> list[StoredReceipt]:
    """The receipts of the session's reviews, oldest first (more than one when a review left the
    proposals that arrived after its summary open)."""
    cur = await conn.execute(Q.sessions_receipts_for_session, {"session_id": session_id})
    return [r for row in await cur.fetchall() if (r := _receipt(row)) is not None]


def _receipt(row: dict[str, Any] | None) -> StoredReceipt | None:
    if row is None:
        return None
    return StoredReceipt(review_id=row["review_id"], session_id=row["session_id"],
                         request_digest=row["request_digest"], result=row["result"])


async def insert_receipt(conn: AsyncConnection, workspace_id: str, *, review_id: str,
                         session_id: str, outcome: str, digest: str, result: dict[str, Any],
                         actor: str) -> None:
    """Store a review receipt (``result``: the receipt, JSON builtins; ``digest``: of the review
    request). Receipts are append-only.

    :raises psycopg.errors.UniqueViolation: the review id has a receipt already.
    """
    await conn.execute(Q.sessions_receipts_insert, {
        "workspace": workspace_id, "review_id": review_id, "session_id": session_id,
        "outcome": outcome, "digest": digest, "result": Jsonb(result), "actor": actor})




class StoredDecision(msgspec.Struct, frozen=True):
    """A decision row (migration 012): the card, ``accepted`` or ``rejected``, who recorded it
    (an actor, ``token:<id>``) and when."""

    card_id: uuid.UUID
    decision: str
    decided_by: str
    decided_at: datetime


async def session_decisions(conn: AsyncConnection, session_id: str) -> list[StoredDecision]:
    """The cards decided in the session, in the order they were decided (empty for a session
    without decisions)."""
    cur = await conn.execute(Q.sessions_decisions_for_session, {"session_id": session_id})
    return [StoredDecision(card_id=r["card_id"], decision=r["decision"],
                           decided_by=r["decided_by"], decided_at=r["decided_at"])
            for r in await cur.fetchall()]


async def decided_card_ids(conn: AsyncConnection, session_id: str) -> set[uuid.UUID]:
    """The ids of the cards decided in the session (accepted or rejected): recall in the
    session excludes them and never bridges through them (DESIGN §5)."""
    cur = await conn.execute(Q.sessions_decided_card_ids, {"session_id": session_id})
    return {r["card_id"] for r in await cur.fetchall()}


async def record_decisions(conn: AsyncConnection, workspace_id: str, session_id: str,
                           decisions: Sequence[tuple[uuid.UUID, str]], actor: str) -> None:
    """Record ``(card id, decision)`` pairs of a session (each card once), replacing the earlier
    decision of a card decided before (its author and time become ``actor`` and now).

    :raises psycopg.errors.ForeignKeyViolation: a card that is not a card of this workspace.
    """
    if not decisions:
        return
    await conn.execute(Q.sessions_decisions_upsert, {
        "workspace": workspace_id, "session_id": session_id,
        "card_ids": [c for c, _ in decisions], "decisions": [d for _, d in decisions],
        "actor": actor})

async def erase_card(conn: AsyncConnection, card_uuid: uuid.UUID) -> dict[str, int]:
    """Erase a deleted card's content from the session archive, in the deletion's transaction
    (DESIGN §2: a deleted card's content does not outlive it): the proposals that carried it
    (an update of it, an addition that would reuse it, the one a review applied to it) keep key,
    kind, family, card ids and decisions and lose the rest; the review receipts keep the card's
    id, revision, action and family and lose its title (the item gets ``erased: true``).

    :returns: ``{proposals, receipts}``: how many rows were erased.
    """
    params = {"card_id": card_uuid, "card_ref": card_id_str(card_uuid)}
    receipts = (await conn.execute(Q.sessions_erase_card_receipts, params)).rowcount
    proposals = (await conn.execute(Q.sessions_erase_card_proposals, params)).rowcount
    return {"proposals": proposals, "receipts": receipts}
