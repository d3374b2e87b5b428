"""Projecting operations: from the outbox to the index, always from the card's current state.

:func:`project_operations` is what a worker job runs for one operation id. It leases that
operation plus other claimable ones of the workspace (batching the embedding), takes a per-card
advisory lock so two jobs never project the same card at once, re-reads every card, upserts
(or deletes) points with ``wait=True``, and only then records the valid projection for the revision
it actually projected. An operation for a card that has since changed completes with the newer
state; one for a deleted card completes by deleting the point (DESIGN §3, §4).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from shared import models
from shared.errors import ArchiveError
from shared.index.embedding import Embedder
from shared.index.engine import IndexEngine, PointIn
from shared.models import Card
from shared.privacy import DEFAULT_FILTER, PrivacyFilter, PrivacyFilterFailed
from shared.store import cards, outbox, workspaces
from shared.store.database import Database

log = logging.getLogger(__name__)

#: Operations leased together by one job (one embedding batch).
BATCH_SIZE = 256


def projected_text(card: Card) -> str:
    """The text embedded and indexed for a card (DESIGN §4): title, content fields, scope,
    concepts and the qualified dependency names, one per line."""
    parts = [card.title]
    for name in ("definition", "rule", "question", "error", "correction", "sql", "context",
                 "rationale"):
        value = card.content.get(name)
        if value:
            parts.append(value)
    if card.scope:
        parts.append(f"scope: {card.scope}")
    if card.concepts:
        parts.append("concepts: " + ", ".join(card.concepts))
    if card.dependencies:
        parts.append("objects: " + ", ".join(d.qualified() for d in card.dependencies))
    return "\n".join(parts)


def payload(card: Card) -> dict[str, Any]:
    """The point payload: what the filters need, plus revision and projection format
    (unfiltered: :func:`projected_document` redacts its string values)."""
    return {
        "workspace": card.workspace,
        "family": card.family,
        "scope": card.scope,
        "concepts": list(card.concepts),
        "deps": [{"database": d.database, "schema": d.schema, "table": d.table, "column": d.column}
                 for d in card.dependencies],
        "revision": card.revision,
        "format": models.PROJECTION_FORMAT,
    }


def projected_document(card: Card, privacy: PrivacyFilter = DEFAULT_FILTER) -> tuple[str, dict[str, Any]]:
    """What leaves PostgreSQL for a card: the text to embed and the point payload, both through
    the privacy filter (secrets become ``[REDACTED:<kind>]``; the payload's ``scope``,
    ``concepts`` and dependency names are redacted value by value, the way recall redacts its
    filter values, so filters still match).

    :raises PrivacyFilterFailed: the filter could not process the card (fail closed).
    """
    text = privacy.redact(projected_text(card))
    pl = payload(card)
    pl["scope"] = privacy.redact_optional(pl["scope"])
    pl["concepts"] = [privacy.redact(c) for c in pl["concepts"]]
    pl["deps"] = [{k: privacy.redact_optional(v) for k, v in d.items()} for d in pl["deps"]]
    return text, pl


async def build_points(embedder: Embedder, cards: list[Card], language: str,
                       privacy: PrivacyFilter = DEFAULT_FILTER) -> list[PointIn]:
    """Embed cards (one batch) into index points. Every card goes through the privacy filter
    before anything is embedded.

    :raises PrivacyFilterFailed: the filter failed on one of the cards; nothing was embedded.
    """
    docs = [projected_document(c, privacy) for c in cards]
    return await embed_documents(embedder, cards, docs, language)


async def embed_documents(embedder: Embedder, cards: list[Card],
                          docs: list[tuple[str, dict[str, Any]]], language: str) -> list[PointIn]:
    """Points for ``cards`` from their already filtered documents (:func:`projected_document`)."""
    dense, sparse = await embedder.embed_documents([text for text, _ in docs], language)
    return [PointIn(id=uuid.UUID(c.id[4:]), dense=d, sparse=s, payload=pl)
            for c, (_, pl), d, s in zip(cards, docs, dense, sparse)]


@dataclass
class ProjectionReport:
    """What one job did: operations leased, cards upserted, points deleted, errors."""

    leased: int = 0
    upserted: int = 0
    deleted: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


async def project_operations(db: Database, index: IndexEngine, embedder: Embedder, workspace: str,
                             op_id: int | None, *, lease_seconds: int = 120, max_attempts: int = 5,
                             batch: bool = True,
                             privacy: PrivacyFilter = DEFAULT_FILTER) -> ProjectionReport:
    """Lease and complete projection operations of ``workspace`` (``op_id`` first).

    Never raises for an engine or model failure: the leased operations go back to ``pending``
    (or ``failed`` after ``max_attempts``) with the error recorded, and the report says so.
    The privacy filter fails closed per card: a card it cannot process is neither embedded nor
    written; its operations go back to ``pending`` (``failed`` after ``max_attempts``) with the
    filter's error, and the other cards of the batch are projected.

    :raises DatabaseUnavailable: PostgreSQL cannot be reached (the lease then expires and the
        operation is reclaimed by a later sweep).
    """
    report = ProjectionReport()
    async with db.transaction(workspace) as conn:
        ops = await outbox.lease(conn, workspace, op_id, batch=batch or op_id is None,
                                 limit=BATCH_SIZE if batch or op_id is None else 1,
                                 lease_seconds=lease_seconds)
    report.leased = len(ops)
    if not ops:
        return report
    op_ids = [o["id"] for o in ops]
    card_ids = sorted({o["card_id"] for o in ops})
    try:
        refused = await _project_cards(db, index, embedder, workspace, card_ids, ops, report,
                                       privacy)
    except ArchiveError as exc:
        report.failed = len(op_ids)
        report.errors.append(exc.message)
        await _fail(db, workspace, op_ids, exc.message, max_attempts)
        return report
    except Exception as exc:  # an engine bug must not lose the operation: record it
        log.exception("projection of %s operations failed", len(op_ids))
        message = f"{type(exc).__name__}: {exc}"
        report.failed = len(op_ids)
        report.errors.append(message)
        await _fail(db, workspace, op_ids, message, max_attempts)
        return report
    for cid, message in refused.items():
        ids = [o["id"] for o in ops if o["card_id"] == cid]
        report.failed += len(ids)
        report.errors.append(message)
        await _fail(db, workspace, ids, message, max_attempts)
    return report


async def _fail(db: Database, workspace: str, op_ids: list[int], error: str, max_attempts: int) -> None:
    async with db.transaction(workspace) as conn:
        await outbox.fail(conn, op_ids, error, max_attempts)


async def _project_cards(db: Database, index: IndexEngine, embedder: Embedder, workspace: str,
                         card_ids: list[uuid.UUID], ops: list[dict[str, Any]],
                         report: ProjectionReport,
                         privacy: PrivacyFilter) -> dict[uuid.UUID, str]:
    """Project the cards; returns the cards the privacy filter refused (id -> error), whose
    operations are left running for the caller to fail. A refused card's old point, if any, is
    deleted (only its id is sent) and its recorded projection forgotten, so no projection of an
    older text stays behind."""
    # One transaction holds the per-card projection locks (taken in sorted order: no deadlock
    # between batches) while the cards are read, embedded, written to the index and recorded.
    async with db.transaction(workspace) as conn:
        await outbox.lock_for_projection(conn, workspace, card_ids)
        ws = await workspaces.get(conn, workspace)
        current = await cards.get_many(conn, card_ids)
        gone = [c for c in card_ids if c not in current]
        # The privacy filter runs before anything reaches the embedder or the index.
        live: list[Card] = []
        docs: list[tuple[str, dict[str, Any]]] = []
        refused: dict[uuid.UUID, str] = {}
        for cid in card_ids:
            if cid not in current:
                continue
            try:
                docs.append(projected_document(current[cid], privacy))
                live.append(current[cid])
            except PrivacyFilterFailed as exc:
                refused[cid] = f"{exc.code}: {exc.message}"
        dimension = embedder.dense_dimension()
        await index.ensure_collection(workspace, embedder.dense_model_id, dimension)
        if live:
            await index.upsert(workspace, await embed_documents(embedder, live, docs, ws["language"]))
        if gone or refused:
            await index.delete(workspace, gone + sorted(refused, key=str))
        await outbox.record_projections(
            conn, {uuid.UUID(card.id[4:]): card.revision for card in live})
        await outbox.complete_for_deleted(conn, gone)
        if refused:
            await outbox.forget_projections(conn, sorted(refused, key=str))
        await outbox.complete(conn, [o["id"] for o in ops if o["card_id"] not in refused])
    report.upserted = len(live)
    report.deleted = len(gone)
    return refused
