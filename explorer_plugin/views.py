"""The explorer's pages, one view each (workspaces, cards, card, pending, activity, recall, a
recall's record), the one form it takes (feedback on a recall's card); routes.

A view checks Datasette permissions (:mod:`~explorer_plugin.access`), reads its query string
(:mod:`~explorer_plugin.params`), calls :mod:`shared.archive.browsing` (or verified recall) and
answers with an export (:mod:`~explorer_plugin.export`) or a page
(:mod:`~explorer_plugin.render`, links from :mod:`~explorer_plugin.urls`). No SQL here; an
exception raised by a view becomes an error page in :mod:`~explorer_plugin.errors`.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from datasette import Response

from shared.archive import browsing as browse
from shared.auth import Principal
from shared.errors import Forbidden, IndexUnavailable, InvalidInput, Unavailable
from shared.models import (FAMILIES, FAMILY_FIELDS, MAX_PER_PAGE, MODES, ORIGINS, Card,
                           FeedbackRequest, RecallResponse, SearchRequest)
from shared.validation_words import plain_message

from . import access, export, paging, params, render, resources, sign_in, urls


_WS = r"(?P<workspace>[^/.]+)"


async def home_view(datasette: Any, request: Any) -> Response:
    """``/``: the archive is this instance's home page; redirect to the workspace list."""
    return Response.redirect(datasette.urls.path("/-/memory"))


async def workspaces_view(datasette: Any, request: Any) -> Response:
    """``/-/memory`` (and ``.json`` / ``.csv``): the workspaces this actor may see, with card
    counts, projected cards and open index operations."""
    await access.require_instance(datasette, request)
    db = await resources.database(datasette)
    rows = [row for row in await browse.workspaces(db)
            if await access.can_view(datasette, request.actor, row["id"])]
    workspaces = [{**row, **await browse.workspace_overview(db, row["id"])} for row in rows]
    fmt = request.url_vars.get("format")
    if fmt == "json":
        return export.list_json(request, {"workspaces": workspaces}, "workspaces")
    if fmt == "csv":
        return export.csv_response(request, "workspaces.csv", export.WORKSPACES, workspaces)
    return await render.page(datasette, request, "memarc_workspaces.html",
                             {"workspaces": workspaces,
                              "sign_in_command": sign_in.command(request)}, depth=1)


async def cards_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}`` (and ``.json`` / ``.csv``): a filtered, paginated card list
    with facet counts (HTML) and page numbers.

    Parameters: see :func:`explorer_plugin.params.list_query`. CSV also takes ``_stream=1``
    (every matching card) and ``_dl=1`` (download). Bad values answer 400.
    """
    workspace = await access.require_workspace(datasette, request)
    fmt = request.url_vars.get("format")
    query, size_given = params.list_query(request)
    db = await resources.database(datasette)
    if fmt == "json":
        cards, total = await browse.list_cards(db, workspace, query)
        return export.workspace_json(request, workspace, "cards", cards, total, query.page,
                                     query.per_page)
    if fmt == "csv":
        if export.streams(request):
            cards = await paging.every_page(functools.partial(browse.list_cards, db, workspace),
                                            query, MAX_PER_PAGE)
        else:
            cards, _ = await browse.list_cards(db, workspace, query)
        return export.csv_response(request, f"{workspace}.csv", export.CARDS, cards)

    result = await browse.list_page(db, workspace, query)
    pairs = urls.filter_pairs(query, size_given)
    to = urls.Urls(datasette)
    base = to.workspace(workspace)
    return await render.page(datasette, request, "memarc_cards.html", {
        "workspace": workspace,
        "query": query,
        "cards": result.cards,
        "total": result.total,
        "facets": urls.facet_links(base, pairs, query, result.facets),
        "families": FAMILIES,
        "origins": ORIGINS,
        "size_given": size_given,
        "sort_links": urls.sort_links(base, pairs, query),
        "filtered": any(p[0] not in ("_size", "_sort", "_sort_desc") for p in pairs),
        "first_row": paging.first_row(query.page, query.per_page),
        **urls.list_links(functools.partial(to.workspace, workspace), pairs, query.page,
                          query.per_page, result.total),
        "csv_all_url": urls.every_row_csv(to.workspace(workspace, "csv"), pairs),
    }, depth=2)


def _content_fields(card: Card) -> list[tuple[str, Any]]:
    """A card's content as ``(field, value)``: its family's required then optional fields, then
    any other field in name order."""
    required, optional = FAMILY_FIELDS[card.family]
    ordered = [f for f in required + optional if f in card.content]
    ordered += sorted(f for f in card.content if f not in ordered)
    return [(name, card.content[name]) for name in ordered]


async def card_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}/{card_id}`` (and ``.json``): a card with its content,
    dependencies, links both ways, projection status and (the page) its feedback."""
    workspace = await access.require_workspace(datasette, request)
    db = await resources.database(datasette)
    view = await browse.card_view(db, workspace, request.url_vars["card_id"])
    if request.url_vars.get("format") == "json":
        return export.json_response(view)
    card = view.card
    try:
        feedback = await resources.feedback(datasette).card(
            _reader(workspace, actor_name(request) or "datasette:anonymous"), workspace, card.id,
            role="reader", permission="memory.read")
        feedback_note = None
    except Unavailable as exc:  # this explorer only browses, or the read failed: say so
        feedback, feedback_note = None, plain_message(exc.message)
    return await render.page(datasette, request, "memarc_card.html", {
        "feedback": feedback, "feedback_note": feedback_note,
        "workspace": workspace,
        "card": card,
        "content": _content_fields(card),
        # (card id, title, meaning) both ways
        "outgoing": [(link.target, view.link_titles.get(link.target) or link.target, link.meaning)
                     for link in card.links],
        "incoming": [(link.source, link.title, link.meaning) for link in view.incoming_links],
        "operations": view.open_operations,
        "json_url": urls.Urls(datasette).card(workspace, card.id, "json"),
    })


async def pending_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}/-/pending`` (and ``.json`` / ``.csv``): incomplete projection
    operations, oldest first, with age, attempts and last error; ``_page`` / ``_size``."""
    workspace = await access.require_workspace(datasette, request)
    page = params.page(request, paging.LOG_PAGE)
    db = await resources.database(datasette)
    rows, total = await browse.pending(db, workspace, limit=page.size, offset=page.offset)
    answer = export.workspace_list(request, workspace, "operations", rows, total, page,
                                   export.OPERATIONS, "pending")
    if answer is not None:
        return answer
    return await render.page(datasette, request, "memarc_pending.html", {
        "workspace": workspace,
        "operations": rows,
        "total": total,
        **urls.list_links(functools.partial(urls.Urls(datasette).pending, workspace),
                          urls.state_pairs({}, page), page.number, page.size, total),
    })


async def activity_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}/-/activity`` (and ``.json`` / ``.csv``): the activity log, newest
    first, filterable by ``verb``, ``card_id`` and ``outcome`` (prefix, e.g. ``rejected``);
    ``_page`` / ``_size``."""
    workspace = await access.require_workspace(datasette, request)
    page = params.page(request, paging.LOG_PAGE)
    filters = params.activity_filters(request)
    db = await resources.database(datasette)
    rows, total = await browse.activity(db, workspace, limit=page.size, offset=page.offset,
                                        **filters)
    answer = export.workspace_list(request, workspace, "activity", rows, total, page,
                                   export.ACTIVITY, "activity")
    if answer is not None:
        return answer
    return await render.page(datasette, request, "memarc_activity.html", {
        "workspace": workspace, "activity": rows, "total": total, "filters": filters,
        **urls.list_links(functools.partial(urls.Urls(datasette).activity, workspace),
                          urls.state_pairs(filters, page), page.number, page.size, total),
    })


async def verified_recall(datasette: Any, request: Any, workspace: str, req: SearchRequest
                          ) -> RecallResponse:
    """The verified recall of ``req`` in ``workspace`` through the process archive
    (:meth:`shared.archive.cards.Archive.search`, reader role, the configured privacy filter), as
    the read-only principal ``datasette:<actor id>`` (``datasette:anonymous`` without an actor).

    :raises IndexUnavailable: this process has no index or embedder (the page says so first).
    :raises InvalidInput: the request does not fit the mode. :raises Unavailable: PostgreSQL or
        the index is down, or the privacy filter refused the query.
    """
    archive = resources.search_archive(datasette)
    if archive is None:
        raise IndexUnavailable(resources.INDEX_NOT_AVAILABLE)
    principal = _reader(workspace, actor_name(request) or "datasette:anonymous")
    return await archive.search(principal, workspace, req, role="reader")


def actor_name(request: Any) -> str | None:
    """The principal name of the signed-in actor, ``datasette:<actor id>``, or None when the
    request has no actor with an id (nobody to give feedback as)."""
    actor_id = (request.actor or {}).get("id")
    return f"datasette:{actor_id}" if actor_id not in (None, "") else None


def _reader(workspace: str, actor: str) -> Principal:
    """The explorer's principal for ``actor``: ``memory.read`` in ``workspace``."""
    return Principal(workspace=workspace, permissions=frozenset({"memory.read"}), actor=actor)


def _signed_in(request: Any, workspace: str) -> Principal:
    """The principal of the signed-in actor.

    :raises Forbidden: no actor with an id (feedback and recall records are per person)."""
    actor = actor_name(request)
    if actor is None:
        raise Forbidden(f"Sign in to give feedback (`{sign_in.command(request)}` prints a "
                        "sign-in link): feedback and recall records are kept per person.")
    return _reader(workspace, actor)


def _result_rows(response: RecallResponse) -> list[dict[str, Any]]:
    """Template rows of a recall response: rank, card, score (six decimals), similarity (three
    decimals, or a dash), whether it is below the workspace's floor, the retrieval path as
    ``{id, title}`` steps (titles of the cards returned) and the retrieval ranks."""
    titles = {r.card.id: r.card.title for r in response.results}
    return [{
        "rank": rank,
        "card": r.card,
        "score": f"{r.score:.6f}",
        "similarity": f"{r.similarity:.3f}" if r.similarity is not None else "–",
        "below_floor": r.below_floor,
        "path": [{"id": cid, "title": titles.get(cid)} for cid in r.retrieval.path],
        "retrieval": r.retrieval,
    } for rank, r in enumerate(response.results, start=1)]


async def recall_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}/-/recall``: the verified recall of the archive, with scores and
    retrieval paths, and under each result the feedback buttons (:func:`feedback_view`) when the
    recall was recorded and an actor is signed in (else a sentence why not). The form is a GET, so a search is a shareable URL; a bad search is a 400
    and an unavailable index a 503, both shown with the form."""
    workspace = await access.require_workspace(datasette, request)
    form = params.recall_form(request)
    query = form["q"]
    available = resources.search_archive(datasette) is not None
    context: dict[str, Any] = {
        "workspace": workspace, "form": form, "modes": MODES,
        "families": FAMILIES,
        "index_available": available, "index_message": resources.INDEX_NOT_AVAILABLE,
        "response": None, "error": None,
    }
    status = 200
    if query and not available:
        context["error"], status = resources.INDEX_NOT_AVAILABLE, 503
    elif query:
        try:
            req = params.search_request(request, query)
            context["request_made"] = req
            context["response"] = await verified_recall(datasette, request, workspace, req)
        except (InvalidInput, Forbidden, Unavailable) as exc:
            # shown with the form, so the search can be corrected (like Datasette's SQL errors)
            context["error"] = plain_message(exc.message)  # a person's words (the page's)
            status = 503 if isinstance(exc, Unavailable) else 400
    if context["response"] is not None:
        context["results"] = _result_rows(context["response"])
    context["signed_in"] = actor_name(request) is not None
    context["sign_in_command"] = sign_in.command(request)
    return await render.page(datasette, request, "memarc_recall.html", context, status=status)


async def recall_record_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}/-/recalls/{recall_id}``: one of this actor's own recalls (its
    question, its results in rank order with the verdict this actor gave each and the feedback
    buttons); ``saved=<card id>`` adds "Saved: <verdict> for <title>". Another actor's recall,
    another workspace's or a missing one are the same 404; no signed-in actor is a 403."""
    workspace = await access.require_workspace(datasette, request)
    principal = _signed_in(request, workspace)
    record = await resources.feedback(datasette).recall(
        principal, workspace, request.url_vars["recall_id"], role="reader",
        permission="memory.read", actor=principal.actor)
    results = [{"result": r, "mine": next((f for f in r.feedback if f.actor == principal.actor),
                                          None)} for r in record.results]
    saved = next((row for row in results if row["mine"] is not None
                  and row["result"].card_id == request.args.get("saved")), None)
    return await render.page(datasette, request, "memarc_recall_record.html", {
        "workspace": workspace, "record": record, "results": results, "saved": saved,
    })


async def feedback_view(datasette: Any, request: Any) -> Response:
    """``POST /-/memory/{workspace}/-/recalls/{recall_id}/feedback`` (the buttons' form:
    ``card_id``, ``verdict``, ``note``; Datasette's CSRF token): store the signed-in actor's
    verdict (via ``explorer``) and answer 303 to the recall's record page. A ``GET`` goes
    there too.

    :raises Forbidden: no signed-in actor (403). :raises NotFound: not this actor's recall of
        this workspace (404). :raises InvalidInput: no or an unknown verdict, a card the recall
        did not return (400). :raises Unavailable: PostgreSQL or the privacy filter (503)."""
    workspace = await access.require_workspace(datasette, request)
    recall_id = request.url_vars["recall_id"]
    to = urls.Urls(datasette)
    if request.method != "POST":
        return Response.redirect(to.recall_record(workspace, recall_id), status=303)
    principal = _signed_in(request, workspace)
    verdict = params.card_verdict(await request.post_vars())
    feedback = resources.feedback(datasette)
    # only one's own recalls take feedback here (another's is a 404 like a missing one)
    await feedback.recall(principal, workspace, recall_id, role="reader",
                          permission="memory.read", actor=principal.actor)
    try:
        await feedback.give(principal, workspace, recall_id, FeedbackRequest(cards=[verdict]),
                            via="explorer")
    except InvalidInput as exc:  # about the one card of the form: no "cards[0]: " prefix
        words = re.sub(r"^cards\[0\][.\w]*: ", "", exc.message)
        exc.message = words[:1].upper() + words[1:]
        raise
    return Response.redirect(to.recall_record(workspace, recall_id, saved=verdict.card_id),
                             status=303)


#: ``register_routes``: (regex, view); the first match wins, so the fixed ``-/`` pages come
#: before the card page.
ROUTES: list[tuple[str, Any]] = [
    (r"^/$", home_view),
    (r"^/-/memory(\.(?P<format>json|csv))?$", workspaces_view),
    (r"^/-/memory/sign-in$", sign_in.sign_in_view),
    (rf"^/-/memory/{_WS}/-/pending(\.(?P<format>json|csv))?$", pending_view),
    (rf"^/-/memory/{_WS}/-/recall$", recall_view),
    (rf"^/-/memory/{_WS}/-/recalls/(?P<recall_id>[^/.]+)$", recall_record_view),
    (rf"^/-/memory/{_WS}/-/recalls/(?P<recall_id>[^/.]+)/feedback$", feedback_view),
    (rf"^/-/memory/{_WS}/-/activity(\.(?P<format>json|csv))?$", activity_view),
    (rf"^/-/memory/{_WS}/(?P<card_id>[^/.]+)(\.(?P<format>json))?$", card_view),
    (rf"^/-/memory/{_WS}(\.(?P<format>json|csv))?$", cards_view),
]
