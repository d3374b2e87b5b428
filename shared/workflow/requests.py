"""The workflow's requests (DESIGN §6), the values the review rules build, and the request digest.

The request structs are the API's (``writer/routes/sessions.py`` takes them, the OpenAPI document
shows them); the answers are in :mod:`shared.archive.responses`. :func:`digest` identifies a
request for idempotency (a stored proposal, a review receipt, a schema-change run).
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
    either the selected proposals or ``decline_all: true``. ``version``: the summary's version the
    review was made on (``Summary.version``); proposals stored after it stay open (neither
    applied nor declined), and a summary that changed otherwise since is a 409. Without it the
    review covers every open proposal."""

    review_id: Annotated[str, Meta(min_length=1, max_length=200)]
    selected: Annotated[list[ReviewSelection], Meta(max_length=MAX_SESSION_PROPOSALS)] = []
    decline_all: bool = False
    note: Annotated[str, Meta(max_length=2000)] = ""
    version: Annotated[str, Meta(min_length=1, max_length=100)] | None = None


class CardDecision(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The user's decision on a card recalled in a session: ``accepted`` or ``rejected``
    (``card_id``: ``mem-<uuid>`` in any case, as everywhere)."""

    card_id: CardRef
    decision: Literal["accepted", "rejected"]


class DecideRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST .../sessions/{session_id}/decisions``: 1..100 decisions, each card once."""

    decisions: Annotated[list[CardDecision], Meta(min_length=1, max_length=MAX_DECIDE_BATCH)]


# ---- values the review rules build (shared/workflow/rules.py), shown in the answers ----

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


def digest(request: msgspec.Struct) -> str:
    """SHA-256 (hex) of a request's canonical JSON encoding (sorted keys): equal requests, equal
    digests. Keys a stored proposal, a review receipt and a schema-change run."""
    return hashlib.sha256(msgspec.json.encode(msgspec.to_builtins(request),
                                              order="sorted")).hexdigest()
