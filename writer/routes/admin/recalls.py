"""The recall records and their feedback (issue 35, docs/usage.md): every recall the workspace
was asked, newest first; one recall with its results in rank order, the verdicts given on each,
and the buttons to give one's own (``helpful``, ``not_helpful``, ``wrong``, with a note).

``memory.manage`` reads them (a record names who asked and holds the question); a person
without it gets the read-only page. The verdicts are stored by the same use case as
``POST …/recalls/{recall_id}/feedback``, as the person's token, ``via`` ``admin``.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, Parameter

from shared import models
from shared.archive.cards import Archive
from shared.errors import InvalidInput
from shared.models import CardVerdict, FeedbackRequest
from writer.routes.admin.pages import Person, Urls, provide_archive, provide_person, render, see_other
from writer.routes.params import RecallId, WorkspaceId

DEPS = {"person": Provide(provide_person), "archive": Provide(provide_archive)}
PER_PAGE = 50
#: the words of each verdict on the buttons and in the lists
VERDICT_WORDS = {"helpful": "Helpful", "not_helpful": "Not helpful", "wrong": "Wrong"}


@get("/workspaces/{workspace_id:str}/recalls", dependencies=DEPS)
async def recall_list(person: NamedDependency[Person], archive: NamedDependency[Archive],
                      workspace_id: FromPath[WorkspaceId],
                      mode: FromQuery[models.Mode | None] = None,
                      page: FromQuery[Annotated[int, Parameter(ge=1, le=1_000_000)]] = 1
                      ) -> Response:
    """The workspace's recall records, newest first, 50 a page (``mode`` narrows them)."""
    if not person.can_manage:
        return render("read_only.html", person)
    records = await archive.feedback.recalls(person.principal, workspace_id, mode=mode,
                                             page=page, per_page=PER_PAGE)
    pages = max(1, -(-records.total // PER_PAGE))
    return render("recalls.html", person, current="recalls", records=records, mode=mode,
                  modes=models.MODES, pages=pages)


@get("/workspaces/{workspace_id:str}/recalls/{recall_id:str}", dependencies=DEPS)
async def recall_page(person: NamedDependency[Person], archive: NamedDependency[Archive],
                      workspace_id: FromPath[WorkspaceId], recall_id: FromPath[RecallId],
                      saved: FromQuery[Annotated[str | None, Parameter(max_length=60)]] = None,
                      verdict: FromQuery[models.Verdict | None] = None) -> Response:
    """One recall: the question, the results in rank order with every verdict given on each,
    and the person's own verdict buttons (``saved``/``verdict``: the card and verdict just
    stored, said at the top)."""
    if not person.can_manage:
        return render("read_only.html", person)
    record = await archive.feedback.recall(person.principal, workspace_id, recall_id)
    mine = {r.card_id: f.verdict for r in record.results for f in r.feedback
            if f.actor == person.principal.actor}
    notes = {r.card_id: f.note for r in record.results for f in r.feedback
             if f.actor == person.principal.actor and f.note}
    saved_title = next((r.title for r in record.results if r.card_id == saved), None)
    return render("recall.html", person, current="recalls", record=record, mine=mine,
                  notes=notes, words=VERDICT_WORDS, saved=saved if saved_title else None,
                  saved_title=saved_title, saved_verdict=verdict)


@post("/workspaces/{workspace_id:str}/recalls/{recall_id:str}/feedback", dependencies=DEPS,
      opt={"activity": None})
async def give_feedback(request: Request, person: NamedDependency[Person],
                        archive: NamedDependency[Archive], workspace_id: FromPath[WorkspaceId],
                        recall_id: FromPath[RecallId]) -> Response:
    """Store the person's verdict on one card of the recall (form ``card_id``, ``verdict``,
    ``note``), then back to the recall's page, which says what was saved.

    :raises InvalidInput: no verdict, or one that is not one (the archive refuses the rest:
        a card the recall did not return, a note too long)."""
    form = await request.form()
    card_id = str(form.get("card_id") or "")[:60]
    verdict = str(form.get("verdict") or "")
    if verdict not in VERDICT_WORDS:
        raise InvalidInput("choose Helpful, Not helpful or Wrong", field="verdict")
    note = str(form.get("note") or "")
    if len(note) > models.MAX_FEEDBACK_NOTE:
        raise InvalidInput(f"the note is {len(note):,} characters; at most "
                           f"{models.MAX_FEEDBACK_NOTE:,}", field="note")
    result = await archive.feedback.give(
        person.principal, workspace_id, recall_id,
        FeedbackRequest(cards=[CardVerdict(card_id=card_id, verdict=verdict,  # type: ignore[arg-type]
                                           note=note or None)]), via="admin")
    return see_other(Urls(workspace_id).recall(result.recall_id, saved=result.cards[0].card_id,
                                               verdict=verdict) + "#saved")


HANDLERS = [recall_list, recall_page, give_feedback]
