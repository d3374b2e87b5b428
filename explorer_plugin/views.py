"""The explorer's pages, one view each (workspaces, cards, card, pending, activity, recall); routes.

A view checks Datasette permissions (:mod:`~explorer_plugin.access`), reads its query string
(:mod:`~explorer_plugin.params`), calls :mod:`shared.archive.browsing` (or verified recall) and
answers with an export (:mod:`~explorer_plugin.export`) or a page
(:mod:`~explorer_plugin.render`, links from :mod:`~explorer_plugin.urls`). No SQL here; an
exception raised by a view becomes an error page in :mod:`~explorer_plugin.errors`.
"""

from __future__ import annotations

import functools
from typing import Any

from datasette import Response

from shared.archive import browsing as browse
from shared.auth import Principal
from shared.errors import Forbidden, IndexUnavailable, InvalidInput, Unavailable
from shared.models import (FAMILIES, FAMILY_FIELDS, MAX_PER_PAGE, MODES, ORIGINS, Card,
                           RecallResponse, SearchRequest)
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
    dependencies, links both ways and projection status."""
    workspace = await access.require_workspace(datasette, request)
    db = await resources.database(datasette)
    view = await browse.card_view(db, workspace, request.url_vars["card_id"])
    if request.url_vars.get("format") == "json":
        return export.json_response(view)
    card = view.card
    return await render.page(datasette, request, "memarc_card.html", {
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
    actor_id = (request.actor or {}).get("id") or "anonymous"
    principal = Principal(workspace=workspace, permissions=frozenset({"memory.read"}),
                          actor=f"datasette:{actor_id}")
    return await archive.search(principal, workspace, req, role="reader")


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
    retrieval paths. The form is a GET, so a search is a shareable URL; a bad search is a 400
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
    return await render.page(datasette, request, "memarc_recall.html", context, status=status)


#: ``register_routes``: (regex, view); the first match wins, so the fixed ``-/`` pages come
#: before the card page.
ROUTES: list[tuple[str, Any]] = [
    (r"^/$", home_view),
    (r"^/-/memory(\.(?P<format>json|csv))?$", workspaces_view),
    (r"^/-/memory/sign-in$", sign_in.sign_in_view),
    (rf"^/-/memory/{_WS}/-/pending(\.(?P<format>json|csv))?$", pending_view),
    (rf"^/-/memory/{_WS}/-/recall$", recall_view),
    (rf"^/-/memory/{_WS}/-/activity(\.(?P<format>json|csv))?$", activity_view),
    (rf"^/-/memory/{_WS}/(?P<card_id>[^/.]+)(\.(?P<format>json))?$", card_view),
    (rf"^/-/memory/{_WS}(\.(?P<format>json|csv))?$", cards_view),
]
