"""The review pages (issue 24 "Review of a session", DESIGN §6 and §12): the sessions to review,
one editable summary per session, and its durable receipt (``memory.review``; anyone else gets
a page saying they cannot review, and their POSTs are refused by the use case: 403).

Each handler calls the same :class:`~shared.archive.sessions.Workflow` use case as the JSON
routes, with the session's principal. The review id is generated when the summary is rendered
and sent back in a hidden field, so a form submitted again (back button, double click) answers
the same receipt and writes nothing. A stale update rolls the whole selection back (the use
case's guarantee): the page names the card that changed and keeps what the reviewer typed.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, Parameter

from shared.archive import review_context
from shared.archive.cards import Archive
from shared.archive.responses import ReviewNeighbours, ReviewReceipt, Summary, SummaryItem
from shared.errors import ArchiveError, Conflict, Forbidden, InvalidInput
from shared.validation_words import plain_message
from shared.workflow.requests import ReviewRequest
from writer.routes.admin import forms, review_form
from writer.routes.admin.pages import (Person, Urls, provide_archive, provide_person, recorded,
                                       render, see_other)

DEPS = {"person": Provide(provide_person), "archive": Provide(provide_archive)}
WorkspaceId = Annotated[str, Parameter(max_length=63)]
SessionId = Annotated[str, Parameter(max_length=200)]
Text = Annotated[str | None, Parameter(max_length=200)]
Status = Annotated[str, Parameter(max_length=20)]


#: how the archive's review errors name a proposal: its place in the request, then its key
_SELECTED = re.compile(r"^selected\[\d+\] \(key '[^']*'\): ")


@dataclass
class Entry:
    """One proposal on the page: the summary's item, its form (as proposed, or as the reviewer
    typed it), whether it is kept, the content fields shown read-only, the changes of an update
    as text rows, and the error that concerns it."""

    n: int
    item: SummaryItem
    form: forms.CardForm | None
    keep: bool
    readonly: frozenset[str]
    changes: list[tuple[str, str, str]]
    error: str | None = None


def _text(value: Any) -> str:
    """A field's value as a person reads it (content by field, dependencies qualified, links
    with their meaning)."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return "\n".join(f"{k}: {v}" for k, v in value.items())
    if isinstance(value, list):
        return "\n".join(_text_item(v) for v in value)
    return str(value)


def _text_item(value: Any) -> str:
    if isinstance(value, dict) and "target" in value:
        return f"{value['target']} ({value['meaning']})" if value.get("meaning") \
            else str(value["target"])
    if isinstance(value, dict):
        return ".".join(str(value[p]) for p in forms.DEP_PARTS if value.get(p))
    return str(value)


def _entries(summary: Summary, posted: review_form.Posted | None) -> list[Entry]:
    """The page's proposals (erased ones without a form), with the reviewer's posted forms and
    choices when the page is shown again after a refused apply."""
    out = []
    for n, item in enumerate(summary.proposals):
        form = None
        if item.card is not None and item.reviewed is None:
            form = (posted.forms.get(item.key) if posted else None) \
                or review_form.from_preview(item.card)
        keep = posted.keep.get(item.key, False) if posted else (
            form is not None and not item.stale and not item.problems)
        changes = [(name, _text(c.before), _text(c.after)) for name, c in item.changes.items()]
        out.append(Entry(n=n, item=item, form=form, keep=keep, changes=changes,
                         readonly=review_form.readonly(item.family)))
    return out


def _cannot_review(person: Person) -> Response | None:
    if person.can_review:
        return None
    return render("review_denied.html", person, current="sessions", status=403)


@get("/workspaces/{workspace_id:str}/sessions", dependencies=DEPS)
async def session_list(person: NamedDependency[Person], archive: NamedDependency[Archive],
                       workspace_id: FromPath[WorkspaceId],
                       status: FromQuery[Status] = "open") -> Response:
    """The sessions to review (``status``: open, reviewed or all), latest proposal first."""
    denied = _cannot_review(person)
    if denied is not None:
        return denied
    result = await archive.workflow.sessions(person.principal, workspace_id, status)
    return render("sessions.html", person, current="sessions", sessions=result.sessions,
                  shown=result.status)


@get("/workspaces/{workspace_id:str}/sessions/{session_id:str}", dependencies=DEPS)
async def session_page(person: NamedDependency[Person], archive: NamedDependency[Archive],
                       workspace_id: FromPath[WorkspaceId], session_id: FromPath[SessionId],
                       review: FromQuery[Text] = None, replayed: FromQuery[Text] = None
                       ) -> Response:
    """The session's editable summary; once reviewed, its receipt (``review``: the review just
    applied, ``replayed``: it had been applied before and nothing was written again)."""
    denied = _cannot_review(person)
    if denied is not None:
        return denied
    summary = await archive.workflow.summary(person.principal, workspace_id, session_id)
    done = next((r for r in summary.reviews if r.review_id == review), None)
    if done is not None or not summary.counts.get("open"):
        return _receipt(person, summary, done or summary.reviews[-1], bool(replayed))
    nearby = await review_context.neighbours(archive, person.principal, workspace_id, summary)
    return _summary_page(person, summary, nearby=nearby)


def _summary_page(person: Person, summary: Summary, posted: review_form.Posted | None = None,
                  status: int = 200, outcome: dict[str, Any] | None = None,
                  nearby: ReviewNeighbours | None = None) -> Response:
    """The editable summary (``posted``: the reviewer's form, shown again after a refused
    apply; ``nearby``: the open additions' neighbours by recall, None when not looked up)."""
    entries = _entries(summary, posted)
    if outcome and outcome.get("item"):
        for e in entries:
            if e.item.key == outcome["item"]:
                e.error = outcome["message"]
    return render("review.html", person, current="sessions", summary=summary, entries=entries,
                  review_id=uuid.uuid4().hex, note=posted.note if posted else "",
                  outcome=outcome, status=status, nearby=nearby, current_title=current_title)


def _receipt(person: Person, summary: Summary, receipt: ReviewReceipt,
             replayed: bool, meanwhile: bool = False, status: int = 200) -> Response:
    """The receipt page of ``receipt`` (``replayed``: this very form was applied before;
    ``meanwhile``: another review closed the session first, this form's choices not applied)."""
    titles = {i.key: (i.card.title if i.card else i.key) for i in summary.proposals}
    return render("receipt.html", person, current="sessions", summary=summary,
                  receipt=receipt, titles=titles, replayed=replayed, meanwhile=meanwhile,
                  status=status)


@post("/workspaces/{workspace_id:str}/sessions/{session_id:str}", dependencies=DEPS,
      opt={"activity": None})
async def apply_review(request: Request, person: NamedDependency[Person],
                       archive: NamedDependency[Archive], workspace_id: FromPath[WorkspaceId],
                       session_id: FromPath[SessionId]) -> Response:
    """Apply the reviewer's selection with their edits (or decline all): 303 to the receipt;
    409 with the page again (what was typed kept) naming the card that changed when an update
    is stale, nothing written; 422 naming the proposal when the selection is not valid."""
    workflow = archive.workflow
    pairs = [(k, v) for k, v in (await request.form()).multi_items() if isinstance(v, str)]
    if not person.can_review:  # the use case refuses it (403) and records the attempt
        await workflow.review(person.principal, workspace_id, session_id,
                              ReviewRequest(review_id="refused", decline_all=True))
        raise Forbidden("reviewing needs memory.review", permissions=["memory.review"])
    summary = await workflow.summary(person.principal, workspace_id, session_id)
    posted = review_form.parse(pairs, {i.key: i.family for i in summary.proposals})
    if posted.review_id in {r.review_id for r in summary.reviews}:
        # this very form was applied already (back button, double click): its receipt, as is
        return see_other(Urls(workspace_id).session(session_id, review=posted.review_id,
                                                    replayed="1"))
    try:
        req = await recorded(archive, person, workspace_id, "review",
                             lambda: review_form.request(posted, summary.proposals))
        result = await workflow.review(person.principal, workspace_id, session_id, req)
    except (InvalidInput, Conflict) as exc:
        if not summary.counts.get("open") and not isinstance(exc, InvalidInput):
            if not summary.reviews:
                raise
            # reviewed meanwhile (another tab, another reviewer): that review's receipt, saying
            # this form's choices were not applied
            return _receipt(person, summary, summary.reviews[-1], False, meanwhile=True,
                            status=exc.status)
        nearby = await review_context.neighbours(archive, person.principal, workspace_id,
                                                 summary)  # shown again, as on the first page
        return _summary_page(person, summary, posted, status=exc.status,
                             outcome=_refusal(exc, summary), nearby=nearby)
    return see_other(Urls(workspace_id).session(
        session_id, review=result.receipt.review_id, replayed="1" if result.replayed else None))


def current_title(item: SummaryItem) -> str:
    """The title of the card an item names as the card holds it now: an update's title before
    its change (the proposal's own title otherwise)."""
    if "title" in item.changes:
        return str(item.changes["title"].before)
    return item.card.title if item.card else ""


def _refusal(exc: ArchiveError, summary: Summary) -> dict[str, Any]:
    """What the page says about a refused apply: ``{code, message, item, card_id, title,
    current_revision}`` (the card that changed, for a stale update)."""
    item = exc.extra.get("item")
    card_id = exc.extra.get("card_id")
    title = next((current_title(i) for i in summary.proposals
                  if i.card_id == card_id and i.card is not None), None)
    number = next((n for n, i in enumerate(summary.proposals) if i.key == item), None)
    # the archive names a proposal by its place in the request ("selected[0] (key 'k'): …");
    # the page names it by its number on the page, and the rest in a person's words
    message = plain_message(_SELECTED.sub("", exc.message))
    return {"code": exc.code, "message": message, "item": item, "card_id": card_id,
            "title": title, "current_revision": exc.extra.get("current_revision"),
            "number": number}


HANDLERS = [session_list, session_page, apply_review]
