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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.errors import (ArchiveError, DatabaseUnavailable, IndexIncompatible, IndexUnavailable,
                           PrivacyFilterFailed)
from shared.index.embedding import Embedder, ModelKey
from shared.index.engine import ARCHIVE_DENSE, ARCHIVE_SPARSE, IndexEngine, PointIn, VectorLayout
from shared.models import Card
from shared.privacy import DEFAULT_FILTER, PrivacyFilter
from shared.projection import lease, offload, recovery
from shared.projection.offload import Document
from shared.store import activity, cards, outbox, workspaces
from shared.store.database import Connection, Database

log = logging.getLogger(__name__)

#: Operations leased together by one job (one embedding batch).
BATCH_SIZE = 256

#: The actor of the activity records the projection writes (no token is involved).
WORKER_ACTOR = "worker"
#: Their verb, and the outcomes of a projection that did not happen (DESIGN §8).
PROJECT_VERB = "project"
PRIVACY_REFUSED = "privacy_refused"
INDEX_INCOMPATIBLE = "index_incompatible"


async def build_points(embedder: Embedder, cards: list[Card], language: str,
                       privacy: PrivacyFilter = DEFAULT_FILTER,
                       linked: Mapping[uuid.UUID, list[str]] | None = None,
                       model: ModelKey | None = None) -> list[PointIn]:
    """Embed cards (one batch) into index points. Every card goes through the privacy filter
    before anything is embedded. ``linked``: the questions of the solved cards linking to each
    card (:func:`shared.store.cards.linked_questions`); ``model``: the dense model (None: the
    configured one).

    :raises PrivacyFilterFailed: the filter failed on one of the cards; nothing was embedded.
    """
    built = await offload.documents(cards, privacy, linked or {})
    docs = [doc for doc in built if not isinstance(doc, str)]
    if len(docs) < len(built):
        raise PrivacyFilterFailed(next(doc for doc in built if isinstance(doc, str)))
    return await embed_documents(embedder, cards, docs, language, model)


async def _documents(cards: list[Card], privacy: PrivacyFilter,
                     linked: Mapping[uuid.UUID, list[str]]
                     ) -> tuple[list[Card], list[Document], dict[uuid.UUID, tuple[int, str]]]:
    """The documents of ``cards``, built off the event loop (:mod:`shared.projection.offload`):
    the cards the privacy filter passed, their documents in the same order, and the refused
    ones (card id -> revision and ``"<code>: <message>"``)."""
    built = await offload.documents(cards, privacy, linked)
    live: list[Card] = []
    docs: list[Document] = []
    refused: dict[uuid.UUID, tuple[int, str]] = {}
    for card, doc in zip(cards, built):
        if isinstance(doc, str):
            refused[uuid.UUID(card.id[4:])] = (card.revision, f"{PrivacyFilterFailed.code}: {doc}")
        else:
            live.append(card)
            docs.append(doc)
    return live, docs, refused


async def embed_documents(embedder: Embedder, cards: list[Card],
                          docs: list[tuple[dict[str, str], dict[str, Any]]],
                          language: str, model: ModelKey | None = None) -> list[PointIn]:
    """Points for ``cards`` from their already filtered documents
    (:func:`~shared.projection.documents.projected_document`): every named vector of
    :data:`~shared.index.engine.ARCHIVE_DENSE` and ``ARCHIVE_SPARSE`` embedded in one call. A
    text shared by two vectors of a kind is embedded once."""
    dense_texts = sorted({texts[name] for texts, _ in docs for name in ARCHIVE_DENSE})
    sparse_texts = sorted({texts[name] for texts, _ in docs for name in ARCHIVE_SPARSE})
    dense, sparse = await embedder.embed_texts(dense_texts, sparse_texts, language, model)
    dense_of = dict(zip(dense_texts, dense))
    sparse_of = dict(zip(sparse_texts, sparse))
    return [PointIn(id=uuid.UUID(c.id[4:]),
                    dense={name: dense_of[texts[name]] for name in ARCHIVE_DENSE},
                    sparse={name: sparse_of[texts[name]] for name in ARCHIVE_SPARSE},
                    payload=pl)
            for c, (texts, pl) in zip(cards, docs)]


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

    Two of these outcomes are state changes a caller must be able to see, so each writes an
    activity record per card (actor ``worker``, verb ``project``, detail ``{revision, message}``)
    in the transaction that gives the operations back: ``privacy_refused`` (the filter refused the
    card) and ``index_incompatible`` (the collection has another layout: every card of the batch
    stays pending until ``memarc index``). A retry of the same failure is recorded once: a card
    whose newest record already says the same outcome for the same revision gets no other
    (:func:`shared.store.activity.record_projection_outcomes`).

    The leases are renewed every third of ``lease_seconds`` while the batch is projected
    (:mod:`shared.projection.lease`), so ``lease_seconds`` is how long a stopped worker's
    operations wait before another worker takes them over, not a limit on the batch's time (the
    worker's job timeout is).

    :raises DatabaseUnavailable: PostgreSQL cannot be reached (the lease then expires and the
        operation is reclaimed by a later sweep).
    """
    report = ProjectionReport()
    waiting = await _collection_waits(db, index, workspace)
    if waiting is not None:
        report.errors.append(waiting)
        return report
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
        # a batch slower than one lease (a busy machine) keeps its operations: no second worker
        # reclaims and projects them again meanwhile (shared.projection.lease)
        async with lease.kept(db, workspace, lambda conn: outbox.renew(conn, ops, lease_seconds),
                              lease_seconds, f"{len(ops)} projection operation(s) of {workspace}"):
            refused = await _project_cards(db, index, embedder, workspace, card_ids, ops, report,
                                           privacy)
    except ArchiveError as exc:
        report.failed = len(op_ids)
        report.errors.append(exc.message)
        said = None
        if isinstance(exc, IndexIncompatible):
            revisions: dict[uuid.UUID, int | None] = dict.fromkeys(card_ids)
            for o in ops:  # the newest revision an operation of the card asks for (None: delete)
                if o["revision"] is not None and o["revision"] > (revisions[o["card_id"]] or 0):
                    revisions[o["card_id"]] = o["revision"]
            said = (INDEX_INCOMPATIBLE,
                    [(cid, revisions[cid], f"{exc.code}: {exc.message}") for cid in card_ids])
        await _fail(db, workspace, op_ids, exc.message, max_attempts, said)
        return report
    except Exception as exc:  # an engine bug must not lose the operation: record it
        log.exception("projection of %s operations failed", len(op_ids))
        message = f"{type(exc).__name__}: {exc}"
        report.failed = len(op_ids)
        report.errors.append(message)
        await _fail(db, workspace, op_ids, message, max_attempts)
        return report
    for cid, (revision, message) in refused.items():
        ids = [o["id"] for o in ops if o["card_id"] == cid]
        report.failed += len(ids)
        report.errors.append(message)
        await _fail(db, workspace, ids, message, max_attempts,
                    (PRIVACY_REFUSED, [(cid, revision, message)]))
    return report


async def _collection_waits(db: Database, index: IndexEngine, workspace: str) -> str | None:
    """Why projection must wait for the workspace's collection (lost, or being rebuilt: the
    operations stay pending, unleased, until the rebuild's switch completes them), or None.
    :func:`shared.projection.recovery.verify` settles the state first (it queues the rebuild
    of a lost collection). An engine that cannot be asked is left to the projection itself."""
    try:
        state = await recovery.verify(db, index, workspace)
    except DatabaseUnavailable:
        raise
    except ArchiveError:
        return None
    if state in (recovery.LOST, recovery.REBUILDING):
        return (f"index_unavailable: the index collection of workspace {workspace!r} is being "
                "rebuilt; projection waits for it")
    return None


async def _fail(db: Database, workspace: str, op_ids: list[int], error: str, max_attempts: int,
                said: tuple[str, list[tuple[uuid.UUID, int | None, str]]] | None = None) -> None:
    """Give the operations back with ``error``; ``said``: the outcome and the
    ``(card, revision, message)`` failures to record in the activity log, in the same
    transaction."""
    async with db.transaction(workspace) as conn:
        await outbox.fail(conn, op_ids, error, max_attempts)
        if said:
            await activity.record_projection_outcomes(
                conn, workspace, actor=WORKER_ACTOR, verb=PROJECT_VERB, outcome=said[0],
                failures=said[1])


async def _recorded_collection(conn: Connection, index: IndexEngine, workspace: str,
                               layout: VectorLayout) -> str:
    """The workspace's collection, checked against the one PostgreSQL records (migration 022,
    :mod:`shared.projection.recovery`), under the job's projection lock; returns its name.

    A workspace with nothing recorded gets its collection recorded: the one the engine has
    (made before migration 022), else a new one, created one job at a time (the next one finds
    it made). A collection is never created for a workspace whose cards are recorded as
    projected: their points would be missing from it.

    :raises IndexUnavailable: the recorded collection is missing or replaced (the recovery
        rebuilds it; the operations stay pending). :raises IndexIncompatible: another layout.
    """
    found = await index.check_collection(workspace, layout)
    recorded = await workspaces.index_collection(conn)
    if recorded is not None:
        if recorded["collection"] is None or recorded["collection"] != found:
            raise IndexUnavailable(
                f"the index collection of workspace {workspace!r} is "
                f"{'being rebuilt' if recorded['collection'] is None else 'lost'}: "
                "projection waits for the rebuild")
        return found
    if found is None:
        if await outbox.any_projection(conn):
            raise IndexUnavailable(f"the index collection of workspace {workspace!r} is lost: "
                                   "projection waits for the rebuild")
        await outbox.lock_collection_creation(conn, workspace)
        found = await index.ensure_collection(workspace, layout)
    await workspaces.record_index_collection(conn, workspace, found)
    return found


async def _project_cards(db: Database, index: IndexEngine, embedder: Embedder, workspace: str,
                         card_ids: list[uuid.UUID], ops: list[dict[str, Any]],
                         report: ProjectionReport,
                         privacy: PrivacyFilter) -> dict[uuid.UUID, tuple[int, str]]:
    """Project the cards; returns the cards the privacy filter refused (id -> the revision it
    refused and the error), whose
    operations are left running for the caller to fail. A refused card's old point, if any, is
    deleted (only its id is sent) and its recorded projection forgotten, so no projection of an
    older text stays behind."""
    # One transaction holds the per-card projection locks (taken in sorted order: no deadlock
    # between batches) while the cards are read, embedded, written to the index and recorded.
    async with db.transaction(workspace) as conn:
        await outbox.lock_for_projection(conn, workspace, card_ids)
        # before the cards are read: the open upserts this projection may complete (one a
        # later change queued or stamped stays pending for the next job; migration 017)
        superseded = await outbox.open_upserts(conn, card_ids)
        ws = await workspaces.get(conn, workspace)
        current = await cards.get_many(conn, card_ids)
        gone = [c for c in card_ids if c not in current]
        # The privacy filter runs before anything reaches the embedder or the index.
        linked = await cards.linked_questions(conn, [c for c in card_ids if c in current])
        live, docs, refused = await _documents([current[c] for c in card_ids if c in current],
                                               privacy, linked)
        # the dense model recorded with the collection (migration 025), under the projection
        # lock: a shadow switch, which takes it exclusively, cannot change it meanwhile
        model = workspaces.model_of(await workspaces.index_collection(conn))
        await _recorded_collection(conn, index, workspace,
                                   embedder.layout(ws["language"], model=model))
        if live:
            await index.upsert(workspace, await embed_documents(embedder, live, docs,
                                                                ws["language"], model))
        if gone or refused:
            await index.delete(workspace, gone + sorted(refused, key=str))
        await outbox.record_projections(
            conn, {uuid.UUID(card.id[4:]): card.revision for card in live}, only=superseded)
        await outbox.complete_for_deleted(conn, gone)
        if refused:
            await outbox.forget_projections(conn, sorted(refused, key=str))
        await outbox.complete(conn, [o["id"] for o in ops if o["card_id"] not in refused])
    report.upserted = len(live)
    report.deleted = len(gone)
    return refused
