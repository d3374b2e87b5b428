"""The workflow's use cases (DESIGN §6): propose, summary, review and solved-index (Workflow).

Permissions, checked again here (the reviewer gate, issue 16): ``memory.propose`` to propose,
``memory.review`` to apply a review and to re-queue its projection, either one for the summary.

- :meth:`Workflow.propose` validates and stores a batch of proposals of one session: additions and
  updates, each with its source decisions, content, scope, rationale, dependencies and links (to
  existing cards by ``mem-`` id, or to other proposals of the session by their local key). A
  proposal needs an ``approved`` decision and reusable content. An addition that is the same card
  as an existing one (family, content up to whitespace, scope, concepts, dependencies: see
  :data:`~shared.workflow.rules.NORMALISATION`) is a *reuse* of that card; one whose content only
  matches loosely is an addition that shows the existing card as a ``possible_duplicate``.
- :meth:`Workflow.summary` shows each proposal, what it would create or change (a field diff for
  updates) and which are stale, computed against the archive's current state.
- :meth:`Workflow.review` applies a reviewer's selection (with edits) in one transaction under the
  workspace lock, and writes a **review receipt** in the same transaction. The review id is the
  idempotency key: a repeated delivery returns the stored receipt and writes nothing (so a card
  created by the review and deleted since is never recreated).
- :meth:`Workflow.solved_index` re-queues the projection recorded by a session's receipt.
- :meth:`Workflow.decide` records which cards the user decided (accepted or rejected) in a
  session, and :meth:`Workflow.decisions` lists them: recall in that session excludes them and
  never bridges through them (DESIGN §5, :func:`shared.recall.verified.recall`).

The rules are :mod:`shared.workflow.rules`, the wire format :mod:`shared.workflow.requests`; the
SQL is in :mod:`shared.store.sessions`. A rejected call is recorded by :func:`audited` alone.
This module imports no web framework; the writer's ``writer/routes/sessions.py`` only parses and calls it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

import msgspec

from shared.archive.activity import audited
from shared.archive.feedback import record_review_feedback
from shared.auth import Principal
from shared.errors import (ArchiveError, Conflict, InvalidInput, NotFound, StaleRevision,
                           SummaryChanged, SummaryVersionRequired)
from shared.models import Card, CardWrite, Source, card_id_str, clean_session_id, parse_card_id
from shared.metrics import Metrics
from shared.projection.queue import ProjectionQueue
from shared.store import activity, outbox, workspaces
from shared.store import cards as card_store
from shared.store import sessions as store
from shared.store.database import Connection, Database
from shared.workflow import rules
from shared.archive.responses import (DecisionRecord, ProjectionEntry, ProposalOutcome,
                                     ProposeResult, ReviewedItem, ReviewOutcome, ReviewReceipt,
                                     SessionDecisions, SessionList, SessionOverview, SolvedIndexCard, SolvedIndexResult, Summary,
                                     SummaryItem)
from shared.workflow.requests import (MAX_SESSION_DECISIONS, MAX_SESSION_PROPOSALS,
                                      DecideRequest, Decision, FieldChange, Proposal,
                                      ProposeRequest, ReviewRequest, ReviewSelection, digest)
from shared.workflow.rules import Addition, Draft, Update


@dataclass(frozen=True)
class _Stored:
    """A stored proposal: as sent (for its digest, decisions and rationale), and as a draft."""

    key: str
    family: str
    proposal: Proposal
    draft: Draft


async def _stored(conn: Connection, session_id: str) -> dict[str, _Stored]:
    """The session's proposals by key, in the order they were stored (erased ones left out:
    :func:`_erased`)."""
    return _as_stored(await store.session_proposals(conn, session_id))


def _as_stored(rows: Iterable[store.StoredProposal]) -> dict[str, _Stored]:
    """Proposal rows by key, as stored and as drafts (erased ones left out)."""
    stored: dict[str, _Stored] = {}
    for row in rows:
        if row.erased:
            continue
        proposal = msgspec.convert(row.proposal, Proposal)
        stored[row.key] = _Stored(key=row.key, family=row.family, proposal=proposal,
                                  draft=rules.draft(proposal, f"stored proposal {row.key!r}"))
    return stored


async def _erased(conn: Connection, session_id: str) -> list[store.StoredProposal]:
    """The session's proposals whose content was erased with the card they carried."""
    return [row for row in await store.session_proposals(conn, session_id) if row.erased]


def _erased_item(row: store.StoredProposal) -> SummaryItem:
    """The summary entry of an erased proposal: what is left of it (no content)."""
    shown = row.card_id or row.reuse_card_id
    return SummaryItem(
        key=row.key, kind=row.kind, family=row.family,
        action="update" if row.kind == "update" else "create",
        card_id=card_id_str(shown) if shown else None, base_revision=row.base_revision,
        current_revision=None, stale=False,
        decisions=msgspec.convert(row.proposal.get("decisions", []), list[Decision]),
        rationale="", card=None, changes={},
        problems=["erased: the card it carried was deleted, and its content with it"],
        erased=True)


async def _receipts(conn: Connection, session_id: str) -> list[ReviewReceipt]:
    """The session's review receipts, oldest first."""
    return [msgspec.convert(row.result, ReviewReceipt)
            for row in await store.session_receipts(conn, session_id)]


# ---- the summary's version (issue 25, case 6) ----

def _covering(seq: int, receipts: list[ReviewReceipt]) -> ReviewReceipt | None:
    """The review that covers the proposal stored as ``seq``: the first receipt whose summary
    version reaches it (a receipt without ``through`` covers the whole session). None: open."""
    return next((r for r in receipts if r.through is None or seq <= r.through), None)


def _version(rows: list[store.StoredProposal], receipts: list[ReviewReceipt],
             through: int) -> str:
    """The version of a summary that shows the proposals up to ``through``: ``<through>-<digest>``
    where the digest covers what a review of it relies on (those proposals' keys and erasure,
    and the reviews already made)."""
    shown = [[row.key, row.erased] for row in rows if row.seq <= through]
    text = msgspec.json.encode([shown, [r.review_id for r in receipts]])
    return f"{through}-{hashlib.sha256(text).hexdigest()[:16]}"


def _check_version(version: str, rows: list[store.StoredProposal],
                   receipts: list[ReviewReceipt]) -> int:
    """The last proposal (``seq``) a review made on summary ``version`` covers.

    :raises SummaryChanged: the session changed since that summary in a way that matters (a
        proposal it showed was reviewed or erased since), or ``version`` is not one.
    """
    head = version.partition("-")[0]
    if not (head.isdigit() and len(head) < 19 and _version(rows, receipts, int(head)) == version):
        raise SummaryChanged(f"the summary changed since version {version!r} was read (a "
                             "proposal it showed was reviewed or erased meanwhile): reload it "
                             "and review again", field="version")
    return int(head)


async def _matches(conn: Connection, bodies: list[CardWrite]) -> list[rules.Match]:
    """The reuse rule (:func:`rules.match`) for each body against the archive's cards: the
    candidates are the cards whose content matches loosely (found by the store)."""
    candidates = await store.loose_content_cards(conn, bodies)
    cards = await card_store.get_many(conn, sorted({c for ids in candidates for c in ids}))
    return [rules.match(body, [cards[c] for c in ids if c in cards])
            for body, ids in zip(bodies, candidates)]


async def _reuse(conn: Connection, additions: list[tuple[str, str, CardWrite]],
                 sent: int | None = None) -> list[rules.Match]:
    """The reuse rule over additions ``(where, key, body)``: the existing card each reuses (or
    None: it is created) and the possible duplicate shown for one that is created.

    :param sent: how many of ``additions`` (the first ones) the caller sent now; the others are
        stored already, and a duplicate names the one sent. All of them when None.
    :raises InvalidInput: two created additions are the same card (:func:`rules.identity`; the
        later one, or the one sent, is named).
    """
    bodies = [body for *_, body in additions]
    matches = await _matches(conn, bodies)
    created = [n for n, m in enumerate(matches) if m.reuse is None]
    dup = rules.first_duplicate([rules.identity(bodies[n]) for n in created])
    if dup is not None:
        first, second = created[dup[0]], created[dup[1]]
        if sent is not None and second >= sent:
            first, second = second, first
        raise rules.same_content(additions[first][:2], additions[second][:2])
    return matches


async def _batch_reuse(conn: Connection, drafts: list[Draft], bodies: list[CardWrite],
                       stored: dict[str, _Stored]) -> dict[str, rules.Match]:
    """The reuse rule at propose time, for the batch's additions by key: the batch's additions,
    then the stored ones it does not re-send, must not be the same card twice among those that
    are not reuses (a review could not create both).

    :raises InvalidInput: as :func:`_reuse`, naming the proposal of the batch.
    """
    additions = [(f"proposals[{i}]", d.key, body)
                 for i, (d, body) in enumerate(zip(drafts, bodies)) if isinstance(d, Addition)]
    sent = len(additions)
    batch_keys = {d.key for d in drafts}
    for s in stored.values():
        if isinstance(s.draft, Addition) and s.key not in batch_keys:
            where = f"stored proposal {s.key!r}"
            additions.append((where, s.key, rules.card_body(s.draft, None, None, where)))
    matches = await _reuse(conn, additions, sent)
    return dict(zip((key for _, key, _ in additions[:sent]), matches))


async def _edited_cards(conn: Connection, drafts: Iterable[Draft]) -> dict[uuid.UUID, Card]:
    """The cards the updates among ``drafts`` edit, as they are now (a deleted one is absent)."""
    return await card_store.get_many(
        conn, [c for d in drafts if (c := rules.edited_card(d)) is not None])


@dataclass
class _Scope:
    """What a review covers: the open proposals up to the summary version it was made on
    (``stored``; ``erased`` ones apart), the last one's ``seq`` (``through``), the open ones
    stored after it (``later``: they stay open), and those reviewed before (``reviewed``)."""

    stored: dict[str, _Stored]
    erased: dict[str, store.StoredProposal]
    through: int
    later: list[str]
    reviewed: set[str]

    def why_not(self, key: str, session_id: str) -> str:
        """Why ``key`` cannot be selected in this review."""
        if key in self.later:
            return (f"proposal {key!r} arrived after the summary this review was made on; "
                    "reload the summary to review it")
        if key in self.reviewed:
            return f"proposal {key!r} was reviewed already"
        return f"no proposal {key!r} in session {session_id!r}"


async def _reviewable(conn: Connection, session_id: str, version: str | None,
                      named: set[str] | None = None) -> _Scope:
    """The proposals a review made on summary ``version`` covers. Without a version, the
    summary it must have been made on is inferred from what it ``named`` (issue 36): a summary
    shows the proposals in the order they were stored, so one that showed the newest proposal
    the review names showed every proposal before it; proposals stored after that one may never
    have been seen and stay open. (Nothing named, or only unknown keys: every open proposal;
    the selection is refused anyway, and a ``decline_all`` without a version is refused
    earlier.)

    :raises NotFound: no proposals in the session. :raises Conflict: no proposal is open (the
        session was reviewed). :raises SummaryChanged: :func:`_check_version`.
    """
    rows = await store.session_proposals(conn, session_id)
    if not rows:
        raise NotFound(f"no proposals in session {session_id!r}")
    receipts = await _receipts(conn, session_id)
    open_rows = [row for row in rows if _covering(row.seq, receipts) is None]
    if not open_rows:
        raise Conflict(f"session {session_id!r} was already reviewed (review "
                       f"{receipts[-1].review_id!r})", review_id=receipts[-1].review_id)
    through = max(row.seq for row in rows)
    if version is not None:
        through = _check_version(version, rows, receipts)
    elif named:
        through = max((row.seq for row in open_rows if row.key in named), default=through)
    seen = [row for row in open_rows if row.seq <= through]
    return _Scope(stored=_as_stored(seen), erased={row.key: row for row in seen if row.erased},
                  through=through, later=[row.key for row in open_rows if row.seq > through],
                  reviewed={row.key for row in rows} - {row.key for row in open_rows})


class Workflow:
    """Proposals, summary, review and solved-index over one database and projection queue."""

    def __init__(self, db: Database, queue: ProjectionQueue,
                 metrics: Metrics | None = None) -> None:
        self.db = db
        self.queue = queue
        #: counts a review's implicit feedback (``memarc_recall_feedback_total``, via review)
        self.metrics = metrics

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
        :raises Forbidden: the token lacks ``memory.propose``. :raises NotFound: principal.
        """
        principal.require(workspace, "memory.propose")
        session_id = clean_session_id(session_id)
        drafts = rules.check_batch(req.proposals)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            receipts = await store.session_receipts(conn, session_id)
            if receipts:
                raise Conflict(f"session {session_id!r} was already reviewed (review "
                               f"{receipts[-1].review_id!r}); start a new session",
                               review_id=receipts[-1].review_id)
            stored = await _stored(conn, session_id)
            erased = {row.key for row in await _erased(conn, session_id)}
            for i, d in enumerate(drafts):
                if d.key in erased:
                    raise Conflict(f"proposals[{i}] (key {d.key!r}): the proposal stored under "
                                   "that key was erased with the card it carried (deleted); "
                                   "use another key", field=f"proposals[{i}].key", item=d.key)
            cards = await _edited_cards(conn, drafts)
            bodies = [rules.proposal_body(d, cards, f"proposals[{i}]")
                      for i, d in enumerate(drafts)]
            existing = await card_store.existing_ids(conn, rules.card_targets(bodies))
            session = dict.fromkeys([*stored, *(d.key for d in drafts)])
            for i, (d, body) in enumerate(zip(drafts, bodies)):
                rules.check_links(body.links, f"proposals[{i}]", key=d.key,
                                  card_id=rules.edited_card(d), written=session, session=session,
                                  cards=existing)
            reuse = await _batch_reuse(conn, drafts, bodies, stored)
            outcomes: list[ProposalOutcome] = []
            new_keys: list[str] = []
            for i, (p, d, body) in enumerate(zip(req.proposals, drafts, bodies)):
                request_digest = digest(p)
                match = reuse.get(d.key, rules.Match())
                card_uuid, reuse_id = rules.edited_card(d), match.reuse
                prior = stored.get(d.key)
                state: Literal["new", "unchanged"] = "new"
                if prior is not None:
                    if digest(prior.proposal) != request_digest:
                        raise Conflict(f"proposals[{i}] (key {d.key!r}): this session already "
                                       "holds another proposal under that key",
                                       field=f"proposals[{i}].key", item=d.key)
                    state = "unchanged"
                else:
                    await store.insert_proposal(
                        conn, workspace, session_id, key=d.key, kind=d.kind, family=body.family,
                        card_id=card_uuid, base_revision=_base_revision(d),
                        reuse_card_id=reuse_id, proposal=msgspec.to_builtins(p),
                        digest=request_digest, actor=principal.actor)
                    new_keys.append(d.key)
                shown = card_uuid or reuse_id
                stale = card_uuid is not None and rules.stale_reason(d, cards[card_uuid])
                outcomes.append(ProposalOutcome(
                    key=d.key, kind=d.kind, family=body.family, action=rules.action(d, reuse_id),
                    card_id=card_id_str(shown) if shown else None,
                    base_revision=_base_revision(d), stale=bool(stale), stored=state,
                    possible_duplicate=match.possible))
            total = await store.count_proposals(conn, session_id)
            if total > MAX_SESSION_PROPOSALS:
                raise Conflict(f"a session holds at most {MAX_SESSION_PROPOSALS} proposals",
                               field="proposals")
            if new_keys:
                await activity.record(
                    conn, workspace, actor=principal.actor, verb="propose", outcome="ok",
                    detail={"session": session_id, "proposals": new_keys[:100],
                            "count": len(new_keys)})
        return ProposeResult(session_id=session_id, proposals=outcomes, session_total=total)

    # ---- the sessions to review ----

    async def sessions(self, principal: Principal, workspace: str, status: str = "open",
                       limit: int = 100) -> SessionList:
        """The workspace's sessions with proposals, latest proposal first: ``open`` (not yet
        reviewed, the default), ``reviewed`` or ``all``; at most ``limit`` (1..500).

        :raises InvalidInput: another ``status`` or ``limit``.
        :raises Forbidden: the token holds neither ``memory.propose`` nor ``memory.review``.
        :raises NotFound: principal of another workspace.
        """
        principal.require(workspace, "memory.propose", "memory.review")
        if status not in ("open", "reviewed", "all"):
            raise InvalidInput("status is one of open, reviewed, all", field="status")
        if not 1 <= limit <= 500:
            raise InvalidInput("limit is 1..500", field="limit")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            rows = await store.list_sessions(conn, status, limit)
        return SessionList(status=status, limit=limit,  # type: ignore[arg-type]
                           sessions=[msgspec.convert({**r, "reviewed": r["review_id"] is not None},
                                                     SessionOverview) for r in rows])

    # ---- summary ----

    async def summary(self, principal: Principal, workspace: str, session_id: str) -> Summary:
        """The session's proposals as one reviewable document, against the current archive:
        what each would create, reuse or change (field diff), which are stale, and the review
        receipt once the session was reviewed.

        :raises NotFound: no proposals in this session (or principal of another workspace).
        :raises Forbidden: the token holds neither ``memory.propose`` nor ``memory.review``.
        """
        principal.require(workspace, "memory.propose", "memory.review")
        session_id = clean_session_id(session_id)
        async with self.db.transaction(workspace, read_only=True, lock="shared") as conn:
            await workspaces.get(conn, workspace)
            rows = await store.session_proposals(conn, session_id)
            receipts = await _receipts(conn, session_id)
            if not rows:
                raise NotFound(f"no proposals in session {session_id!r}")
            stored = _as_stored(rows)
            erased = [row for row in rows if row.erased]
            covering = {row.key: _covering(row.seq, receipts) for row in rows}
            cards = await _edited_cards(conn, (s.draft for s in stored.values()))
            items: list[SummaryItem] = []
            bodies: list[CardWrite | None] = []
            for s in stored.values():
                body, item = _summary_item(s, cards)
                items.append(item)
                bodies.append(body)
            existing = await card_store.existing_ids(
                conn, rules.card_targets(b for b in bodies if b is not None))
            session = dict.fromkeys(stored)
            for item, s, body in zip(items, stored.values(), bodies):
                if body is not None:
                    item.problems += [problem for _, problem in rules.link_problems(
                        body.links, key=s.key, card_id=rules.edited_card(s.draft),
                        written=session, session=session, cards=existing)]
            # open additions: what the archive holds like them now (reviewed ones show their
            # receipt instead: their own new cards would read as reuses)
            additions = [(item, s.draft, body)
                         for item, s, body in zip(items, stored.values(), bodies)
                         if isinstance(s.draft, Addition) and body is not None
                         and covering[s.key] is None]
            matches = await _matches(conn, [body for *_, body in additions])
            for (item, d, _), m in zip(additions, matches):
                item.action = rules.action(d, m.reuse)
                item.card_id = card_id_str(m.reuse) if m.reuse else None
                item.possible_duplicate = m.possible
            items += [_erased_item(row) for row in erased]
            for item in items:
                if (receipt := covering[item.key]) is not None:
                    _show_review(item, receipt)
            version = _version(rows, receipts, max(row.seq for row in rows))
        counts = {"total": len(items),
                  "create": sum(i.action == "create" for i in items),
                  "reuse": sum(i.action == "reuse" for i in items),
                  "update": sum(i.action == "update" for i in items),
                  "stale": sum(i.stale for i in items),
                  "possible_duplicates": sum(i.possible_duplicate is not None for i in items),
                  "with_problems": sum(bool(i.problems) for i in items),
                  "erased": sum(i.erased for i in items),
                  "open": sum(i.reviewed is None for i in items)}
        return Summary(session_id=session_id, proposals=items, counts=counts,
                       review=receipts[-1] if receipts else None, version=version,
                       reviews=receipts)

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
        body (with the edits) is the same card as an existing one reuses that card (no write);
        ``as_update_of`` applies an addition to an existing card as an update. Operations are
        enqueued after commit. A repeated ``review_id`` returns the stored receipt
        (``replayed``) and writes nothing, whatever happened to the cards since.

        ``req.version`` binds the review to the summary it was made on (issue 25): the proposals
        stored after that version are neither applied nor declined (the receipt lists them as
        ``open``) and a later review of the session covers them. Without it (issue 36), the
        review covers the proposals up to the newest one it selects (every summary that showed
        that one showed those); the ones stored after it stay open, never declined; and a
        ``decline_all``, which names none, needs the version.

        :raises InvalidInput: unknown or duplicate key, a link to a card not in this workspace
            or to an unselected proposal, an edit of the approved SQL, invalid edits, the same
            card twice; ``as_update_of`` on an update, or naming a card that is not in this
            workspace or of another family; nothing selected without ``decline_all`` (the item
            is named).
        :raises StaleRevision: an update's card (or an ``as_update_of`` card) moved past (or was
            deleted after) the revision it was drafted against (``item`` names it); nothing is
            written.
        :raises Conflict: the review id was used for another session or another request; the
            session was already reviewed under another review id (no proposal is open).
        :raises SummaryChanged: the summary changed since ``req.version`` in a way that matters
            (a proposal it showed was reviewed or erased since): reload it; nothing written.
        :raises SummaryVersionRequired: ``decline_all`` without ``version`` (428).
        :raises NotFound: no proposals in the session. :raises Forbidden: the token lacks
            ``memory.review`` (a token that only proposes cannot apply its proposals).
        """
        principal.require(workspace, "memory.review")
        session_id = clean_session_id(session_id)
        review_id = rules.check_review(req)
        request_digest = digest(req)
        op_ids: list[int] = []
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            row = await store.receipt(conn, review_id)
            if row is not None:
                if row.session_id != session_id:
                    raise Conflict(f"review id {review_id!r} was used for another session",
                                   field="review_id")
                if row.request_digest != request_digest:
                    raise Conflict(f"review id {review_id!r} was already used with a different "
                                   "request; a new review needs a new review id",
                                   field="review_id")
                return ReviewOutcome(receipt=msgspec.convert(row.result, ReviewReceipt),
                                     replayed=True)
            scope = await _reviewable(conn, session_id, req.version,
                                      None if req.version is not None
                                      else {sel.key for sel in req.selected})
            if req.version is None and req.decline_all:
                raise SummaryVersionRequired(
                    "decline_all declines every proposal of the summary it was made on: name "
                    "that summary's version (GET …/sessions/{id}/summary answers it), so that a "
                    "proposal stored after it is not declined unseen", field="version")
            stored, erased = scope.stored, scope.erased
            for i, sel in enumerate(req.selected):
                if sel.key in erased:  # its card was deleted since: stale, like any such update
                    gone = erased[sel.key].card_id or erased[sel.key].reuse_card_id
                    raise StaleRevision(
                        f"selected[{i}] (key {sel.key!r}): the card it carried was deleted, and "
                        "the proposal's content erased with it", item=sel.key,
                        card_id=card_id_str(gone) if gone else None, current_revision=None,
                        field=f"selected[{i}].key")
                if sel.key not in stored:
                    raise InvalidInput(f"selected[{i}]: {scope.why_not(sel.key, session_id)}",
                                       field=f"selected[{i}].key", item=sel.key)
            selected = {sel.key for sel in req.selected}
            receipt = ReviewReceipt(
                review_id=review_id, session_id=session_id,
                outcome="declined" if req.decline_all else "applied",
                reviewed_by=principal.actor, reviewed_at=datetime.now(timezone.utc), items=[],
                declined=[k for k in stored if k not in selected], projection=[], note=req.note,
                through=scope.through, open=scope.later)
            implicit = 0
            if not req.decline_all:
                receipt.items, op_ids, receipt.projection, cited = await self._apply(
                    conn, principal, workspace, session_id, req.selected, stored)
                implicit = await record_review_feedback(conn, principal, workspace, session_id,
                                                        review_id, cited)
            outcome = await _store_receipt(conn, principal, workspace, receipt, request_digest)
        if op_ids:
            await self.queue.enqueue(workspace, op_ids)
        if self.metrics is not None:
            self.metrics.observe_feedback(workspace, "helpful", "review", "created", implicit)
        return outcome

    async def _apply(self, conn: Connection, principal: Principal, workspace: str,
                     session_id: str, selection: list[ReviewSelection],
                     stored: dict[str, _Stored],
                     ) -> tuple[list[ReviewedItem], list[int], list[ProjectionEntry],
                                set[uuid.UUID]]:
        """Write the selected proposals (see :meth:`review`): the receipt's items, the
        projection operations and entries, and the existing cards the applied proposals link
        to (the sources they cite, which the review's implicit feedback marks helpful)."""
        selected: list[tuple[str, Draft, ReviewSelection]] = []
        for i, sel in enumerate(selection):
            where, s = f"selected[{i}]", stored[sel.key]
            if sel.as_update_of is None:
                selected.append((where, s.draft, sel))
            else:  # the reviewer applies an addition to an existing card
                selected.append((where, rules.as_update(s.proposal, s.draft, sel.as_update_of,
                                                        where), sel))
        cards = await _edited_cards(conn, (d for _, d, _ in selected))
        # 1. validate every item against the current state before writing anything
        bodies: list[CardWrite] = []
        for where, d, sel in selected:
            card = cards.get(d.card_id) if isinstance(d, Update) else None
            if isinstance(d, Update) and sel.as_update_of is not None:
                card = rules.target_card(d, cards, where, "as_update_of.card_id")
            if isinstance(d, Update) and (reason := rules.stale_reason(d, card)) is not None:
                raise StaleRevision(f"{where} (key {d.key!r}): {reason}", item=d.key,
                                    card_id=card_id_str(d.card_id),
                                    current_revision=card.revision if card else None, field=where)
            body = rules.card_body(d, card, sel.edits, where)
            body.revision = _base_revision(d)
            bodies.append(body)
        adds = [n for n, (_, d, _) in enumerate(selected) if isinstance(d, Addition)]
        matches = await _reuse(conn, [(selected[n][0], selected[n][1].key, bodies[n])
                                      for n in adds])
        reuse = {n: m.reuse for n, m in zip(adds, matches)}
        ids = {d.key: rules.edited_card(d) or reuse.get(n) or uuid.uuid4()
               for n, (_, d, _) in enumerate(selected)}
        # links by key name selected proposals only; they become card ids (a reused card gets
        # the approved links it lacks, as a new revision: _link_reused)
        existing = await card_store.existing_ids(conn, rules.card_targets(bodies))
        for (where, d, _), body in zip(selected, bodies):
            rules.check_links(body.links, where, key=d.key, card_id=ids[d.key], written=ids,
                              session=stored, cards=existing)
        links = [rules.resolve_links(body.links, ids) for body in bodies]
        cited = _cited(selected) - set(ids.values())
        # 2. write: new cards first (no links yet), then updates and links, inside this transaction
        revisions: dict[str, int] = {}
        linked: dict[str, tuple[list[str], list[str]]] = {}
        creates = [n for n in adds if reuse[n] is None]
        for n in creates:
            d = selected[n][1]
            source = Source(session_id=session_id, decision_ids=d.decision_ids)
            _, revisions[d.key] = await card_store.insert(
                conn, workspace, bodies[n], origin="workflow", source=source, card_uuid=ids[d.key])
        for n, (where, d, _) in enumerate(selected):
            try:
                if isinstance(d, Update):
                    revisions[d.key] = await card_store.update(
                        conn, workspace, ids[d.key], bodies[n], links[n])
                elif reuse[n] is None and links[n]:
                    await card_store.add_links(conn, workspace, ids[d.key], links[n])
                elif links[n]:
                    revision, added, skipped = await _link_reused(conn, workspace, ids[d.key],
                                                                  links[n])
                    linked[d.key] = (added, skipped)
                    if revision is not None:
                        revisions[d.key] = revision
            except ArchiveError as exc:
                raise rules.at_item(where, d.key, exc) from exc
        # 3. one projection operation per written card; activity; the receipt's items
        items: list[ReviewedItem] = []
        op_ids: list[int] = []
        projection: list[ProjectionEntry] = []
        for n, (_, d, _) in enumerate(selected):
            cid = ids[d.key]
            action = rules.action(d, reuse.get(n))
            if d.key in revisions:
                revision = revisions[d.key]
                op_id = await outbox.insert_upsert_coalesced(conn, workspace, cid, revision)
                op_ids.append(op_id)
                projection.append(ProjectionEntry(card_id=card_id_str(cid), revision=revision,
                                                  operation=op_id))
                await activity.record(
                    conn, workspace, actor=principal.actor, verb=action, card_uuid=cid,
                    outcome="ok", detail={"session": session_id, "proposal": d.key,
                                          "revision": revision})
            else:
                revision = (await card_store.get(conn, cid)).revision
            added, skipped = linked.get(d.key, ([], []))
            items.append(ReviewedItem(key=d.key, kind=stored[d.key].draft.kind,
                                      action=rules.DONE[action],
                                      card_id=card_id_str(cid), revision=revision,
                                      family=bodies[n].family, title=bodies[n].title,
                                      links_added=added, links_not_written=skipped))
        return items, op_ids, projection, cited

    # ---- solved-index ----

    @audited("solved_index")
    async def solved_index(self, principal: Principal, workspace: str,
                           session_id: str) -> SolvedIndexResult:
        """Re-queue the projection recorded by the session's review receipt: every card the
        review wrote is projected again from its *current* state (open or failed operations are
        re-queued, else a new upsert is queued). A card deleted since is never recreated (an open
        point deletion of it is re-queued).

        :raises NotFound: the session has no review receipt. :raises Forbidden: the token lacks
            ``memory.review``.
        """
        principal.require(workspace, "memory.review")
        session_id = clean_session_id(session_id)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            receipts = await _receipts(conn, session_id)
            if not receipts:
                raise NotFound(f"session {session_id!r} has no review receipt")
            receipt = receipts[-1]
            results: list[SolvedIndexCard] = []
            all_ops: list[int] = []
            for entry in (e for r in receipts for e in r.projection):
                cid = parse_card_id(entry.card_id)
                assert cid is not None
                ops, exists = await outbox.requeue(conn, workspace, cid)
                results.append(SolvedIndexCard(card_id=entry.card_id,
                                               status="requeued" if exists else "deleted",
                                               operations=ops))
                all_ops += ops
            await activity.record(
                conn, workspace, actor=principal.actor, verb="solved_index", outcome="ok",
                detail={"session": session_id, "review": receipt.review_id,
                        "operations": all_ops[:100]})
        enqueued = await self.queue.enqueue(workspace, all_ops)
        return SolvedIndexResult(session_id=session_id, review_id=receipt.review_id,
                                 cards=results, operations=all_ops, enqueued=enqueued)

    # ---- the cards decided in a session ----

    @audited("decide")
    async def decide(self, principal: Principal, workspace: str, session_id: str,
                     req: DecideRequest) -> SessionDecisions:
        """Record the user's decisions (``accepted`` or ``rejected``) on cards of the workspace
        in ``session_id``; a card decided before takes the new decision (``stored: changed``),
        the same decision again changes nothing (``unchanged``: its first author and time stay).
        Recall with ``session`` excludes every card decided in the session (DESIGN §5).

        All or nothing: one transaction under the workspace lock; each decision that changed
        something writes an activity record ``decide`` naming its card (``card_id``), with the
        session and the decision as detail (``{session, decision}``).

        :raises InvalidInput: a card id that is not one, a card named twice, a card that is not
            a card of this workspace (``field`` names the item); nothing is written.
        :raises Conflict: the session would hold more than 500 decided cards.
        :raises Forbidden: the token lacks ``memory.propose``. :raises NotFound: principal.
        """
        principal.require(workspace, "memory.propose")
        session_id = clean_session_id(session_id)
        wanted = rules.check_decisions(req)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            existing = await card_store.existing_ids(conn, [cid for cid, _ in wanted])
            for i, (cid, _) in enumerate(wanted):
                if cid not in existing:
                    raise InvalidInput(f"decisions[{i}].card_id: {card_id_str(cid)} is not a card "
                                       "in this workspace", field=f"decisions[{i}].card_id",
                                       card_id=card_id_str(cid))
            before = {d.card_id: d for d in await store.session_decisions(conn, session_id)}
            if len(before.keys() | {cid for cid, _ in wanted}) > MAX_SESSION_DECISIONS:
                raise Conflict(f"a session holds at most {MAX_SESSION_DECISIONS} decided cards",
                               field="decisions")
            changes = [(cid, d) for cid, d in wanted
                       if cid not in before or before[cid].decision != d]
            await store.record_decisions(conn, workspace, session_id, changes, principal.actor)
            rows = await store.session_decisions(conn, session_id)
            for cid, d in changes:  # one record per card, so the card's activity lists it
                await activity.record(
                    conn, workspace, actor=principal.actor, verb="decide", outcome="ok",
                    card_uuid=cid, detail={"session": session_id, "decision": d})
        after = {d.card_id: d for d in rows}
        records = []
        for cid, _ in wanted:
            record = _decision_record(after[cid])
            record.stored = ("new" if cid not in before else "unchanged"
                             if before[cid].decision == record.decision else "changed")
            records.append(record)
        return SessionDecisions(session_id=session_id, decisions=records,
                                counts=_decision_counts(rows))

    async def decisions(self, principal: Principal, workspace: str,
                        session_id: str) -> SessionDecisions:
        """The cards decided in the session, in the order they were decided, with the counts.

        :raises NotFound: no card was decided in this session (or principal of another
            workspace). :raises Forbidden: the token holds neither ``memory.propose`` nor
            ``memory.review``.
        """
        principal.require(workspace, "memory.propose", "memory.review")
        session_id = clean_session_id(session_id)
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            rows = await store.session_decisions(conn, session_id)
        if not rows:
            raise NotFound(f"no decisions in session {session_id!r}")
        return SessionDecisions(session_id=session_id,
                                decisions=[_decision_record(d) for d in rows],
                                counts=_decision_counts(rows))


def _cited(selected: list[tuple[str, Draft, ReviewSelection]]) -> set[uuid.UUID]:
    """The cards the selected proposals cite: the card ids among the links each proposal gives
    (the reviewer's edited links when given), not the links an update keeps from its card."""
    cited: set[uuid.UUID] = set()
    for _, d, sel in selected:
        given = sel.edits.links if sel.edits is not None and sel.edits.links is not None \
            else d.links
        cited.update(t for link in given or [] if (t := parse_card_id(link.target)) is not None)
    return cited


async def _link_reused(conn: Connection, workspace: str, card_uuid: uuid.UUID,
                       links: list[tuple[uuid.UUID, str]]) -> tuple[int | None, list[str], list[str]]:
    """Write the approved ``links`` (resolved) of an addition that reuses ``card_uuid`` onto that
    card, as a new revision of it (its other fields unchanged; the caller queues its projection
    and records the activity): the links it lacks are added; one to a target it already links to
    with another meaning is not written (a card links to a target once).

    :returns: ``(new revision or None when nothing was added, targets added, links not written
        with the reason)``.
    """
    card = await card_store.get(conn, card_uuid)
    have = {parse_card_id(link.target): link.meaning for link in card.links}
    added: list[tuple[uuid.UUID, str]] = []
    skipped: list[str] = []
    for target, meaning in links:
        if target not in have:
            added.append((target, meaning))
            have[target] = meaning
        elif have[target] != meaning:
            skipped.append(f"{card_id_str(target)} ({meaning}): the card already links to it "
                           f"as {have[target]!r}")
    if not added:
        return None, [], skipped
    body = CardWrite(family=card.family, title=card.title, content=card.content,
                     scope=card.scope, concepts=card.concepts, dependencies=card.dependencies,
                     revision=card.revision)
    current = [(parse_card_id(link.target), link.meaning) for link in card.links]
    revision = await card_store.update(conn, workspace, card_uuid, body,
                                       [(t, m) for t, m in current if t is not None] + added)
    return revision, [card_id_str(t) for t, _ in added], skipped


def _decision_record(row: store.StoredDecision) -> DecisionRecord:
    return DecisionRecord(card_id=card_id_str(row.card_id), decision=row.decision,  # type: ignore[arg-type]
                          decided_by=row.decided_by, decided_at=row.decided_at)


def _decision_counts(rows: list[store.StoredDecision]) -> dict[str, int]:
    return {"total": len(rows), "accepted": sum(d.decision == "accepted" for d in rows),
            "rejected": sum(d.decision == "rejected" for d in rows)}


def _base_revision(d: Draft) -> int | None:
    """The revision an update was drafted against (None for an addition)."""
    return d.revision if isinstance(d, Update) else None


def _summary_item(s: _Stored, cards: dict[uuid.UUID, Card],
                  ) -> tuple[CardWrite | None, SummaryItem]:
    """One proposal against the current cards: the body it would write (None when it cannot be
    built) and its summary entry, before link problems and reuse."""
    d = s.draft
    card = cards.get(d.card_id) if isinstance(d, Update) else None
    problems: list[str] = []
    body: CardWrite | None = None
    changes: dict[str, FieldChange] = {}
    if card is not None or isinstance(d, Addition):
        try:
            body = rules.card_body(d, card, None, "proposal")
        except InvalidInput as exc:  # e.g. the card changed under an update
            problems.append(exc.message)
    stale = rules.stale_reason(d, card)
    if stale is not None:
        problems.append(f"stale: {stale}")
    if card is not None and body is not None:
        changes = rules.changes(card, body)
    return body, SummaryItem(
        key=s.key, kind=d.kind, family=s.family, action=rules.action(d, None),
        card_id=card_id_str(d.card_id) if isinstance(d, Update) else None,
        base_revision=_base_revision(d),
        current_revision=card.revision if card is not None else None,
        stale=stale is not None, decisions=s.proposal.decisions, rationale=s.proposal.rationale,
        card=rules.preview(body) if body is not None else None, changes=changes,
        problems=problems)


def _show_review(item: SummaryItem, receipt: ReviewReceipt) -> None:
    """A reviewed proposal is closed: it shows what the review that covers it did (the receipt),
    not what a review would do now (its own new cards would read as reuses)."""
    done = {i.key: i for i in receipt.items}
    todo: dict[str, rules.Action] = {past: action for action, past in rules.DONE.items()}
    r = done.get(item.key)
    item.reviewed = r.action if r is not None else "declined"
    if r is not None:
        item.action = todo[r.action]
        item.card_id = r.card_id
    item.stale = False
    item.problems = ["erased: the card it carried was deleted, and its content with it"] \
        if item.erased else []


async def _store_receipt(conn: Connection, principal: Principal, workspace: str,
                         receipt: ReviewReceipt, request_digest: str) -> ReviewOutcome:
    result = msgspec.to_builtins(receipt)
    await store.insert_receipt(conn, workspace, review_id=receipt.review_id,
                               session_id=receipt.session_id, outcome=receipt.outcome,
                               digest=request_digest, result=result, actor=principal.actor)
    await activity.record(
        conn, workspace, actor=principal.actor, verb="review", outcome=receipt.outcome,
        detail={"session": receipt.session_id, "review": receipt.review_id,
                "cards": [i.card_id for i in receipt.items][:100]})
    # exactly what a replay returns (the stored JSON, decoded)
    return ReviewOutcome(receipt=msgspec.convert(result, ReviewReceipt), replayed=False)
