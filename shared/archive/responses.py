"""What the archive's use cases answer (:class:`shared.archive.cards.Archive`, and the workflow's
:class:`shared.archive.sessions.Workflow`): one msgspec
Struct per answer, so that every surface (the writer's OpenAPI document, the MCP server, the CLI
over HTTP) sees its shape. The JSON of each is what the API answers.

:class:`~shared.projection.reconciliation.AuditReport` (an audit) and
:class:`~shared.models.RecallResponse` (a recall) are made in lower layers; they are re-exported
here so that the answers of the use cases are imported from one place.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

import msgspec

from shared.models import Card, IncomingLink, IndexStatus, RecallResponse
from shared.projection.reconciliation import AuditReport
from shared.workflow.requests import CardPreview, Decision, FieldChange, PossibleDuplicate

__all__ = ["ActivityEntry", "ActivityPage", "AuditReport", "CardDetail", "CardFeedback",
           "CardFeedbackEntry", "CardPage", "FeedbackEntry", "FeedbackResult", "RecalledCard",
           "RecallRecordDetail", "RecallRecordPage", "RecallRecordSummary",
           "DeleteResult", "DependencyStatus", "ImportResult", "OpenOperation",
           "PendingOperation", "PendingPage", "QueuedRebuild", "IndexModel", "IndexState", "Readiness", "RecallResponse",
           "Rebuild", "RetryResult", "WorkspaceStatus", "WriteResult"]


class WriteResult(msgspec.Struct):
    """Response of a create or update: the card as committed and its index status."""

    card: Card
    index_status: IndexStatus


class DeleteResult(msgspec.Struct):
    """Response of a delete: the removed id and whether its point is gone yet."""

    deleted: str
    index_status: Literal["current", "pending"]


#: What a projection operation does, and the statuses of one not done yet.
OperationKind = Literal["upsert", "delete"]
OpenStatus = Literal["pending", "running", "failed"]


class OpenOperation(msgspec.Struct):
    """An incomplete projection operation of a card: an ``upsert`` of a ``revision`` or a
    ``delete`` (no revision), its status, attempts and last error, and its age."""

    id: int
    op: OperationKind
    revision: int | None
    status: OpenStatus
    attempts: int
    last_error: str | None
    created_at: datetime
    age_seconds: float


class PendingOperation(msgspec.Struct):
    """An incomplete projection operation of the workspace (:class:`OpenOperation`, with its
    card's id, its lease and last update, and the card's title: None once the card is
    deleted)."""

    id: int
    card_id: str
    op: OperationKind
    revision: int | None
    status: OpenStatus
    attempts: int
    last_error: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    age_seconds: float
    title: str | None


class CardDetail(msgspec.Struct):
    """A card with its incoming links and projection detail (show)."""

    card: Card
    incoming_links: list[IncomingLink]
    open_operations: list[OpenOperation]


class CardPage(msgspec.Struct):
    """One page of a listing."""

    cards: list[Card]
    total: int
    page: int
    per_page: int


class PendingPage(msgspec.Struct):
    """Incomplete projection operations."""

    operations: list[PendingOperation]
    total: int


class RetryResult(msgspec.Struct):
    """Operations re-queued by a retry."""

    card_id: str
    operations: list[int]
    enqueued: bool


class ImportResult(msgspec.Struct):
    """What an import did: cards ``created`` (and ``by_family``, per family of those), existing
    cards ``updated`` (``on_conflict=update``, something differed), existing cards left as they
    were (``unchanged``: compared and equal, with ``update``; ``skipped``: not compared, with
    ``skip``), whether Redis took the projection jobs (``enqueued``; true when there were
    none), and how many curated evaluation cases the file held (``cases``, stored or replaced)."""

    created: int
    by_family: dict[str, int]
    enqueued: bool
    updated: int = 0
    unchanged: int = 0
    skipped: int = 0
    cases: int = 0


class ActivityEntry(msgspec.Struct):
    """One activity record: a state change, or a rejected or failed attempt (``outcome``
    ``rejected:<code>`` / ``failed:<code>``); ``card_id`` None when it names no card."""

    id: int
    at: datetime
    actor: str
    verb: str
    card_id: str | None
    outcome: str
    detail: dict[str, Any] | None


class ActivityPage(msgspec.Struct):
    """A page of the activity log, newest first, and how many records match in all."""

    activity: list[ActivityEntry]
    total: int


class Rebuild(msgspec.Struct, kw_only=True):
    """A tracked index rebuild: ``status`` (queued, running, done, failed, or declined: a
    shadow rebuild whose new collection evaluated worse), progress ``done`` of ``total``, the
    ``collection`` it writes, its ``summary`` or ``error``; ``shadow`` for a shadow rebuild or
    a switch back (``{dense_model, dense_model_path, force, restore}``, migration 025)."""

    id: uuid.UUID
    workspace_id: str
    status: Literal["queued", "running", "done", "failed", "declined"]
    requested_by: str
    total: int | None
    done: int
    collection: str | None
    summary: dict[str, Any] | None
    error: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    shadow: dict[str, Any] | None = None


class IndexModel(msgspec.Struct):
    """A collection and the dense model (fastembed id and folder; folder None: fastembed's
    cache) its points were made with."""

    collection: str | None
    model: str
    model_path: str | None


class IndexState(msgspec.Struct, kw_only=True):
    """The workspace's index as PostgreSQL records it (migrations 022, 025): ``current``, and
    ``previous``, the index a shadow switch kept (``POST .../index/switch-back`` restores it,
    ``DELETE .../index/previous`` drops it), with when the last switch happened."""

    current: IndexModel | None
    previous: IndexModel | None = None
    switched_at: datetime | None = None


def index_state_view(row: dict[str, Any] | None, configured: str | None) -> IndexState:
    """:class:`IndexState` of a recorded index row (``configured``: the process's model id,
    shown where the row names none)."""
    if row is None:
        return IndexState(current=None)
    default = configured or ""
    current = IndexModel(collection=row["collection"], model=row["dense_model"] or default,
                         model_path=row["dense_model_path"])
    previous = (IndexModel(collection=row["previous_collection"],
                           model=row["previous_dense_model"] or default,
                           model_path=row["previous_dense_model_path"])
                if row["previous_collection"] else None)
    return IndexState(current=current, previous=previous, switched_at=row["switched_at"])


class QueuedRebuild(Rebuild):
    """A rebuild just queued, and whether Redis took its job (``enqueued``; the sweep starts it
    otherwise)."""

    enqueued: bool


class DependencyStatus(msgspec.Struct):
    """Whether the archive's dependencies answer: PostgreSQL (up, since it answered) and the
    projection queue (Redis)."""

    database: Literal["up"]
    queue: Literal["up", "down"]


class Readiness(msgspec.Struct):
    """Whether the process can serve: ``ready``, or ``degraded`` while the projection queue
    (Redis) is down (saves still commit, their projection waits)."""

    status: Literal["ready", "degraded"]
    dependencies: DependencyStatus


class WorkspaceStatus(msgspec.Struct):
    """Cards per family, how many have a current projection, open operations, dependencies."""

    workspace: str
    by_family: dict[str, int]
    cards: int
    current: int
    open_operations: int
    dependencies: DependencyStatus


# ---- the workflow's answers (shared/archive/sessions.py) ----

class ProposalOutcome(msgspec.Struct):
    """How one proposal of a batch was stored: ``action`` is what a review would do now
    (``create``, ``reuse`` of the same card, ``update``); ``stored`` is ``new``, or
    ``unchanged`` for an identical re-send of a key already stored. ``possible_duplicate``: for
    an addition that creates, an existing card with loosely matching content."""

    key: str
    kind: str
    family: str
    action: Literal["create", "reuse", "update"]
    card_id: str | None
    base_revision: int | None
    stale: bool
    stored: Literal["new", "unchanged"]
    possible_duplicate: PossibleDuplicate | None = None


class ProposeResult(msgspec.Struct):
    """Response of propose: the batch's outcomes and how many proposals the session now holds."""

    session_id: str
    proposals: list[ProposalOutcome]
    session_total: int


class SummaryItem(msgspec.Struct):
    """One proposal in the reviewable summary.

    ``action``: ``create``, ``reuse`` (the same card exists: ``card_id``) or ``update``.
    ``possible_duplicate``: for an addition that would create a card, an existing card whose
    content matches loosely but which differs in the fields it names (the reviewer decides).
    ``card``: the card as the proposal would write it (for ``reuse``, the proposal's content).
    ``changes``: for updates, a field diff against the card's current state
    (``{"title": {before, after}, "content.rule": {...}, "concepts": {...}, ...}``, changed
    fields only). ``stale``: an update whose card moved past (or was deleted after) the revision
    it was drafted against. ``problems``: why a review would refuse it now.
    """

    key: str
    kind: str
    family: str
    action: Literal["create", "reuse", "update"]
    card_id: str | None
    base_revision: int | None
    current_revision: int | None
    stale: bool
    decisions: list[Decision]
    rationale: str
    card: CardPreview | None
    changes: dict[str, FieldChange]
    problems: list[str]
    #: once the session is reviewed: what the review did with it (from the receipt)
    reviewed: Literal["created", "updated", "reused", "declined"] | None = None
    possible_duplicate: PossibleDuplicate | None = None
    #: the card this proposal carried was deleted, and the proposal's content erased with it
    #: (only key, kind, family, card id and decisions are left; ``card`` is None)
    erased: bool = False


class ReviewedItem(msgspec.Struct, omit_defaults=True):
    """One selected proposal in a receipt: ``created``, ``updated`` or ``reused`` (the existing
    card; written only when the approved links add to it: ``links_added``, the new revision).
    ``links_not_written``: each approved link of a reused card that was not written, and why."""

    key: str
    kind: str
    action: Literal["created", "updated", "reused"]
    card_id: str
    revision: int
    family: str
    title: str
    #: the card was deleted since and its title erased with it (``title`` is empty); only
    #: present when true
    erased: bool = False
    #: the approved links written onto a reused card (target card ids); only when some were
    links_added: list[str] = []
    #: the approved links of a reused card that were not written: ``<target> (<meaning>): why``
    links_not_written: list[str] = []


class ProjectionEntry(msgspec.Struct):
    """A projection operation queued by a review: card, revision written, operation id."""

    card_id: str
    revision: int
    operation: int


class ReviewReceipt(msgspec.Struct):
    """The durable receipt of a review, returned identically on every delivery of its review id.

    ``outcome``: ``applied`` or ``declined`` (explicit decline of all). ``items``: the selected
    proposals and their cards. ``declined``: keys of the session's proposals not selected.
    ``projection``: the operations queued for the cards written (what solved-index re-runs).
    ``through``: the last proposal (its sequence number) the review covers, the summary version
    it was made on; ``open``: the proposals stored after it, left open for a later review
    (None and empty for a receipt that covers the whole session, as before issue 25).
    """

    review_id: str
    session_id: str
    outcome: Literal["applied", "declined"]
    reviewed_by: str
    reviewed_at: datetime
    items: list[ReviewedItem]
    declined: list[str]
    projection: list[ProjectionEntry]
    note: str = ""
    through: int | None = None
    open: list[str] = []


class ReviewOutcome(msgspec.Struct):
    """What :meth:`Workflow.review` returns: the receipt, and whether it was a replay."""

    receipt: ReviewReceipt
    replayed: bool


class Summary(msgspec.Struct):
    """The reviewable summary of a session: its proposals, counts, and its receipt once reviewed
    (``review``: the latest; ``reviews``: all of them, oldest first, when a review left proposals
    that arrived later open). ``version`` names this summary: a review sends it back, so that
    what arrived after it stays open and a summary changed otherwise is a 409."""

    session_id: str
    proposals: list[SummaryItem]
    counts: dict[str, int]
    review: ReviewReceipt | None
    version: str = ""
    reviews: list[ReviewReceipt] = []


class SessionOverview(msgspec.Struct):
    """One session of the list to review: its proposals (``additions``, ``updates``; ``open``:
    not reviewed yet, of which ``stale`` updates; ``erased`` with a deleted card), when the first
    and last arrived, who proposed them (actors), and its latest review (``review_id``,
    ``outcome``, by whom, when) once reviewed."""

    session_id: str
    additions: int
    updates: int
    stale: int
    erased: int
    open: int
    first_proposed_at: datetime
    last_proposed_at: datetime
    proposed_by: list[str]
    reviewed: bool
    review_id: str | None = None
    outcome: str | None = None
    reviewed_by: str | None = None
    reviewed_at: datetime | None = None


class SessionList(msgspec.Struct):
    """The workspace's sessions with proposals, latest proposal first (``status``: the filter
    applied; ``limit``: at most that many)."""

    status: Literal["open", "reviewed", "all"]
    sessions: list[SessionOverview]
    limit: int


class NearbyCard(msgspec.Struct):
    """A card recall finds near a proposed addition (``score``: recall's ranking score, not a
    similarity)."""

    card_id: str
    title: str
    family: str
    revision: int
    score: float


class NearbyItem(msgspec.Struct):
    """What the archive already holds near one open addition: ``similar``, the closest cards of
    its family by recall that are not the card it would reuse nor its possible duplicate
    ("similar, not the same": never merged automatically); ``solved``, the solved questions of
    its databases nearest to it (where it would be recalled)."""

    key: str
    similar: list[NearbyCard]
    solved: list[NearbyCard]


class ReviewNeighbours(msgspec.Struct):
    """The neighbours of a session's open additions, by key; ``available`` false (and
    ``reason``) when recall cannot answer now (no index, no model, privacy filter): the review
    goes on without them."""

    available: bool
    items: dict[str, NearbyItem]
    reason: str | None = None


class SolvedIndexCard(msgspec.Struct):
    """A card of the receipt: ``requeued`` (its projection runs again against its current state)
    or ``deleted`` (gone since: never recreated; any open point deletion is re-queued)."""

    card_id: str
    status: Literal["requeued", "deleted"]
    operations: list[int]


class SolvedIndexResult(msgspec.Struct):
    """Response of solved-index."""

    session_id: str
    review_id: str
    cards: list[SolvedIndexCard]
    operations: list[int]
    enqueued: bool


class DecisionRecord(msgspec.Struct, omit_defaults=True):
    """A card decided in a session: the decision, who recorded it (``token:<id>``) and when.
    In the response of a decide, ``stored`` says what the request did: ``new``, ``changed`` (the
    card was decided the other way before) or ``unchanged`` (the same decision again: its first
    author and time stay)."""

    card_id: str
    decision: Literal["accepted", "rejected"]
    decided_by: str
    decided_at: datetime
    stored: Literal["new", "changed", "unchanged"] | None = None


class SessionDecisions(msgspec.Struct):
    """The cards decided in a session (in the order they were decided, or for a decide the
    request's decisions in its order), and the session's counts ``{total, accepted, rejected}``."""

    session_id: str
    decisions: list[DecisionRecord]
    counts: dict[str, int]


# ---- feedback on recalls (issue 35, migration 027) ----

class FeedbackEntry(msgspec.Struct, omit_defaults=True):
    """One principal's verdict on one card of one recall. ``via``: api, mcp, explorer, admin,
    or review (recorded by a review that applied the session's proposals citing the card,
    ``review_id`` naming it). ``change`` (in the answer of a ``POST``): ``created``,
    ``updated`` (the verdict or note changed) or ``unchanged``; absent when read back."""

    card_id: str
    actor: str
    verdict: str
    note: str | None
    via: str
    review_id: str | None
    created_at: datetime
    updated_at: datetime
    change: Literal["created", "updated", "unchanged"] | None = None


class FeedbackResult(msgspec.Struct):
    """Answer of ``POST .../recalls/{recall_id}/feedback``: the verdicts as stored, in the
    request's order."""

    recall_id: str
    cards: list[FeedbackEntry]


class RecalledCard(msgspec.Struct):
    """One result of a recorded recall: rank (1 = first), score as the recall answered it, the
    card's family and title now (None: deleted since), and its verdicts on this recall."""

    rank: int
    card_id: str
    score: float
    family: str | None
    title: str | None
    feedback: list[FeedbackEntry]


class RecallRecordDetail(msgspec.Struct):
    """A recall record (``GET .../recalls/{recall_id}``): who asked what (``query_text`` None
    when MEMARC_RECALL_QUERY_TEXT was off; the digest always), in which session and mode, with
    which filters, what it returned in rank order with the feedback on each, how many index
    hits verification dropped, and the time of each stage (milliseconds)."""

    recall_id: str
    created_at: datetime
    actor: str
    session_id: str | None
    mode: str
    top: int
    families: list[str] | None
    filters: dict[str, Any]
    query_text: str | None
    query_digest: str
    results: list[RecalledCard]
    excluded: int
    timings: dict[str, float]


class RecallRecordSummary(msgspec.Struct):
    """A line of the recall records' list: how many results and verdicts."""

    recall_id: str
    created_at: datetime
    actor: str
    session_id: str | None
    mode: str
    query_text: str | None
    results: int
    verdicts: int


class RecallRecordPage(msgspec.Struct):
    """A page of recall records, newest first."""

    recalls: list[RecallRecordSummary]
    total: int
    page: int
    per_page: int


class CardFeedbackEntry(msgspec.Struct):
    """One verdict on a card with its recall's id, mode and question (None: not kept)."""

    recall_id: str
    mode: str
    query_text: str | None
    actor: str
    verdict: str
    note: str | None
    via: str
    updated_at: datetime


class CardFeedback(msgspec.Struct):
    """The feedback on one card (its page): verdict counts over the records' retention, and the
    newest verdicts with the question of the recall each was given on."""

    card_id: str
    counts: dict[str, int]
    recent: list[CardFeedbackEntry]
