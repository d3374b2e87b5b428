"""Feedback on recalls (issue 35 part 2, migration 027, docs/usage.md): which of the cards a
recall returned helped, which did not apply, which are wrong.

A principal that may recall (``memory.read``) judges the cards of its own recalls, and a
curator (``memory.manage``) those of any recall of the workspace, by the recall's
``recall_id`` (:meth:`Feedback.give`: the HTTP route, the MCP tool ``feedback``, the
explorer's recall page, the administration's recall page). Only the cards that recall returned
may be judged; a recall of another workspace is not found, as a missing one is (no existence
oracle); each principal has one verdict per recall and card, which it may change by sending
another. A review that applies a session's proposals records ``helpful`` from the reviewer for
the existing cards the applied proposals link to, on the session's newest recall that returned
each (:func:`record_review_feedback`, called inside the review's transaction).

The records of recalls are read here too: a page of them (:meth:`Feedback.recalls`), one with
its results and their verdicts (:meth:`Feedback.recall`), and a card's feedback
(:meth:`Feedback.card`). Those need ``memory.manage``: a record names the principal that
asked and holds its question. The explorer reads them with ``memory.read`` as the reader role:
a person's own records only (``actor``), and a card's feedback on its card page.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any, Literal

import msgspec
from shared.archive.activity import audited
from shared.archive.responses import (CardFeedback, CardFeedbackEntry, FeedbackEntry,
                                      FeedbackResult, RecallRecordDetail, RecallRecordPage,
                                      RecallRecordSummary, RecalledCard)
from shared.auth import Principal
from shared.errors import InvalidInput, NotFound
from shared.metrics import Metrics
from shared.models import (MAX_FEEDBACK_NOTE, FeedbackRequest, FeedbackVia, card_id_str,
                           parse_card_id, reject_nul)
from shared.privacy import PrivacyFilter
from shared.store import activity, feedback as store, workspaces
from shared.store.cards import get_many
from shared.store.database import Connection, Database

#: the newest verdicts a card's feedback shows
CARD_RECENT = 20


def _recall_uuid(recall_id: str) -> uuid.UUID:
    """The UUID of a recall id.

    :raises NotFound: not a UUID (no recall has that id; answered as for a missing one)."""
    try:
        return uuid.UUID(recall_id.strip())
    except (ValueError, AttributeError):
        raise NotFound(f"no recall {recall_id!r} in this workspace") from None


def _entry(row: dict[str, Any], change: str | None = None) -> FeedbackEntry:
    return FeedbackEntry(card_id=card_id_str(row["card_id"]), actor=row["actor"],
                         verdict=row["verdict"], note=row["note"], via=row["via"],
                         review_id=row["review_id"], created_at=row["created_at"],
                         updated_at=row["updated_at"], change=change)  # type: ignore[arg-type]


class Feedback:
    """Feedback on recalls, and the records of recalls, over ``db``; notes go through
    ``privacy``; verdicts are counted in ``metrics`` (``memarc_recall_feedback_total``)."""

    def __init__(self, db: Database, privacy: PrivacyFilter, metrics: Metrics) -> None:
        self.db, self.privacy, self.metrics = db, privacy, metrics

    def _verdicts(self, req: FeedbackRequest) -> list[tuple[uuid.UUID, str, str | None]]:
        """The request's ``(card, verdict, note)``: ids parsed, notes trimmed (empty: none) and
        through the privacy filter.

        :raises InvalidInput: a card id that is not one, a card named twice, a NUL in a note.
        :raises PrivacyFilterFailed: the filter refused a note (nothing is stored).
        """
        seen: set[uuid.UUID] = set()
        out = []
        for i, item in enumerate(req.cards):
            card = parse_card_id(item.card_id)
            if card is None:
                raise InvalidInput(f"cards[{i}].card_id: {item.card_id!r} is not a card id "
                                   "(mem-<uuid>)", field=f"cards[{i}].card_id")
            if card in seen:
                raise InvalidInput(f"cards[{i}]: {card_id_str(card)} is named twice; give one "
                                   "verdict per card", field=f"cards[{i}].card_id")
            seen.add(card)
            reject_nul(item.note, f"cards[{i}].note")
            note = (item.note or "").strip()
            # a redaction marker may be longer than what it replaced: the stored note is cut to
            # the bound, as a recall record's query is
            out.append((card, item.verdict,
                        self.privacy.redact(note)[:MAX_FEEDBACK_NOTE] if note else None))
        return out

    @audited("feedback")
    async def give(self, principal: Principal, workspace: str, recall_id: str,
                   req: FeedbackRequest, via: FeedbackVia = "api") -> FeedbackResult:
        """Store ``principal``'s verdicts on cards of the recall ``recall_id`` (a verdict it
        already gave on a card of that recall is replaced; each answer entry says ``created``,
        ``updated`` or ``unchanged``), and one activity record (verb ``feedback``) naming the
        recall and the verdicts. ``via``: the surface (api, mcp, explorer, admin).

        :raises NotFound: no such recall in this workspace: never recorded, purged past the
            retention, another workspace's, or another principal's when this one lacks
            ``memory.manage`` (indistinguishable), or the principal belongs to another
            workspace. :raises Forbidden: the principal lacks ``memory.read``.
        :raises InvalidInput: a card the recall did not return (``field`` names it), a card
            deleted since, a card named twice, a card id that is not one.
        :raises PrivacyFilterFailed: the privacy filter refused a note (503; nothing stored).
        """
        principal.require(workspace, "memory.read")
        recall_uuid = _recall_uuid(recall_id)
        verdicts = self._verdicts(req)
        async with self.db.transaction(workspace) as conn:
            await workspaces.get(conn, workspace)
            record = await store.recall(conn, recall_uuid)
            if record is None or not (record["actor"] == principal.actor
                                      or principal.allows("memory.manage")):
                # another principal's recall is judged by curators only, and looks missing to
                # anyone else (which cards it returned is not told either)
                raise NotFound(f"no recall {recall_id!r} in this workspace")
            returned = set(record["card_ids"])
            live = set((await get_many(conn, [c for c, _, _ in verdicts])).keys())
            for i, (card, _, _) in enumerate(verdicts):
                if card not in returned:
                    raise InvalidInput(f"cards[{i}]: recall {recall_uuid} did not return "
                                       f"{card_id_str(card)}; feedback is on the cards a "
                                       "recall returned", field=f"cards[{i}].card_id")
                if card not in live:
                    raise InvalidInput(f"cards[{i}]: {card_id_str(card)} was deleted since "
                                       "the recall", field=f"cards[{i}].card_id")
            await store.lock(conn, recall_uuid, principal.actor)
            before = await store.of_actor(conn, recall_uuid, principal.actor)
            rows = {row["card_id"]: row for row in await store.upsert(
                conn, workspace, recall_uuid, principal.actor, verdicts, via)}
            changes = {card: ("created" if card not in before else
                              "unchanged" if before[card] == (verdict, note) else "updated")
                       for card, verdict, note in verdicts}
            tally = Counter(v for c, v, _ in verdicts if changes[c] != "unchanged")
            await activity.record(conn, workspace, actor=principal.actor, verb="feedback",
                                  outcome="ok", detail={"recall": str(recall_uuid), "via": via,
                                                        **tally})
        for card, verdict, _ in verdicts:
            self.metrics.observe_feedback(workspace, verdict, via, changes[card])
        return FeedbackResult(recall_id=str(recall_uuid),
                              cards=[_entry(rows[c], changes[c]) for c, _, _ in verdicts])

    async def recalls(self, principal: Principal, workspace: str, *, actor: str | None = None,
                      mode: str | None = None, page: int = 1,
                      per_page: int = 20) -> RecallRecordPage:
        """A page of the workspace's recall records, newest first (``actor``, ``mode``: only
        those), each with how many results and verdicts it has.

        :raises Forbidden: the principal lacks ``memory.manage``."""
        principal.require(workspace, "memory.manage")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            rows, total = await store.recalls(conn, actor=actor, mode=mode, limit=per_page,
                                              offset=(page - 1) * per_page)
        return RecallRecordPage(recalls=[RecallRecordSummary(
            recall_id=str(r["id"]), created_at=r["created_at"], actor=r["actor"],
            session_id=r["session_id"], mode=r["mode"], query_text=r["query_text"],
            results=r["results"], verdicts=r["verdicts"]) for r in rows],
            total=total, page=page, per_page=per_page)

    async def recall(self, principal: Principal, workspace: str, recall_id: str, *,
                     role: Literal["runtime", "reader"] = "runtime",
                     permission: str = "memory.manage",
                     actor: str | None = None) -> RecallRecordDetail:
        """One recall record with its results in rank order (each with the card's family and
        title now, None when deleted since) and the verdicts on each. ``role``/``permission``:
        the explorer reads its own recall page's record as the reader role with ``memory.read``;
        ``actor``: only a record of that actor (the explorer shows a person its own recalls).

        :raises NotFound: no such recall in this workspace (see :meth:`give`), or one of
            another actor than ``actor`` (answered as for a missing one).
        :raises Forbidden: the principal lacks ``permission``."""
        principal.require(workspace, permission)
        recall_uuid = _recall_uuid(recall_id)
        async with self.db.transaction(workspace, read_only=True, role=role) as conn:
            await workspaces.get(conn, workspace)
            record = await store.recall(conn, recall_uuid)
            if record is None or (actor is not None and record["actor"] != actor):
                raise NotFound(f"no recall {recall_id!r} in this workspace")
            cards = await get_many(conn, list(record["card_ids"]))
            verdicts = await store.of_recall(conn, recall_uuid)
        by_card: dict[uuid.UUID, list[FeedbackEntry]] = {}
        for row in verdicts:
            by_card.setdefault(row["card_id"], []).append(_entry(row))
        results = [RecalledCard(rank=n, card_id=card_id_str(c), score=s,
                                family=cards[c].family if c in cards else None,
                                title=cards[c].title if c in cards else None,
                                feedback=by_card.get(c, []))
                   for n, (c, s) in enumerate(zip(record["card_ids"], record["scores"]), 1)]
        return RecallRecordDetail(
            recall_id=str(recall_uuid), created_at=record["created_at"], actor=record["actor"],
            session_id=record["session_id"], mode=record["mode"], top=record["top"],
            families=record["families"], filters=record["filters"] or {},
            query_text=record["query_text"], query_digest=record["query_digest"],
            results=results, excluded=record["excluded"],
            timings=msgspec.convert(record["timings"], dict[str, float]))

    async def card(self, principal: Principal, workspace: str, card_id: str, *,
                   role: Literal["runtime", "reader"] = "runtime",
                   permission: str = "memory.manage") -> CardFeedback:
        """A card's feedback: verdict counts and the :data:`CARD_RECENT` newest verdicts with
        their recall's question (``role``/``permission`` as for :meth:`recall`).

        :raises NotFound: no such card in this workspace. :raises Forbidden."""
        principal.require(workspace, permission)
        card = parse_card_id(card_id)
        if card is None:
            raise NotFound(f"no card {card_id!r}")
        async with self.db.transaction(workspace, read_only=True, role=role) as conn:
            if not await get_many(conn, [card]):
                raise NotFound(f"no card {card_id!r}")
            counts, recent = await store.of_card(conn, card, CARD_RECENT)
        return CardFeedback(card_id=card_id_str(card), counts=counts, recent=[CardFeedbackEntry(
            recall_id=str(r["recall_id"]), mode=r["mode"], query_text=r["query_text"],
            actor=r["actor"], verdict=r["verdict"], note=r["note"], via=r["via"],
            updated_at=r["updated_at"]) for r in recent])


async def record_review_feedback(conn: Connection, principal: Principal, workspace: str,
                                 session_id: str, review_id: str,
                                 cited: set[uuid.UUID]) -> int:
    """A review's implicit feedback, in the review's transaction: ``helpful`` from the reviewer
    for each card of ``cited`` (the existing cards the applied proposals link to) on the
    session's newest recall that returned it. How many verdicts were recorded (a card no recall
    of the session returned gets none; a verdict the reviewer gave there already stays)."""
    if not cited:
        return 0
    return len(await store.review_helpful(conn, workspace, session_id, sorted(cited),
                                          principal.actor, review_id))
