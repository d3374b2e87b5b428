"""The card pages: the workspace's list, create, edit (with a stale save shown side by side),
delete with its confirmation, retry, and a card's activity (``memory.manage``; a ``memory.read``
person gets a page without edit controls, and every POST of theirs is refused by the archive).

Each handler calls the same :class:`~shared.archive.cards.Archive` use case as the JSON route,
with the session's principal: permissions, workspace serialization, the outbox and the activity
log apply unchanged.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, Parameter

from shared import models
from shared.archive.cards import Archive
from shared.errors import Forbidden, InvalidInput, NotFound, StaleRevision
from shared.store.listing import ListQuery
from writer.routes.admin import forms
from writer.routes.admin.evaluations import latest_summary
from writer.routes.admin.pages import (Person, Urls, provide_archive, provide_person, recorded,
                                       render, see_other)
from writer.routes.params import CardId, WorkspaceId

DEPS = {"person": Provide(provide_person), "archive": Provide(provide_archive)}
Text = Annotated[str | None, Parameter(max_length=200)]
#: seconds a save waits for its projection before it says "index update incomplete"
SAVE_WAIT_SECONDS = 3.0
PER_PAGE = 50


def _require_manage(person: Person) -> None:
    """:raises Forbidden: the person's token lacks ``memory.manage`` (the 403 names what it
    holds)."""
    if not person.can_manage:
        held = ", ".join(sorted(person.principal.permissions)) or "no permission"
        raise Forbidden(f"your token holds {held}: seeing and editing cards here needs "
                        "memory.manage", permissions=["memory.manage"])


async def _pairs(request: Request) -> list[tuple[str, str]]:
    form = await request.form()
    return [(k, v) for k, v in form.multi_items() if isinstance(v, str)]


async def _save_wait(archive: Archive) -> float:
    """How long a save waits for its projection: none when the queue is down (it cannot
    complete: the page says so at once)."""
    return SAVE_WAIT_SECONDS if await archive.queue.reachable(timeout=1.0) else 0.0


@get("/workspaces/{workspace_id:str}/cards", dependencies=DEPS)
async def card_list(person: NamedDependency[Person], archive: NamedDependency[Archive],
                    workspace_id: FromPath[WorkspaceId], q: FromQuery[Text] = None,
                    family: FromQuery[Annotated[str | None, Parameter(max_length=40)]] = None,
                    page: FromQuery[Annotated[int, Parameter(ge=1, le=100_000)]] = 1,
                    deleted: FromQuery[Text] = None) -> Response:
    """The workspace's cards, newest change first (text search and a family filter), each
    linking to its edit page; a ``memory.read`` person gets the read-only page."""
    if not person.can_manage:
        return render("read_only.html", person)
    if family and family not in models.FAMILIES:
        raise InvalidInput(f"there is no family {family!r}; the families are "
                           f"{', '.join(models.FAMILIES)}", field="family")
    query = ListQuery(q=q or None, family=[family] if family else [],
                      sort="updated", page=page, per_page=PER_PAGE)
    result = await archive.list_cards(person.principal, workspace_id, query)
    pages = max(1, -(-result.total // PER_PAGE))
    return render("cards.html", person, cards=result.cards, total=result.total, page=page,
                  pages=pages, q=q or "", family=family or "", families=models.FAMILIES,
                  deleted=deleted, evaluation=await latest_summary(archive, person))


@get("/workspaces/{workspace_id:str}/cards.json", dependencies=DEPS)
async def card_search(person: NamedDependency[Person], archive: NamedDependency[Archive],
                      workspace_id: FromPath[WorkspaceId], q: FromQuery[Text] = None
                      ) -> dict[str, Any]:
    """Cards matching ``q`` (title, text or id), for the link-target picker: ``{cards: [{id,
    title, family}]}``, at most 20."""
    result = await archive.list_cards(person.principal, workspace_id,
                                      ListQuery(q=q or None, sort="title", per_page=20))
    return {"cards": [{"id": c.id, "title": c.title, "family": c.family} for c in result.cards]}


@get("/workspaces/{workspace_id:str}/cards/new", dependencies=DEPS)
async def new_card(person: NamedDependency[Person], workspace_id: FromPath[WorkspaceId],
                   family: FromQuery[Annotated[str | None, Parameter(max_length=40)]] = None
                   ) -> Response:
    """An empty form of ``family``'s fields (a choice of family first)."""
    _require_manage(person)
    form = forms.CardForm(family=family if family in models.FAMILIES else models.FAMILIES[0])
    form.content = {n: "" for n, _ in form.fields}
    return render("card_form.html", person, form=form, card=None, families=models.FAMILIES)


@post("/workspaces/{workspace_id:str}/cards/new", dependencies=DEPS, opt={"activity": None})
async def create_card(request: Request, person: NamedDependency[Person],
                      archive: NamedDependency[Archive],
                      workspace_id: FromPath[WorkspaceId]) -> Response:
    """Create the card: 303 to its page saying whether it is indexed yet; 422 with the form as
    typed and the reason next to its field when nothing was written."""
    form = forms.from_pairs(await _pairs(request))
    form.revision = None
    try:
        body = await recorded(archive, person, workspace_id, "create", form.body)
        result = await archive.create_card(person.principal, workspace_id, body,
                                           await _save_wait(archive))
    except InvalidInput as exc:
        form.put_error(exc)
        return render("card_form.html", person, status=422, form=form, card=None,
                      families=models.FAMILIES)
    return see_other(Urls(workspace_id).card(result.card.id, saved=result.index_status,
                                             created="1", rev=result.card.revision))


@get("/workspaces/{workspace_id:str}/cards/{card_id:str}", dependencies=DEPS)
async def edit_card(person: NamedDependency[Person], archive: NamedDependency[Archive],
                    workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId],
                    saved: FromQuery[Text] = None, created: FromQuery[Text] = None,
                    retried: FromQuery[Text] = None,
                    rev: FromQuery[Annotated[int | None, Parameter(ge=1)]] = None) -> Response:
    """The card's form, with the outcome of the last save or retry (``rev``: the revision that
    save wrote; once the card has moved past it, as on a reload after another save, the notice
    is left out rather than told of the wrong revision)."""
    _require_manage(person)
    detail = await archive.get_card(person.principal, workspace_id, card_id)
    if rev is not None and rev != detail.card.revision:
        saved = created = None
    titles = await _titles(archive, person, workspace_id, [link.target for link in detail.card.links])
    feedback = await archive.feedback.card(person.principal, workspace_id, card_id)
    return render("card_form.html", person, form=forms.from_card(detail.card), card=detail.card,
                  detail=detail, saved=saved, created=created, retried=retried, titles=titles,
                  families=models.FAMILIES, feedback=feedback)


@post("/workspaces/{workspace_id:str}/cards/{card_id:str}", dependencies=DEPS,
      opt={"activity": None})
async def update_card(request: Request, person: NamedDependency[Person],
                      archive: NamedDependency[Archive], workspace_id: FromPath[WorkspaceId],
                      card_id: FromPath[CardId]) -> Response:
    """Save the card at the revision the form edited: 303 to its page with the outcome; 409
    with the stored card next to the person's version when it changed meanwhile (nothing
    overwritten); 422 with the form as typed when it is not valid (nothing written); 404 with
    the form as typed, as a new card's, when the card was deleted meanwhile."""
    form = forms.from_pairs(await _pairs(request))
    try:
        return await _save(person, archive, workspace_id, card_id, form)
    except NotFound:  # deleted meanwhile: keep what was typed, offer it as a new card
        form.revision = None
        form.errors = {"form": "This card is gone: it was deleted meanwhile (its activity "
                               "page says by whom). What you typed is below: create it as a "
                               "new card, or leave this page."}
        return render("card_form.html", person, status=404, form=form, card=None,
                      families=models.FAMILIES, deleted_id=card_id)


async def _save(person: Person, archive: Archive, workspace_id: str, card_id: str,
                form: forms.CardForm) -> Response:
    """:func:`update_card`'s outcomes but the deleted card's.

    :raises NotFound: the card is not there (deleted meanwhile)."""
    try:
        body = await recorded(archive, person, workspace_id, "update", form.body, card_id)
        result = await archive.update_card(person.principal, workspace_id, card_id, body,
                                           await _save_wait(archive))
    except StaleRevision:
        fresh = await archive.get_card(person.principal, workspace_id, card_id)
        stored = forms.from_card(fresh.card)
        mine, who = forms.merged(stored, form)  # only what this person changed goes on top
        titles = await _titles(archive, person, workspace_id, [
            link["target"] for link in stored.links + mine.links])
        return render("stale.html", person, status=409, card=fresh.card, form=mine,
                      rows=forms.differences(stored, mine, titles, who))
    except InvalidInput as exc:
        current = await archive.get_card(person.principal, workspace_id, card_id)
        form.family = current.card.family
        form.put_error(exc)
        return render("card_form.html", person, status=422, form=form, card=current.card,
                      detail=current, families=models.FAMILIES)
    return see_other(Urls(workspace_id).card(result.card.id, saved=result.index_status,
                                             rev=result.card.revision))


@post("/workspaces/{workspace_id:str}/cards/{card_id:str}/retry", dependencies=DEPS,
      opt={"activity": None})
async def retry_card(person: NamedDependency[Person], archive: NamedDependency[Archive],
                     workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId]) -> Response:
    """Re-run the card's projection; back to its page saying whether the queue took it."""
    result = await archive.retry(person.principal, workspace_id, card_id)
    return see_other(Urls(workspace_id).card(card_id, retried="queued" if result.enqueued
                                             else "queue_down"))


@get("/workspaces/{workspace_id:str}/cards/{card_id:str}/delete", dependencies=DEPS)
async def confirm_delete(person: NamedDependency[Person], archive: NamedDependency[Archive],
                         workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId]
                         ) -> Response:
    """The confirmation: what goes with the card (its dependencies, outgoing and incoming
    links)."""
    _require_manage(person)
    detail = await archive.get_card(person.principal, workspace_id, card_id)
    titles = await _titles(archive, person, workspace_id, [link.target for link in detail.card.links])
    return render("delete.html", person, card=detail.card, detail=detail, titles=titles,
                  seen=_what_goes(detail))


def _what_goes(detail: Any) -> str:
    """A digest of what the delete confirmation names (the card's revision, its dependencies,
    outgoing and incoming links): the form carries it, so a delete of a card that changed
    since the confirmation was shown asks again instead of removing what nobody saw."""
    shown = [detail.card.revision, [d.qualified() for d in detail.card.dependencies],
             sorted((link.target, link.meaning or "") for link in detail.card.links),
             sorted((link.source, link.meaning or "") for link in detail.incoming_links)]
    return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:32]


async def _titles(archive: Archive, person: Person, workspace: str, ids: list[str]) -> dict[str, str]:
    titles: dict[str, str] = {}
    for cid in dict.fromkeys(ids[:100]):
        if models.parse_card_id(cid) is None:
            continue
        try:
            titles[cid] = (await archive.get_card(person.principal, workspace, cid)).card.title
        except NotFound:  # a target deleted meanwhile: shown by id
            continue
    return titles


@post("/workspaces/{workspace_id:str}/cards/{card_id:str}/delete", dependencies=DEPS,
      opt={"activity": None})
async def delete_card(request: Request, person: NamedDependency[Person],
                      archive: NamedDependency[Archive], workspace_id: FromPath[WorkspaceId],
                      card_id: FromPath[CardId]) -> Response:
    """Delete the card (the confirmation form's ``confirm=delete`` is required) and say what was
    removed with it; 409 with the confirmation again when the card or its links changed since
    it was shown (the form's ``seen``: :func:`_what_goes`); 404 saying so when it is gone."""
    pairs = dict(await _pairs(request))
    if pairs.get("confirm") != "delete":
        return see_other(Urls(workspace_id).delete(card_id))
    if not person.can_manage:  # the archive refuses it (403) and records the attempt
        await archive.delete_card(person.principal, workspace_id, card_id)
    # what goes with the card, read just before (a link added in between goes too, unnamed)
    try:
        detail = await archive.get_card(person.principal, workspace_id, card_id)
    except NotFound:
        return render("error.html", person, status=404, title="Deleted already",
                      message="This card is not here any more: it was deleted already (its "
                              "activity page says by whom).", code="not_found",
                      activity=Urls(workspace_id).activity(card_id))
    titles = await _titles(archive, person, workspace_id, [link.target for link in detail.card.links])
    seen = _what_goes(detail)
    if pairs.get("seen") and pairs["seen"] != seen:
        return render("delete.html", person, status=409, card=detail.card, detail=detail,
                      titles=titles, seen=seen, changed=True)
    result = await archive.delete_card(person.principal, workspace_id, card_id)
    return render("deleted.html", person, card=detail.card, detail=detail, titles=titles,
                  result=result)


@get("/workspaces/{workspace_id:str}/cards/{card_id:str}/activity", dependencies=DEPS)
async def card_activity(person: NamedDependency[Person], archive: NamedDependency[Archive],
                        workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId]
                        ) -> Response:
    """Who changed the card, what, when (and the attempts that were refused); a deleted card
    keeps its activity.

    :raises NotFound: no such card and no activity names it (it never existed here)."""
    _require_manage(person)
    entries = await archive.activity(person.principal, workspace_id, card_id=card_id, limit=200)
    title = None
    try:
        title = (await archive.get_card(person.principal, workspace_id, card_id)).card.title
    except NotFound:  # a deleted card keeps its activity
        if not entries.total:
            raise
        title = None
    return render("activity.html", person, card_id=card_id, title=title,
                  entries=entries.activity, total=entries.total)


HANDLERS = [card_list, card_search, new_card, create_card, edit_card, update_card, retry_card,
            confirm_delete, delete_card, card_activity]
