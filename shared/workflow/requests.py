"""The workflow's wire format (DESIGN §6): request and response structs, and the request digest.

The structs are the API's (``writer/routes/sessions.py`` takes and returns them, the OpenAPI document
shows them); :func:`digest` identifies a request for idempotency (a stored proposal, a review
receipt, a schema-change run).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from shared.models import (MAX_CONCEPT, MAX_CONCEPTS, MAX_DEPENDENCIES, MAX_LINKS, MAX_MEANING,
                           MAX_SCOPE, MAX_TEXT, MAX_TITLE, CardRef, Dependency, Family)

MAX_BATCH = 100
MAX_SESSION_PROPOSALS = 500
MAX_KEY = 100
MAX_DECISIONS = 50
#: cards decided per request, and per session (as many as a recall may exclude explicitly)
MAX_DECIDE_BATCH = 100
MAX_SESSION_DECISIONS = 500

SessionId = Annotated[str, Meta(min_length=1, max_length=200)]
Key = Annotated[str, Meta(min_length=1, max_length=MAX_KEY)]
Concepts = Annotated[list[Annotated[str, Meta(max_length=MAX_CONCEPT)]], Meta(max_length=MAX_CONCEPTS)]
Dependencies = Annotated[list[Dependency], Meta(max_length=MAX_DEPENDENCIES)]
Content = Annotated[dict[str, str], Meta(max_length=8)]

# ---- request structs ----

class Decision(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A decision of the session as the caller's workflow recorded it (``approved``, ``rejected``,
    ...). Only proposals with an ``approved`` decision can be stored; the approved ids become the
    card's ``source.decision_ids``."""

    id: Annotated[str, Meta(min_length=1, max_length=200)]
    status: Annotated[str, Meta(min_length=1, max_length=50)]


class ProposalLink(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A link of a proposal: ``target`` is a card id (``mem-<uuid>``) or the key of another
    proposal of the same session."""

    target: Annotated[str, Meta(min_length=1, max_length=MAX_KEY)]
    meaning: Annotated[str, Meta(max_length=MAX_MEANING)] = ""


class Proposal(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One proposal of a batch.

    ``kind = "addition"`` (default): ``family``, ``title`` and ``content`` are required; the other
    card fields default to empty. ``kind = "update"``: ``card_id`` and ``revision`` (the revision
    the proposal was drafted against) are required; every card field left out (``null``) keeps
    the card's current value, a given field replaces it (``content`` as a whole; ``scope: ""``
    clears the scope). ``rationale`` explains the proposal to the reviewer.
    """

    key: Key
    decisions: Annotated[list[Decision], Meta(max_length=MAX_DECISIONS)] = []
    kind: Literal["addition", "update"] = "addition"
    card_id: CardRef | None = None
    revision: Annotated[int, Meta(ge=1)] | None = None
    family: Family | None = None
    title: Annotated[str, Meta(max_length=MAX_TITLE)] | None = None
    content: Content | None = None
    scope: Annotated[str, Meta(max_length=MAX_SCOPE)] | None = None
    concepts: Concepts | None = None
    dependencies: Dependencies | None = None
    links: Annotated[list[ProposalLink], Meta(max_length=MAX_LINKS)] | None = None
    rationale: Annotated[str, Meta(max_length=MAX_TEXT)] = ""


class ProposeRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST .../sessions/{session_id}/proposals``: 1..100 proposals."""

    proposals: Annotated[list[Proposal], Meta(min_length=1, max_length=MAX_BATCH)]


class ReviewEdits(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A reviewer's edits of one proposal. Given fields replace the proposal's; ``content`` is
    merged field by field (``""`` removes an optional field). A solved question's ``sql`` is
    read-only in review (changing it means going back to SQL review)."""

    title: Annotated[str, Meta(max_length=MAX_TITLE)] | None = None
    content: Content | None = None
    scope: Annotated[str, Meta(max_length=MAX_SCOPE)] | None = None
    concepts: Concepts | None = None
    dependencies: Dependencies | None = None
    links: Annotated[list[ProposalLink], Meta(max_length=MAX_LINKS)] | None = None


class CardRevision(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A card (``mem-<uuid>``) at the revision the reviewer saw (e.g. a possible duplicate)."""

    card_id: CardRef
    revision: Annotated[int, Meta(ge=1)]


class ReviewSelection(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One selected proposal (by key) with the reviewer's optional edits. ``as_update_of``
    applies an addition to an existing card of its family instead of creating one (the reviewer's
    answer to a possible duplicate): the fields the proposal gives (and the edits) replace the
    card's, the others keep theirs, as for an update proposal drafted against that revision."""

    key: Key
    edits: ReviewEdits | None = None
    as_update_of: CardRevision | None = None


class ReviewRequest(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Body of ``POST .../sessions/{session_id}/review``: ``review_id`` (idempotency key) and
    either the selected proposals or ``decline_all: true``."""

    review_id: Annotated[str, Meta(min_length=1, max_length=200)]
    selected: Annotated[list[ReviewSelection], Meta(max_length=MAX_SESSION_PROPOSALS)] = []
    decline_all: bool = False
    note: Annotated[str, Meta(max_length=2000)] = ""


class CardDecision(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The user's decision on a card recalled in a session: ``accepted`` or ``rejected``
    (``card_id``: ``mem-<uuid>`` in any case, as everywhere)."""

    card_id: CardRef
    decision: Literal["accepted", "rejected"]


class DecideRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST .../sessions/{session_id}/decisions``: 1..100 decisions, each card once."""

    decisions: Annotated[list[CardDecision], Meta(min_length=1, max_length=MAX_DECIDE_BATCH)]


# ---- response structs ----

class PossibleDuplicate(msgspec.Struct):
    """An existing card whose content matches an addition's loosely (whitespace and case aside)
    but which is not the same card: ``differs`` names the fields that differ (``content``, when
    only case, SQL literals or whitespace inside them differ; ``scope``, ``concepts``,
    ``dependencies``). The reviewer decides: add it anyway, apply it as an update of this card
    (``as_update_of`` in the review), or decline it; it is never reused silently."""

    card_id: str
    revision: int
    title: str
    differs: list[str]


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


class FieldChange(msgspec.Struct):
    """One changed field of an update: its value before (the card now) and after."""

    before: Any
    after: Any


class CardPreview(msgspec.Struct):
    """The card fields a proposal would write (links as given: card ids or proposal keys)."""

    family: str
    title: str
    content: dict[str, str]
    scope: str | None
    concepts: list[str]
    dependencies: list[Dependency]
    links: list[ProposalLink]


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
    """One selected proposal in a receipt: ``created``, ``updated`` or ``reused`` (no write)."""

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


class ReviewOutcome(msgspec.Struct):
    """What :meth:`Workflow.review` returns: the receipt, and whether it was a replay."""

    receipt: ReviewReceipt
    replayed: bool


class Summary(msgspec.Struct):
    """The reviewable summary of a session: its proposals, counts, and its receipt once reviewed."""

    session_id: str
    proposals: list[SummaryItem]
    counts: dict[str, int]
    review: ReviewReceipt | None


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


def digest(request: msgspec.Struct) -> str:
    """SHA-256 (hex) of a request's canonical JSON encoding (sorted keys): equal requests, equal
    digests. Keys a stored proposal, a review receipt and a schema-change run."""
    return hashlib.sha256(msgspec.json.encode(msgspec.to_builtins(request),
                                              order="sorted")).hexdigest()
