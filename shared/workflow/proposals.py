"""Workflow (DESIGN §6): session proposals, the reviewable summary, reviewed promotion with a
durable receipt, and solved-index. Permission ``memory.review``, checked again here.

- :meth:`Workflow.propose` validates and stores a batch of proposals of one session: additions and
  updates, each with its source decisions, content, scope, rationale, dependencies and links (to
  existing cards by ``mem-`` id, or to other proposals of the session by their local key). A
  proposal needs an ``approved`` decision and reusable content. An addition whose family and
  normalised content (see :data:`NORMALISATION`) equal an existing card's is a *reuse* of that card.
- :meth:`Workflow.summary` shows each proposal, what it would create or change (a field diff for
  updates) and which are stale, computed against the archive's current state.
- :meth:`Workflow.review` applies a reviewer's selection (with edits) in one transaction under the
  workspace lock, and writes a **review receipt** in the same transaction. The review id is the
  idempotency key: a repeated delivery returns the stored receipt and writes nothing (so a card
  created by the review and deleted since is never recreated).
- :meth:`Workflow.solved_index` re-queues the projection recorded by a session's receipt.

This module imports no web framework; the writer's ``writer/workflow.py`` only parses and calls it.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from shared.archive.activity import audited, record_rejection
from shared.auth import Principal
from shared.errors import ArchiveError, Conflict, InvalidInput, NotFound, StaleRevision
from shared.models import (FAMILY_FIELDS, MAX_CONCEPT, MAX_CONCEPTS, MAX_DEPENDENCIES, MAX_LINKS,
                           MAX_MEANING, MAX_SCOPE, MAX_TEXT, MAX_TITLE, Card, CardRef, CardWrite,
                           Dependency, Family, LinkIn, Source, card_id_str, parse_card_id,
                           reject_nul, validate_card_write)
from shared.projection.queue import ProjectionQueue
from shared.store import repository
from shared.store.database import Database, Q

log = logging.getLogger(__name__)

#: How "identical content" is decided (DESIGN §6): same family, and every content field equal
#: after collapsing whitespace runs to one space, trimming and lower-casing (PostgreSQL
#: ``lower()``; empty fields are ignored). Implemented once, in SQL (``normalized_content()``,
#: migration 003), and applied to both sides of every comparison.
NORMALISATION = "whitespace collapsed, trimmed, lower-cased; per content field; same family"

MAX_BATCH = 100
MAX_SESSION_PROPOSALS = 500
MAX_KEY = 100
MAX_DECISIONS = 50

SessionId = Annotated[str, Meta(min_length=1, max_length=200)]
Key = Annotated[str, Meta(min_length=1, max_length=MAX_KEY)]
Concepts = Annotated[list[Annotated[str, Meta(max_length=MAX_CONCEPT)]], Meta(max_length=MAX_CONCEPTS)]
Dependencies = Annotated[list[Dependency], Meta(max_length=MAX_DEPENDENCIES)]
Content = Annotated[dict[str, str], Meta(max_length=8)]

#: What each family needs to be reusable knowledge (the family's required content fields).
REUSABLE: dict[str, str] = {
    "domain_clarification": "a definition",
    "sql_rule": "a rule",
    "solved_question": "a question and its SQL",
    "explained_error": "an error and its correction",
}


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


class ReviewSelection(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One selected proposal (by key) with the reviewer's optional edits."""

    key: Key
    edits: ReviewEdits | None = None


class ReviewRequest(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Body of ``POST .../sessions/{session_id}/review``: ``review_id`` (idempotency key) and
    either the selected proposals or ``decline_all: true``."""

    review_id: Annotated[str, Meta(min_length=1, max_length=200)]
    selected: Annotated[list[ReviewSelection], Meta(max_length=MAX_SESSION_PROPOSALS)] = []
    decline_all: bool = False
    note: Annotated[str, Meta(max_length=2000)] = ""


# ---- response structs ----

class ProposalOutcome(msgspec.Struct):
    """How one proposal of a batch was stored: ``action`` is what a review would do now
    (``create``, ``reuse`` of an identical card, ``update``); ``stored`` is ``new``, or
    ``unchanged`` for an identical re-send of a key already stored."""

    key: str
    kind: str
    family: str
    action: Literal["create", "reuse", "update"]
    card_id: str | None
    base_revision: int | None
    stale: bool
    stored: Literal["new", "unchanged"]


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

    ``action``: ``create``, ``reuse`` (an identical card exists: ``card_id``) or ``update``.
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


class ReviewedItem(msgspec.Struct):
    """One selected proposal in a receipt: ``created``, ``updated`` or ``reused`` (no write)."""

    key: str
    kind: str
    action: Literal["created", "updated", "reused"]
    card_id: str
    revision: int
    family: str
    title: str


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


# ---- helpers ----

def _digest(obj: Any) -> str:
    """SHA-256 of a canonical JSON encoding (sorted keys): equal requests, equal digests."""
    return hashlib.sha256(msgspec.json.encode(msgspec.to_builtins(obj), order="sorted")).hexdigest()


def _approved(decisions: list[Decision]) -> list[str]:
    return [d.id.strip() for d in decisions if d.status.strip().lower() == "approved"]


def _at(where: str, key: str, exc: ArchiveError) -> ArchiveError:
    """Re-raise ``exc`` naming the failing item (``where`` and its key)."""
    field = exc.extra.get("field")
    extra = {**exc.extra, "field": f"{where}.{field}" if field else where, "item": key}
    new = type(exc)(f"{where} (key {key!r}): {exc.message}", **extra)
    return new


def _clean_session(session_id: str) -> str:
    session_id = session_id.strip()
    if not session_id or len(session_id) > 200:
        raise InvalidInput("a session id is 1..200 characters", field="session_id")
    reject_nul(session_id, "session_id")
    return session_id


def _check_reusable(family: str, content: dict[str, str], where: str, key: str) -> None:
    required, _ = FAMILY_FIELDS[family]
    if not all((content.get(f) or "").strip() for f in required):
        missing = ", ".join(f for f in required if not (content.get(f) or "").strip())
        raise InvalidInput(f"{where} (key {key!r}): no reusable content: a {family} needs "
                           f"{REUSABLE[family]} (missing {missing})",
                           field=f"{where}.content", item=key)


def _card_links(card: Card) -> list[ProposalLink]:
    return [ProposalLink(target=link.target, meaning=link.meaning) for link in card.links]


_OVERLAID = ("title", "scope", "concepts", "dependencies", "links")


def _overlay(fields: dict[str, Any], patch: Proposal | ReviewEdits) -> None:
    """Every field ``patch`` gives (not None) replaces the current one."""
    for name in _OVERLAID:
        value = getattr(patch, name)
        if value is not None:
            fields[name] = list(value) if isinstance(value, list) else value


def _build(p: Proposal, card: Card | None, edits: ReviewEdits | None, where: str) -> CardWrite:
    """The validated card body a proposal (plus a reviewer's edits) would write.

    For an update, ``card`` is the card's current state and fields the proposal leaves out keep
    their current values. Links keep their targets as given (card ids or proposal keys).

    :raises InvalidInput: no reusable content, an invalid field, or an edit of the approved SQL.
    """
    if p.kind == "update":
        assert card is not None
        family: str = card.family
        fields: dict[str, Any] = {"title": card.title, "scope": card.scope,
                                  "concepts": list(card.concepts),
                                  "dependencies": list(card.dependencies),
                                  "links": _card_links(card)}
        content = dict(card.content)
        _overlay(fields, p)
        if p.content is not None:  # a proposal's content replaces the card's as a whole
            content = dict(p.content)
    else:
        family = p.family  # type: ignore[assignment]
        fields = {"title": p.title or "", "scope": p.scope, "concepts": list(p.concepts or []),
                  "dependencies": list(p.dependencies or []), "links": list(p.links or [])}
        content = dict(p.content or {})
    if edits is not None:
        if edits.content is not None:
            if family == "solved_question" and "sql" in edits.content and \
                    edits.content["sql"].strip() != (content.get("sql") or "").strip():
                raise InvalidInput(
                    f"{where} (key {p.key!r}): the session's approved SQL is read-only in review "
                    "(changing it means going back to SQL review); its question and context "
                    "can be edited", field=f"{where}.edits.content.sql", item=p.key)
            content.update(edits.content)  # a reviewer's content edits merge field by field
        _overlay(fields, edits)
    _check_reusable(family, content, where, p.key)
    body = CardWrite(family=family, title=fields["title"], content=content,  # type: ignore[arg-type]
                     scope=fields["scope"], concepts=fields["concepts"],
                     dependencies=fields["dependencies"],
                     links=[LinkIn(target=link.target.strip(), meaning=link.meaning.strip())
                            for link in fields["links"]])
    try:
        validate_card_write(body)
    except InvalidInput as exc:
        raise _at(where, p.key, exc) from exc
    return body


def _check_proposal(p: Proposal, where: str) -> None:
    """Checks that need no database: decisions, kind-specific fields, NUL characters.

    :raises InvalidInput: naming the proposal.
    """
    def bad(message: str, field: str) -> InvalidInput:
        return InvalidInput(f"{where} (key {p.key!r}): {message}", field=f"{where}.{field}",
                            item=p.key)

    for text, field in ((p.key, "key"), (p.rationale, "rationale"),
                        *((f"{d.id}{d.status}", f"decisions[{i}]") for i, d in enumerate(p.decisions))):
        if "\x00" in text:
            raise bad("must not contain NUL characters", field)
    if not p.key.strip() or p.key != p.key.strip():
        raise bad("a key is non-empty and has no surrounding whitespace", "key")
    if parse_card_id(p.key) is not None:
        raise bad("a key must not look like a card id (mem-<uuid>)", "key")
    if not _approved(p.decisions):
        found = ", ".join(sorted({d.status for d in p.decisions})) or "none"
        raise bad("no approved decision: only knowledge from an approved decision can be "
                  f"proposed (decision statuses: {found})", "decisions")
    if p.kind == "addition":
        if p.card_id is not None or p.revision is not None:
            raise bad("an addition names no card_id or revision (use kind 'update')", "card_id")
        if p.family is None:
            raise bad("an addition needs a family", "family")
        if p.title is None or not p.title.strip():
            raise bad("an addition needs a title", "title")
        _check_reusable(p.family, p.content or {}, where, p.key)
    else:
        if p.card_id is None or parse_card_id(p.card_id) is None:
            raise bad("an update names the card it edits (card_id: mem-<uuid>)", "card_id")
        if p.revision is None:
            raise bad("an update names the revision it was drafted against", "revision")
        if all(v is None for v in (p.title, p.content, p.scope, p.concepts, p.dependencies,
                                   p.links)):
            raise bad("an update changes at least one field", "content")
        if p.content is not None:
            family = p.family
            if family is not None:
                _check_reusable(family, p.content, where, p.key)


def _diff(card: Card, body: CardWrite) -> dict[str, FieldChange]:
    """Changed fields between a card and the body an update would write."""
    changes: dict[str, FieldChange] = {}
    if card.title != body.title:
        changes["title"] = FieldChange(card.title, body.title)
    for name in sorted(set(card.content) | set(body.content)):
        before, after = card.content.get(name), body.content.get(name)
        if before != after:
            changes[f"content.{name}"] = FieldChange(before, after)
    if card.scope != body.scope:
        changes["scope"] = FieldChange(card.scope, body.scope)
    if card.concepts != body.concepts:
        changes["concepts"] = FieldChange(card.concepts, body.concepts)
    before_deps = [msgspec.to_builtins(d) for d in card.dependencies]
    after_deps = [msgspec.to_builtins(d) for d in body.dependencies]
    if before_deps != after_deps:
        changes["dependencies"] = FieldChange(before_deps, after_deps)
    before_links = sorted((link.target, link.meaning) for link in card.links)
    after_links = sorted((link.target, link.meaning) for link in body.links)
    if before_links != after_links:
        changes["links"] = FieldChange([{"target": t, "meaning": m} for t, m in before_links],
                                       [{"target": t, "meaning": m} for t, m in after_links])
    return changes


def _preview(body: CardWrite) -> CardPreview:
    return CardPreview(family=body.family, title=body.title, content=body.content,
                       scope=body.scope, concepts=body.concepts, dependencies=body.dependencies,
                       links=[ProposalLink(target=link.target, meaning=link.meaning)
                              for link in body.links])


async def _reuse_targets(conn: AsyncConnection,
                         bodies: list[CardWrite]) -> list[uuid.UUID | None]:
    """For each body, the oldest existing card with the same family and normalised content."""
    if not bodies:
        return []
    cur = await conn.execute(Q.wf_cards_same_content, {
        "families": [b.family for b in bodies], "contents": [Jsonb(b.content) for b in bodies]})
    found = {row["i"]: row["id"] for row in await cur.fetchall()}
    return [found.get(i) for i in range(1, len(bodies) + 1)]


async def _normalised(conn: AsyncConnection, bodies: list[CardWrite]) -> list[str]:
    """The normalised content of each body, as canonical JSON text (for duplicate checks)."""
    if not bodies:
        return []
    cur = await conn.execute(Q.wf_normalized_contents,
                             {"contents": [Jsonb(b.content) for b in bodies]})
    return [msgspec.json.encode(row["norm"], order="sorted").decode()
            for row in await cur.fetchall()]


def _first_duplicate(families: list[str], norms: list[str]) -> tuple[int, int] | None:
    seen: dict[tuple[str, str], int] = {}
    for j, pair in enumerate(zip(families, norms)):
        if pair in seen:
            return seen[pair], j
        seen[pair] = j
    return None


class _Stored(msgspec.Struct):
    """A proposal row as stored."""

    key: str
    kind: str
    family: str
    card_id: uuid.UUID | None
    base_revision: int | None
    proposal: Proposal


async def _load(conn: AsyncConnection, session_id: str) -> list[_Stored]:
    cur = await conn.execute(Q.wf_proposals_for_session, {"session_id": session_id})
    return [_Stored(key=r["key"], kind=r["kind"], family=r["family"], card_id=r["card_id"],
                    base_revision=r["base_revision"],
                    proposal=msgspec.convert(r["proposal"], Proposal))
            for r in await cur.fetchall()]


def _receipt_from_row(row: dict[str, Any]) -> ReviewReceipt:
    return msgspec.convert(row["result"], ReviewReceipt)


class Workflow:
    """Proposals, summary, review and solved-index over one database and projection queue."""

    def __init__(self, db: Database, queue: ProjectionQueue) -> None:
        self.db = db
        self.queue = queue

    async def _reject(self, principal: Principal, workspace: str, verb: str, session_id: str,
                      exc: ArchiveError) -> None:
        """Record a rejected request in its own transaction (the only trace it leaves)."""
        await record_rejection(self.db, principal, workspace, verb, exc,
                               detail={"session": session_id[:200]})

    # ---- propose ----

    @audited("propose")
    async def propose(self, principal: Principal, workspace: str, session_id: str,
                      req: ProposeRequest) -> ProposeResult:
        """Validate and store a batch of proposals of ``session_id``.

        Re-sending a proposal identical to one already stored under its key is a no-op
        (``stored: unchanged``), so a retried delivery stores nothing twice.

        :raises InvalidInput: a proposal without an approved decision or reusable content, an
            invalid field, an update of a card not in this workspace or of another family, a link
            to a card not in this workspace or to an unknown key, duplicate keys or duplicate
            content in the batch (the failing proposal is named: ``item`` = its key).
        :raises Conflict: the session was already reviewed; a key already stored with other
            content; more than 500 proposals in the session.
        :raises Forbidden / NotFound: principal.
        """
        principal.require(workspace, "memory.review")
        session_id = _clean_session(session_id)
        try:
            return await self._propose(principal, workspace, session_id, req)
        except ArchiveError as exc:
            if exc.status < 500:
                await self._reject(principal, workspace, "propose", session_id, exc)
            raise

    async def _propose(self, principal: Principal, workspace: str, session_id: str,
                       req: ProposeRequest) -> ProposeResult:
        batch_keys: dict[str, int] = {}
        for i, p in enumerate(req.proposals):
            where = f"proposals[{i}]"
            _check_proposal(p, where)
            if p.key in batch_keys:
                raise InvalidInput(f"{where}: duplicate key {p.key!r} (also proposals"
                                   f"[{batch_keys[p.key]}])", field=f"{where}.key", item=p.key)
            batch_keys[p.key] = i
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await repository.workspace(conn, workspace)
            receipt = await (await conn.execute(Q.wf_receipt_for_session,
                                                {"session_id": session_id})).fetchone()
            if receipt is not None:
                raise Conflict(f"session {session_id!r} was already reviewed (review "
                               f"{receipt['review_id']!r}); start a new session",
                               review_id=receipt["review_id"])
            stored = {s.key: s for s in await _load(conn, session_id)}
            update_ids = [parse_card_id(p.card_id) for p in req.proposals
                          if p.kind == "update" and p.card_id]
            cards = await repository.get_cards(conn, [c for c in update_ids if c])
            bodies: list[CardWrite] = []
            for i, p in enumerate(req.proposals):
                where = f"proposals[{i}]"
                card = None
                if p.kind == "update":
                    card = cards.get(parse_card_id(p.card_id))  # type: ignore[arg-type]
                    if card is None:
                        raise InvalidInput(f"{where} (key {p.key!r}): {p.card_id} is not a card of "
                                           "this workspace", field=f"{where}.card_id", item=p.key)
                    if p.family is not None and p.family != card.family:
                        raise InvalidInput(f"{where} (key {p.key!r}): a card's family cannot "
                                           f"change ({card.family} -> {p.family})",
                                           field=f"{where}.family", item=p.key)
                bodies.append(_build(p, card, None, where))
            known_keys = set(batch_keys) | set(stored)
            for i, (p, body) in enumerate(zip(req.proposals, bodies)):
                where = f"proposals[{i}]"
                external: list[LinkIn] = []
                for j, link in enumerate(body.links):
                    if parse_card_id(link.target) is not None:
                        external.append(link)
                    elif link.target == p.key:
                        raise InvalidInput(f"{where} (key {p.key!r}): links[{j}]: a proposal "
                                           "cannot link to itself",
                                           field=f"{where}.links[{j}].target", item=p.key)
                    elif link.target not in known_keys:
                        raise InvalidInput(f"{where} (key {p.key!r}): links[{j}].target "
                                           f"{link.target!r} is neither a card id nor the key of a "
                                           "proposal of this session",
                                           field=f"{where}.links[{j}].target", item=p.key)
                self_id = parse_card_id(p.card_id) if p.kind == "update" and p.card_id else None
                try:
                    await repository.resolve_link_targets(conn, external, self_id=self_id)
                except InvalidInput as exc:
                    raise _at(where, p.key, exc) from exc
            # additions identical to an existing card are reuses; among the others, content
            # must not repeat inside the session (a review could not create both)
            adds = [(f"proposals[{i}]", p.key, i, b)
                    for i, (p, b) in enumerate(zip(req.proposals, bodies)) if p.kind == "addition"]
            adds += [(f"stored proposal {s.key!r}", s.key, None,
                      _build(s.proposal, None, None, f"stored proposal {s.key!r}"))
                     for s in stored.values() if s.kind == "addition" and s.key not in batch_keys]
            targets = await _reuse_targets(conn, [b for *_, b in adds])
            creates = [n for n, target in enumerate(targets) if target is None]
            dup = _first_duplicate([adds[n][3].family for n in creates],
                                   await _normalised(conn, [adds[n][3] for n in creates]))
            if dup is not None:
                first, second = adds[creates[dup[0]]], adds[creates[dup[1]]]
                if second[2] is None:  # blame the proposal of this batch, not the stored one
                    first, second = second, first
                raise InvalidInput(f"{second[0]} (key {second[1]!r}): same family and content "
                                   f"as {first[0]} (key {first[1]!r})",
                                   field=f"{second[0]}.content", item=second[1])
            reuse = {a[2]: target for a, target in zip(adds, targets) if a[2] is not None}
            outcomes: list[ProposalOutcome] = []
            new_keys: list[str] = []
            for i, (p, body) in enumerate(zip(req.proposals, bodies)):
                digest = _digest(p)
                card_uuid = parse_card_id(p.card_id) if p.kind == "update" and p.card_id else None
                reuse_id = reuse.get(i)
                prior = stored.get(p.key)
                if prior is not None:
                    if _digest(prior.proposal) != digest:
                        raise Conflict(f"proposals[{i}] (key {p.key!r}): this session already "
                                       "holds another proposal under that key",
                                       field=f"proposals[{i}].key", item=p.key)
                    state = "unchanged"
                else:
                    await conn.execute(Q.wf_proposal_insert, {
                        "workspace": workspace, "session_id": session_id, "key": p.key,
                        "kind": p.kind, "family": body.family, "card_id": card_uuid,
                        "base_revision": p.revision if p.kind == "update" else None,
                        "reuse_card_id": reuse_id, "proposal": Jsonb(msgspec.to_builtins(p)),
                        "digest": digest, "actor": principal.actor})
                    new_keys.append(p.key)
                    state = "new"
                stale = bool(card_uuid and cards[card_uuid].revision != p.revision)
                outcomes.append(ProposalOutcome(
                    key=p.key, kind=p.kind, family=body.family,
                    action="update" if p.kind == "update" else ("reuse" if reuse_id else "create"),
                    card_id=card_id_str(card_uuid or reuse_id) if (card_uuid or reuse_id) else None,
                    base_revision=p.revision if p.kind == "update" else None, stale=stale,
                    stored=state))  # type: ignore[arg-type]
            total = (await (await conn.execute(Q.wf_proposal_count,
                                               {"session_id": session_id})).fetchone())["n"]
            if total > MAX_SESSION_PROPOSALS:
                raise Conflict(f"a session holds at most {MAX_SESSION_PROPOSALS} proposals",
                               field="proposals")
            if new_keys:
                await repository.record_activity(
                    conn, workspace, actor=principal.actor, verb="propose", outcome="ok",
                    detail={"session": session_id, "proposals": new_keys[:100],
                            "count": len(new_keys)})
        return ProposeResult(session_id=session_id, proposals=outcomes, session_total=total)

    # ---- summary ----

    async def summary(self, principal: Principal, workspace: str, session_id: str) -> Summary:
        """The session's proposals as one reviewable document, against the current archive:
        what each would create, reuse or change (field diff), which are stale, and the review
        receipt once the session was reviewed.

        :raises NotFound: no proposals in this session (or principal of another workspace).
        :raises Forbidden: the token lacks ``memory.review``.
        """
        principal.require(workspace, "memory.review")
        session_id = _clean_session(session_id)
        async with self.db.transaction(workspace, read_only=True, lock="shared") as conn:
            await repository.workspace(conn, workspace)
            stored = await _load(conn, session_id)
            receipt_row = await (await conn.execute(Q.wf_receipt_for_session,
                                                    {"session_id": session_id})).fetchone()
            if not stored:
                raise NotFound(f"no proposals in session {session_id!r}")
            cards = await repository.get_cards(conn, [s.card_id for s in stored if s.card_id])
            keys = {s.key for s in stored}
            items: list[SummaryItem] = []
            bodies: list[tuple[int, CardWrite]] = []
            for s in stored:
                p = s.proposal
                problems: list[str] = []
                card = cards.get(s.card_id) if s.card_id else None
                body: CardWrite | None = None
                changes: dict[str, FieldChange] = {}
                if s.kind == "update" and card is None:
                    problems.append(f"card {card_id_str(s.card_id)} was deleted since the "  # type: ignore[arg-type]
                                    "proposal was drafted")
                else:
                    try:
                        body = _build(p, card, None, "proposal")
                    except InvalidInput as exc:  # e.g. the card changed under an update
                        problems.append(exc.message)
                if card is not None and card.revision != s.base_revision:
                    problems.append(f"stale: card is at revision {card.revision}, the proposal "
                                    f"was drafted against revision {s.base_revision}")
                if body is not None:
                    if card is not None:
                        changes = _diff(card, body)
                    for link in body.links:
                        if parse_card_id(link.target) is None and link.target not in keys:
                            problems.append(f"link to unknown proposal {link.target!r}")
                    bodies.append((len(items), body))
                items.append(SummaryItem(
                    key=s.key, kind=s.kind, family=s.family,
                    action="update" if s.kind == "update" else "create",
                    card_id=card_id_str(s.card_id) if s.card_id else None,
                    base_revision=s.base_revision,
                    current_revision=card.revision if card is not None else None,
                    stale=s.kind == "update" and (card is None or card.revision != s.base_revision),
                    decisions=p.decisions, rationale=p.rationale,
                    card=_preview(body) if body is not None else None, changes=changes,
                    problems=problems))
            # links to existing cards that are gone now
            external = sorted({cid for _, b in bodies for link in b.links
                               if (cid := parse_card_id(link.target)) is not None})
            if external:
                cur = await conn.execute(Q.card_ids_existing, {"ids": external})
                existing = {r["id"] for r in await cur.fetchall()}
                for n, b in bodies:
                    for link in b.links:
                        cid = parse_card_id(link.target)
                        if cid is not None and cid not in existing:
                            items[n].problems.append(
                                f"link target {link.target} is not a card of this workspace")
            receipt = _receipt_from_row(receipt_row) if receipt_row else None
            if receipt is None:
                adds = [(n, b) for n, b in bodies if items[n].kind == "addition"]
                for (n, _), reuse_id in zip(adds, await _reuse_targets(conn, [b for _, b in adds])):
                    if reuse_id is not None:
                        items[n].action = "reuse"
                        items[n].card_id = card_id_str(reuse_id)
            else:
                # a reviewed session is closed: show what the review did (the receipt), not what
                # a review would do now (its own new cards would read as reuses)
                done = {i.key: i for i in receipt.items}
                for item in items:
                    r = done.get(item.key)
                    item.reviewed = r.action if r is not None else "declined"
                    if r is not None:
                        item.action = {"created": "create", "updated": "update",
                                       "reused": "reuse"}[r.action]
                        item.card_id = r.card_id
                    item.stale, item.problems = False, []
        counts = {"total": len(items),
                  "create": sum(i.action == "create" for i in items),
                  "reuse": sum(i.action == "reuse" for i in items),
                  "update": sum(i.action == "update" for i in items),
                  "stale": sum(i.stale for i in items),
                  "with_problems": sum(bool(i.problems) for i in items)}
        return Summary(session_id=session_id, proposals=items, counts=counts, review=receipt)

    # ---- review ----

    @audited("review")
    async def review(self, principal: Principal, workspace: str, session_id: str,
                     req: ReviewRequest) -> ReviewOutcome:
        """Apply a reviewer's selection atomically and record the receipt in the same
        transaction; or record an explicit decline of all.

        One transaction under the workspace lock: new cards (origin ``workflow``, source = the
        session and its approved decision ids) are inserted, then updates applied (keeping the
        card's id, origin and source), then links resolved (between new cards of the review too),
        then one projection operation per written card and the receipt. An addition whose final
        content is identical to an existing card's reuses that card (no write). Operations are
        enqueued after commit. A repeated ``review_id`` returns the stored receipt
        (``replayed``) and writes nothing, whatever happened to the cards since.

        :raises InvalidInput: unknown or duplicate key, a link to a card not in this workspace
            or to an unselected proposal, an edit of the approved SQL, invalid edits, duplicate
            content; nothing selected without ``decline_all`` (the item is named).
        :raises StaleRevision: an update's card moved past (or was deleted after) the revision
            the proposal was drafted against (``item`` names it); nothing is written.
        :raises Conflict: the review id was used for another session or another request; the
            session was already reviewed under another review id.
        :raises NotFound: no proposals in the session. :raises Forbidden: principal.
        """
        principal.require(workspace, "memory.review")
        session_id = _clean_session(session_id)
        try:
            outcome, op_ids = await self._review(principal, workspace, session_id, req)
        except ArchiveError as exc:
            if exc.status < 500:
                await self._reject(principal, workspace, "review", session_id, exc)
            raise
        if op_ids:
            await self.queue.enqueue(workspace, op_ids)
        return outcome

    async def _review(self, principal: Principal, workspace: str, session_id: str,
                      req: ReviewRequest) -> tuple[ReviewOutcome, list[int]]:
        review_id = req.review_id.strip()
        if not review_id:
            raise InvalidInput("review_id must not be blank", field="review_id")
        reject_nul(review_id, "review_id")
        reject_nul(req.note, "note")
        if req.decline_all and req.selected:
            raise InvalidInput("decline_all declines every proposal: send no selection with it",
                               field="selected")
        if not req.decline_all and not req.selected:
            raise InvalidInput("select at least one proposal, or decline all with "
                               "decline_all: true", field="selected")
        seen: dict[str, int] = {}
        for i, sel in enumerate(req.selected):
            if sel.key in seen:
                raise InvalidInput(f"selected[{i}]: key {sel.key!r} is selected twice",
                                   field=f"selected[{i}].key", item=sel.key)
            seen[sel.key] = i
        digest = _digest(req)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await repository.workspace(conn, workspace)
            row = await (await conn.execute(Q.wf_receipt_get, {"review_id": review_id})).fetchone()
            if row is not None:
                if row["session_id"] != session_id:
                    raise Conflict(f"review id {review_id!r} was used for another session",
                                   field="review_id")
                if row["request_digest"] != digest:
                    raise Conflict(f"review id {review_id!r} was already used with a different "
                                   "request; a new review needs a new review id",
                                   field="review_id")
                return ReviewOutcome(receipt=_receipt_from_row(row), replayed=True), []
            other = await (await conn.execute(Q.wf_receipt_for_session,
                                              {"session_id": session_id})).fetchone()
            if other is not None:
                raise Conflict(f"session {session_id!r} was already reviewed (review "
                               f"{other['review_id']!r})", review_id=other["review_id"])
            stored = {s.key: s for s in await _load(conn, session_id)}
            if not stored:
                raise NotFound(f"no proposals in session {session_id!r}")
            for i, sel in enumerate(req.selected):
                if sel.key not in stored:
                    raise InvalidInput(f"selected[{i}]: no proposal {sel.key!r} in session "
                                       f"{session_id!r}", field=f"selected[{i}].key", item=sel.key)
            declined = [k for k in stored if k not in seen]
            now = datetime.now(timezone.utc)
            if req.decline_all:
                receipt = ReviewReceipt(review_id=review_id, session_id=session_id,
                                        outcome="declined", reviewed_by=principal.actor,
                                        reviewed_at=now, items=[], declined=declined,
                                        projection=[], note=req.note)
                return await self._store_receipt(conn, principal, workspace, receipt, digest), []
            items, op_ids, projection = await self._apply(conn, principal, workspace,
                                                          session_id, req, stored)
            receipt = ReviewReceipt(review_id=review_id, session_id=session_id, outcome="applied",
                                    reviewed_by=principal.actor, reviewed_at=now, items=items,
                                    declined=declined, projection=projection, note=req.note)
            return await self._store_receipt(conn, principal, workspace, receipt, digest), op_ids

    async def _store_receipt(self, conn: AsyncConnection, principal: Principal, workspace: str,
                             receipt: ReviewReceipt, digest: str) -> ReviewOutcome:
        result = msgspec.to_builtins(receipt)
        await conn.execute(Q.wf_receipt_insert, {
            "workspace": workspace, "review_id": receipt.review_id,
            "session_id": receipt.session_id, "outcome": receipt.outcome, "digest": digest,
            "result": Jsonb(result), "actor": principal.actor})
        await repository.record_activity(
            conn, workspace, actor=principal.actor, verb="review", outcome=receipt.outcome,
            detail={"session": receipt.session_id, "review": receipt.review_id,
                    "cards": [i.card_id for i in receipt.items][:100]})
        # exactly what a replay returns (the stored JSON, decoded)
        return ReviewOutcome(receipt=msgspec.convert(result, ReviewReceipt), replayed=False)

    async def _apply(self, conn: AsyncConnection, principal: Principal, workspace: str,
                     session_id: str, req: ReviewRequest, stored: dict[str, _Stored],
                     ) -> tuple[list[ReviewedItem], list[int], list[ProjectionEntry]]:
        selected = [(i, sel, stored[sel.key]) for i, sel in enumerate(req.selected)]
        cards = await repository.get_cards(
            conn, [s.card_id for _, _, s in selected if s.card_id is not None])
        # 1. validate every item against the current state before writing anything
        bodies: list[CardWrite] = []
        for i, sel, s in selected:
            where = f"selected[{i}]"
            card = None
            if s.kind == "update":
                card = cards.get(s.card_id)  # type: ignore[arg-type]
                cid = card_id_str(s.card_id)  # type: ignore[arg-type]
                if card is None:
                    raise StaleRevision(f"{where} (key {s.key!r}): card {cid} was deleted since "
                                        "the proposal was drafted", item=s.key, card_id=cid,
                                        current_revision=None, field=where)
                if card.revision != s.base_revision:
                    raise StaleRevision(f"{where} (key {s.key!r}): card {cid} is at revision "
                                        f"{card.revision}, the proposal was drafted against "
                                        f"revision {s.base_revision}", item=s.key, card_id=cid,
                                        current_revision=card.revision, field=where)
            body = _build(s.proposal, card, sel.edits, where)
            if s.kind == "update":
                body.revision = s.base_revision
            bodies.append(body)
        adds = [n for n, (_, _, s) in enumerate(selected) if s.kind == "addition"]
        reuse = dict(zip(adds, await _reuse_targets(conn, [bodies[n] for n in adds])))
        creates = [n for n in adds if reuse[n] is None]
        dup = _first_duplicate([bodies[n].family for n in creates],
                               await _normalised(conn, [bodies[n] for n in creates]))
        if dup is not None:
            first, second = creates[dup[0]], creates[dup[1]]
            i2, key2 = selected[second][0], selected[second][2].key
            raise InvalidInput(f"selected[{i2}] (key {key2!r}): same family and content as "
                               f"selected[{selected[first][0]}] (key {selected[first][2].key!r})",
                               field=f"selected[{i2}].content", item=key2)
        ids: dict[str, uuid.UUID] = {}
        for n, (_, _, s) in enumerate(selected):
            if s.kind == "update":
                ids[s.key] = s.card_id  # type: ignore[assignment]
            else:
                ids[s.key] = reuse[n] or uuid.uuid4()
        # links by key name selected proposals only; turn them into card ids (a reused card is
        # not written, so its proposal's links are checked like every other but not applied)
        for n, (i, _, s) in enumerate(selected):
            links: list[LinkIn] = []
            for j, link in enumerate(bodies[n].links):
                if parse_card_id(link.target) is not None:
                    links.append(link)
                elif link.target in ids:
                    links.append(LinkIn(target=card_id_str(ids[link.target]), meaning=link.meaning))
                elif link.target in stored:
                    raise InvalidInput(f"selected[{i}] (key {s.key!r}): links[{j}] names proposal "
                                       f"{link.target!r}, which is not selected in this review",
                                       field=f"selected[{i}].links[{j}].target", item=s.key)
                else:
                    raise InvalidInput(f"selected[{i}] (key {s.key!r}): links[{j}].target "
                                       f"{link.target!r} is neither a card id nor a proposal of "
                                       "this session", field=f"selected[{i}].links[{j}].target",
                                       item=s.key)
            bodies[n].links = links
        # 2. write: new cards first (no links yet), then updates and links, inside this transaction
        revisions: dict[str, int] = {}
        for n in creates:
            i, _, s = selected[n]
            source = Source(session_id=session_id, decision_ids=_approved(s.proposal.decisions))
            body = bodies[n]
            _, revisions[s.key] = await repository.insert_card(
                conn, workspace, body, origin="workflow", source=source, card_uuid=ids[s.key])
        for n, (i, _, s) in enumerate(selected):
            where = f"selected[{i}]"
            try:
                resolved = await repository.resolve_link_targets(conn, bodies[n].links,
                                                                 self_id=ids[s.key])
                if n in reuse and reuse[n] is not None:
                    continue
                if s.kind == "update":
                    revisions[s.key] = await repository.update_card(
                        conn, workspace, ids[s.key], bodies[n], resolved)
                elif resolved:
                    await repository.add_links(conn, workspace, ids[s.key], resolved)
            except ArchiveError as exc:
                raise _at(where, s.key, exc) from exc
        # 3. one projection operation per written card; activity; the receipt's items
        items: list[ReviewedItem] = []
        op_ids: list[int] = []
        projection: list[ProjectionEntry] = []
        for n, (i, _, s) in enumerate(selected):
            cid = ids[s.key]
            if s.key in revisions:
                op_id = await repository.insert_op(conn, workspace, cid, "upsert",
                                                   revisions[s.key])
                op_ids.append(op_id)
                projection.append(ProjectionEntry(card_id=card_id_str(cid),
                                                  revision=revisions[s.key], operation=op_id))
                verb = "update" if s.kind == "update" else "create"
                await repository.record_activity(
                    conn, workspace, actor=principal.actor, verb=verb, card_uuid=cid,
                    outcome="ok", detail={"session": session_id, "proposal": s.key,
                                          "revision": revisions[s.key]})
                action = "updated" if s.kind == "update" else "created"
                revision = revisions[s.key]
            else:
                action = "reused"
                revision = (await repository.get_card(conn, cid)).revision
            items.append(ReviewedItem(key=s.key, kind=s.kind, action=action,  # type: ignore[arg-type]
                                      card_id=card_id_str(cid), revision=revision,
                                      family=bodies[n].family, title=bodies[n].title))
        return items, op_ids, projection

    # ---- solved-index ----

    @audited("solved_index")
    async def solved_index(self, principal: Principal, workspace: str,
                           session_id: str) -> SolvedIndexResult:
        """Re-queue the projection recorded by the session's review receipt: every card the
        review wrote is projected again from its *current* state (open or failed operations are
        re-queued, else a new upsert is queued). A card deleted since is never recreated (an open
        point deletion of it is re-queued).

        :raises NotFound: the session has no review receipt. :raises Forbidden: principal.
        """
        principal.require(workspace, "memory.review")
        session_id = _clean_session(session_id)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await repository.workspace(conn, workspace)
            row = await (await conn.execute(Q.wf_receipt_for_session,
                                            {"session_id": session_id})).fetchone()
            if row is None:
                raise NotFound(f"session {session_id!r} has no review receipt")
            receipt = _receipt_from_row(row)
            results: list[SolvedIndexCard] = []
            all_ops: list[int] = []
            for entry in receipt.projection:
                cid = parse_card_id(entry.card_id)
                assert cid is not None
                cur = await conn.execute(Q.ops_reset_for_retry, {"card_id": cid})
                ops = [r["id"] for r in await cur.fetchall()]
                state = await repository.projection_state(conn, cid)
                if state is not None and not ops:
                    ops = [await repository.insert_op(conn, workspace, cid, "upsert",
                                                      state["revision"])]
                results.append(SolvedIndexCard(card_id=entry.card_id,
                                               status="requeued" if state else "deleted",
                                               operations=ops))
                all_ops += ops
            await repository.record_activity(
                conn, workspace, actor=principal.actor, verb="solved_index", outcome="ok",
                detail={"session": session_id, "review": receipt.review_id,
                        "operations": all_ops[:100]})
        enqueued = await self.queue.enqueue(workspace, all_ops)
        return SolvedIndexResult(session_id=session_id, review_id=receipt.review_id,
                                 cards=results, operations=all_ops, enqueued=enqueued)
