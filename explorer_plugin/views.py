"""The explorer's pages (DESIGN §10): workspaces, card list (+ ``.json`` / ``.csv``), card detail,
pending index operations and recall.

Each view checks Datasette permissions, parses its query string, calls :mod:`shared.archive.browsing` (or
the process archive's recall) and renders. No SQL here. Archive errors raised by a view are turned
into Datasette-style error pages in one place, :func:`error_response`.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import logging
import math
import urllib.parse
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import msgspec
from datasette import Response

from shared.archive import browsing as browse
from shared.auth import Principal
from shared.errors import ArchiveError, BadRequest, Forbidden, InvalidInput, Unavailable
from shared.models import (FAMILIES, FAMILY_FIELDS, MAX_PER_PAGE, MAX_QUERY, MAX_TOP, ORIGINS, Card,
                           SearchRequest, parse_time_bound)
from shared.models import convert as convert_model
from shared.store.listing import SORTS, ListQuery

from . import access, resources

log = logging.getLogger("memarc.explorer")

MAX_PAGE = 1_000_000
DEFAULT_PER_PAGE = 20
PENDING_PER_PAGE = 100
PENDING_MAX_PER_PAGE = 1000
CSV_COLUMNS = ("id", "family", "title", "scope", "origin", "concepts", "dependencies", "revision",
               "updated_at", "index_status")
PENDING_CSV_COLUMNS = ("id", "card_id", "title", "op", "revision", "status", "attempts",
                       "age_seconds", "last_error", "created_at", "updated_at")
RECALL_MODES = ("search", "rules", "solved")

_WS = r"(?P<workspace>[^/.]+)"


# ---- small helpers ----

def _int_arg(request: Any, name: str, default: int, lo: int, hi: int) -> int:
    raw = (request.args.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be an integer, got {raw!r}", field=name) from None
    if not lo <= value <= hi:
        raise InvalidInput(f"{name} must be between {lo} and {hi}", field=name)
    return value


def _list_arg(request: Any, name: str) -> list[str]:
    """Every non-empty value of a repeated parameter, de-duplicated, in order."""
    return list(dict.fromkeys(v.strip() for v in request.args.getlist(name) if v.strip()))


def _qs(pairs: Iterable[tuple[str, Any]]) -> str:
    qs = urllib.parse.urlencode([(k, str(v)) for k, v in pairs])
    return f"?{qs}" if qs else ""


def _fmt_time(value: Any) -> str:
    """ISO 8601 in UTC, to the second (the archive's timestamps are UTC)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
        return value.isoformat(timespec="seconds")
    return "" if value is None else str(value)


def _fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


class _Urls:
    """URLs of the explorer's pages, under Datasette's ``base_url``."""

    def __init__(self, datasette: Any) -> None:
        self._ds = datasette

    def path(self, path: str) -> str:
        return str(self._ds.urls.path(path))

    def home(self) -> str:
        return self.path("/-/memory")

    def workspace(self, workspace: str, fmt: str | None = None) -> str:
        return self.path(f"/-/memory/{workspace}" + (f".{fmt}" if fmt else ""))

    def card(self, workspace: str, card_id: str, fmt: str | None = None) -> str:
        return self.path(f"/-/memory/{workspace}/{card_id}" + (f".{fmt}" if fmt else ""))

    def pending(self, workspace: str, fmt: str | None = None) -> str:
        return self.path(f"/-/memory/{workspace}/-/pending" + (f".{fmt}" if fmt else ""))

    def recall(self, workspace: str) -> str:
        return self.path(f"/-/memory/{workspace}/-/recall")

    def activity(self, workspace: str, fmt: str | None = None) -> str:
        return self.path(f"/-/memory/{workspace}/-/activity" + (f".{fmt}" if fmt else ""))


def _crumbs(urls: _Urls, depth: int, workspace: str | None) -> list[tuple[str, str]]:
    """Breadcrumbs to the page's ancestors, as Datasette shows them: ``depth`` 1 = home,
    2 = home / memory, 3 = home / memory / workspace."""
    items = [("home", urls.path("/")), ("memory", urls.home())]
    if workspace is not None:
        items.append((workspace, urls.workspace(workspace)))
    return items[:depth]


async def _render(datasette: Any, request: Any, template: str, context: dict[str, Any],
                  status: int = 200, depth: int = 3) -> Response:
    urls = _Urls(datasette)
    base = {"memarc_urls": urls, "fmt_time": _fmt_time, "fmt_age": _fmt_age,
            "crumbs_items": _crumbs(urls, depth, context.get("workspace"))}
    html = await datasette.render_template(template, {**base, **context}, request=request,
                                           view_name=template.removesuffix(".html"))
    return Response.html(html, status=status)


def _json(payload: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(payload), status=status,
                    content_type="application/json; charset=utf-8")


def _list_json(request: Any, payload: dict[str, Any], key: str) -> Response:
    """A list's JSON: the whole ``payload``, or with Datasette's ``_shape=array`` only the list
    under ``key``.

    :raises InvalidInput: another ``_shape``.
    """
    shape = (request.args.get("_shape") or "").strip()
    if shape == "array":
        return _json(payload[key])
    if shape and shape != "objects":
        raise InvalidInput("_shape must be objects (the default) or array", field="_shape")
    return _json(payload)


def _csv_cell(value: Any) -> Any:
    """A CSV cell: JSON for structured values (as Datasette shows JSON columns), ISO 8601 for
    timestamps, the value itself otherwise."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _csv(request: Any, filename: str, header: Iterable[str], rows: Iterable[Iterable[Any]]) -> Response:
    """CSV as Datasette serves it: shown in the browser, or downloaded with ``_dl``."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows([_csv_cell(v) for v in row] for row in rows)
    if request.args.get("_dl"):
        return Response(buf.getvalue(), content_type="text/csv; charset=utf-8",
                        headers={"content-disposition": f'attachment; filename="{filename}"'})
    return Response(buf.getvalue(), content_type="text/plain; charset=utf-8")


def _pagination(current: int, last: int, url: Callable[[int], str]) -> list[dict[str, Any]]:
    """Page links: first, last, and two on each side of the current page, with gaps."""
    wanted = sorted({1, last, *range(max(1, current - 2), min(last, current + 2) + 1)})
    items: list[dict[str, Any]] = []
    previous = 0
    for n in wanted:
        if n - previous > 1:
            items.append({"gap": True})
        items.append({"number": n, "url": url(n), "current": n == current})
        previous = n
    return items


def _page_args(request: Any, default: int = PENDING_PER_PAGE, most: int = PENDING_MAX_PER_PAGE
               ) -> tuple[int, int, bool]:
    """``(page, per_page, whether _size was given)`` from ``_page`` and ``_size``.

    :raises InvalidInput: not integers, or out of bounds.
    """
    size_given = bool((request.args.get("_size") or "").strip())
    return (_int_arg(request, "_page", 1, 1, MAX_PAGE),
            _int_arg(request, "_size", default, 1, most), size_given)


def _export(request: Any, workspace: str, key: str, rows: list[dict[str, Any]], total: int,
            page: int, per_page: int, columns: Iterable[str],
            csv_row: Callable[[dict[str, Any]], Iterable[Any]], page_name: str) -> Response | None:
    """The ``.json`` (``{workspace, total, page, per_page, <key>: rows}``) or ``.csv`` answer of
    a workspace list page (CSV file ``<workspace>-<page_name>.csv``), or None for HTML."""
    fmt = request.url_vars.get("format")
    if fmt == "json":
        return _list_json(request, {"workspace": workspace, "total": total, "page": page,
                                    "per_page": per_page, key: rows}, key)
    if fmt == "csv":
        return _csv(request, f"{workspace}-{page_name}.csv", columns, (csv_row(r) for r in rows))
    return None


def _paging(url: Callable[[str | None], str], pairs: list[tuple[str, Any]], page: int,
            per_page: int, total: int) -> dict[str, Any]:
    """Template values of a paginated list: page links, last page, previous / next, and the
    ``.json`` / ``.csv`` URLs of this page. ``url(fmt)`` is the list's URL (``fmt`` None for
    HTML); ``pairs`` are its filter state, kept in every link."""
    last_page = max(1, math.ceil(total / per_page))

    def page_url(n: int) -> str:
        return url(None) + _qs(pairs + ([("_page", n)] if n > 1 else []))

    page_qs = _qs(pairs + ([("_page", page)] if page > 1 else []))
    return {
        "pages": _pagination(page, last_page, page_url),
        "last_page": last_page,
        "previous_url": page_url(page - 1) if page > 1 else None,
        "next_url": page_url(page + 1) if page < last_page else None,
        "json_url": url("json") + page_qs,
        "csv_url": url("csv") + page_qs,
    }


# ---- errors ----

_TITLES = {400: "Invalid request", 403: "Forbidden", 404: "Not found", 409: "Conflict",
           503: "Service unavailable"}


def error_status(exc: ArchiveError) -> int:
    """HTTP status of an archive error in the explorer: a bad query string is a 400 here (there
    is no request body to be unprocessable), otherwise the error's own status."""
    if isinstance(exc, (InvalidInput, BadRequest)):
        return 400
    return exc.status


async def error_response(datasette: Any, request: Any, exc: ArchiveError) -> Response:
    """A Datasette-style error page (JSON for ``.json`` URLs) for an archive error."""
    status = error_status(exc)
    title = _TITLES.get(status)
    if request.path.split("?")[0].endswith(".json"):
        return _json({"ok": False, "error": exc.message, "status": status, "title": title,
                      "code": exc.code}, status=status)
    return await _render(datasette, request, "memarc_error.html",
                         {"error": exc.message, "status": status, "title": title}, status=status,
                         depth=2)


async def http_error_response(datasette: Any, request: Any, exc: Any) -> Response:
    """The same error page for Datasette's own 4xx exceptions (``Base400``: not found,
    forbidden, bad request), without a logged traceback."""
    status = getattr(exc, "status", 400)
    message = str(exc.args[0]) if exc.args else _TITLES.get(status, "Error")
    if request.path.split("?")[0].endswith(".json"):
        return _json({"ok": False, "error": message, "status": status,
                      "title": _TITLES.get(status)}, status=status)
    return await _render(datasette, request, "memarc_error.html",
                         {"error": message, "status": status, "title": _TITLES.get(status)},
                         status=status, depth=2)


async def internal_error_response(datasette: Any, request: Any, exc: BaseException) -> Response:
    """A 500 page for an unexpected error; the traceback goes to the log once."""
    log.error("explorer error on %s", request.path, exc_info=exc)
    if request.path.split("?")[0].endswith(".json"):
        return _json({"ok": False, "error": "internal error", "status": 500}, status=500)
    return await _render(datasette, request, "memarc_error.html",
                         {"error": "The explorer could not complete this request.", "status": 500,
                          "title": "Internal error"}, status=500, depth=2)


async def home_view(datasette: Any, request: Any) -> Response:
    """``/``: the archive is this instance's home page; redirect to the workspace list."""
    return Response.redirect(datasette.urls.path("/-/memory"))


# ---- pages ----

WORKSPACE_CSV_COLUMNS = ("id", "language", "cards", "current", "open_operations", "created_at")


async def workspaces_view(datasette: Any, request: Any) -> Response:
    """``/-/memory`` (and ``.json`` / ``.csv``): the workspaces this actor may see, with card
    counts, projected cards and open index operations."""
    await access.require_instance(datasette, request)
    db = await resources.database(datasette)
    rows = [row for row in await browse.workspaces(db)
            if await access.can_view(datasette, request.actor, row["id"])]
    workspaces = []
    for row in rows:
        counts = await browse.workspace_overview(db, row["id"])
        workspaces.append({**row, **counts})
    fmt = request.url_vars.get("format")
    if fmt == "json":
        return _list_json(request, {"workspaces": workspaces}, "workspaces")
    if fmt == "csv":
        return _csv(request, "workspaces.csv", WORKSPACE_CSV_COLUMNS,
                    ([_fmt_time(w[c]) if c == "created_at" else w[c] for c in WORKSPACE_CSV_COLUMNS]
                     for w in workspaces))
    return await _render(datasette, request, "memarc_workspaces.html", {"workspaces": workspaces},
                         depth=1)


SINGLE_FILTERS = ("database", "schema", "table", "column")


def _date_arg(request: Any, name: str) -> datetime | None:
    return parse_time_bound(name, request.args.get(name))


def _list_query(request: Any) -> tuple[ListQuery, bool]:
    """A listing's query from Datasette-style URL parameters: ``q``, repeatable ``family``,
    ``origin`` and ``concepts``, ``database`` / ``schema`` / ``table`` / ``column``,
    ``updated_after`` / ``updated_before`` (dates), ``_sort`` or ``_sort_desc`` (updated,
    created, title, family), ``_page``, ``_size``."""
    known = {"q", "family", "origin", "concepts", "updated_after", "updated_before", *SINGLE_FILTERS}
    unknown = sorted({name for name in request.args if name not in known and not name.startswith("_")})
    if unknown:  # a misspelt filter must not silently show everything (as the API refuses it)
        raise InvalidInput(f"unknown parameter(s) {', '.join(unknown)}; the card list takes "
                           f"{', '.join(sorted(known))} and Datasette's _ options", field=unknown[0])
    q = (request.args.get("q") or "").strip()
    if len(q) > MAX_QUERY:
        raise InvalidInput(f"q is longer than {MAX_QUERY} characters", field="q")
    size_given = bool((request.args.get("_size") or "").strip())
    sort, desc = "updated", None
    if request.args.get("_sort_desc"):
        sort, desc = request.args.get("_sort_desc"), True
    elif request.args.get("_sort"):
        sort, desc = request.args.get("_sort"), False
    if sort not in SORTS:
        raise InvalidInput(f"_sort must be one of {', '.join(SORTS)}", field="_sort")
    singles = {name: (request.args.get(name) or "").strip() or None for name in SINGLE_FILTERS}
    query = ListQuery(
        q=q or None,
        family=_list_arg(request, "family"),
        origin=_list_arg(request, "origin"),
        concepts=_list_arg(request, "concepts"),
        updated_after=_date_arg(request, "updated_after"),
        updated_before=_date_arg(request, "updated_before"),
        sort=sort, desc=desc,
        page=_int_arg(request, "_page", 1, 1, MAX_PAGE),
        per_page=_int_arg(request, "_size", DEFAULT_PER_PAGE, 1, MAX_PER_PAGE),
        **singles,
    )
    return query, size_given


def _filter_pairs(query: ListQuery, size_given: bool) -> list[tuple[str, Any]]:
    """The URL parameters of a listing's filter and sort state (without the page)."""
    pairs: list[tuple[str, Any]] = []
    if query.q:
        pairs.append(("q", query.q))
    pairs += [("family", f) for f in query.family]
    pairs += [("origin", o) for o in query.origin]
    pairs += [("concepts", c) for c in query.concepts]
    pairs += [(name, getattr(query, name)) for name in SINGLE_FILTERS if getattr(query, name)]
    for name in ("updated_after", "updated_before"):
        value = getattr(query, name)
        if value is not None:
            pairs.append((name, value.isoformat()))
    if query.sort != "updated" or query.desc is False:
        descending = SORTS[query.sort][1] if query.desc is None else query.desc
        pairs.append(("_sort_desc" if descending else "_sort", query.sort))
    if size_given:
        pairs.append(("_size", query.per_page))
    return pairs


def _toggle(pairs: list[tuple[str, Any]], name: str, value: str, selected: bool
            ) -> list[tuple[str, Any]]:
    """URL pairs with a facet value switched on or off; single-valued filters are replaced
    (choosing another database also clears its table and column)."""
    if selected:
        drop = {name} | ({"table", "column"} if name == "database" else set()) | (
            {"column"} if name == "table" else set())
        return [p for p in pairs if not (p[0] == name and p[1] == value) and
                not (p[0] in drop - {name})]
    if name in SINGLE_FILTERS:
        drop = {name} | ({"table", "column"} if name == "database" else set()) | (
            {"column"} if name == "table" else set())
        return [p for p in pairs if p[0] not in drop] + [(name, value)]
    return pairs + [(name, value)]


def _card_csv_row(card: Card) -> list[Any]:
    return [card.id, card.family, card.title, card.scope or "", card.origin,
            "; ".join(card.concepts), "; ".join(d.qualified() for d in card.dependencies),
            card.revision, _fmt_time(card.updated_at), card.index_status]


async def cards_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}`` (and ``.json`` / ``.csv``): a filtered, paginated card list
    with facet counts (HTML) and page numbers.

    Parameters (see :func:`_list_query`): ``q`` (text, or a ``mem-`` id); ``family``, ``origin``
    and ``concepts`` (repeatable; concepts all of); ``database`` / ``schema`` / ``table`` /
    ``column`` (one dependency entry); ``updated_after`` / ``updated_before``; ``_sort`` /
    ``_sort_desc``; ``_page``; ``_size`` (1..100, default 20). CSV also takes ``_stream=1`` (every
    matching card) and ``_dl=1`` (download). Bad values answer 400.
    """
    workspace = await access.require_workspace(datasette, request)
    fmt = request.url_vars.get("format")
    query, size_given = _list_query(request)
    db = await resources.database(datasette)
    urls = _Urls(datasette)
    if fmt == "json":
        cards, total = await browse.list_cards(db, workspace, query)
        return _list_json(request, {"workspace": workspace, "total": total, "page": query.page,
                                    "per_page": query.per_page, "cards": cards}, "cards")
    if fmt == "csv":
        if request.args.get("_stream"):
            cards = []
            page = msgspec.structs.replace(query, page=1, per_page=MAX_PER_PAGE)
            while True:
                chunk, total = await browse.list_cards(db, workspace, page)
                cards.extend(chunk)
                if not chunk or page.page * page.per_page >= total:
                    break
                page = msgspec.structs.replace(page, page=page.page + 1)
        else:
            cards, _ = await browse.list_cards(db, workspace, query)
        return _csv(request, f"{workspace}.csv", CSV_COLUMNS, (_card_csv_row(c) for c in cards))

    result = await browse.list_page(db, workspace, query)
    pairs = _filter_pairs(query, size_given)
    base = urls.workspace(workspace)
    facets = []
    for name, counts in result.facets.items():
        selected = browse.selected_values(query, name)
        values = []
        for value, count in counts.items():
            is_selected = value in selected
            values.append({"value": value, "count": count, "selected": is_selected,
                           "toggle_url": base + _qs(_toggle(pairs, name, value, is_selected))})
        facets.append({"name": name, "values": values})
    sort_links = []
    for key in SORTS:
        default_desc = SORTS[key][1]
        current = query.sort == key
        descending = (default_desc if query.desc is None else query.desc) if current else default_desc
        flip = not descending if current else descending
        others = [p for p in pairs if p[0] not in ("_sort", "_sort_desc")]
        sort_links.append({"key": key, "current": current, "descending": descending,
                           "url": base + _qs(others + [("_sort_desc" if flip else "_sort", key)])})
    return await _render(datasette, request, "memarc_cards.html", {
        "workspace": workspace,
        "query": query,
        "cards": result.cards,
        "total": result.total,
        "facets": facets,
        "families": FAMILIES,
        "origins": ORIGINS,
        "size_given": size_given,
        "sort_links": sort_links,
        "filtered": any(p[0] not in ("_size", "_sort", "_sort_desc") for p in pairs),
        "first_row": (query.page - 1) * query.per_page + 1,
        **_paging(functools.partial(urls.workspace, workspace), pairs, query.page, query.per_page,
                  result.total),
        "csv_all_url": urls.workspace(workspace, "csv") + _qs(
            [p for p in pairs if p[0] != "_size"] + [("_stream", 1), ("_dl", 1)]),
    }, depth=2)


async def card_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}/{card_id}`` (and ``.json``): a card with its content,
    dependencies, links both ways and projection status."""
    workspace = await access.require_workspace(datasette, request)
    db = await resources.database(datasette)
    view = await browse.card_view(db, workspace, request.url_vars["card_id"])
    if request.url_vars.get("format") == "json":
        return _json(view)
    card = view.card
    required, optional = FAMILY_FIELDS[card.family]
    ordered = [f for f in required + optional if f in card.content]
    ordered += sorted(f for f in card.content if f not in ordered)
    return await _render(datasette, request, "memarc_card.html", {
        "workspace": workspace,
        "card": card,
        "content": [(name, card.content[name]) for name in ordered],
        # (card id, title, meaning) both ways
        "outgoing": [(link.target, view.link_titles.get(link.target) or link.target, link.meaning)
                     for link in card.links],
        "incoming": [(link.source, link.title, link.meaning) for link in view.incoming_links],
        "operations": view.open_operations,
        "json_url": _Urls(datasette).card(workspace, card.id, "json"),
    })


def _pending_csv_row(row: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for column in PENDING_CSV_COLUMNS:
        value = row.get(column)
        if column == "age_seconds" and value is not None:
            value = int(value)
        out.append(_fmt_time(value) if isinstance(value, datetime) else
                   ("" if value is None else value))
    return out


async def pending_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}/-/pending`` (and ``.json`` / ``.csv``): incomplete projection
    operations, oldest first, with age, attempts and last error."""
    workspace = await access.require_workspace(datasette, request)
    page, per_page, size_given = _page_args(request)
    db = await resources.database(datasette)
    rows, total = await browse.pending(db, workspace, limit=per_page, offset=(page - 1) * per_page)
    export = _export(request, workspace, "operations", rows, total, page, per_page,
                     PENDING_CSV_COLUMNS, _pending_csv_row, "pending")
    if export is not None:
        return export
    pairs: list[tuple[str, Any]] = [("_size", per_page)] if size_given else []
    return await _render(datasette, request, "memarc_pending.html", {
        "workspace": workspace,
        "operations": rows,
        "total": total,
        **_paging(functools.partial(_Urls(datasette).pending, workspace), pairs, page, per_page,
                  total),
    })


ACTIVITY_CSV_COLUMNS = ("id", "at", "actor", "verb", "card_id", "outcome", "detail")


async def activity_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}/-/activity`` (and ``.json`` / ``.csv``): the activity log, newest
    first, filterable by ``verb``, ``card_id`` and ``outcome`` (prefix, e.g. ``rejected``)."""
    workspace = await access.require_workspace(datasette, request)
    page, per_page, size_given = _page_args(request)
    filters = {name: (request.args.get(name) or "").strip() or None
               for name in ("verb", "card_id", "outcome")}
    db = await resources.database(datasette)
    rows, total = await browse.activity(db, workspace, limit=per_page,
                                        offset=(page - 1) * per_page, **filters)
    export = _export(request, workspace, "activity", rows, total, page, per_page,
                     ACTIVITY_CSV_COLUMNS, lambda r: [r.get(c) if c != "at" else _fmt_time(r["at"])
                                                      for c in ACTIVITY_CSV_COLUMNS],
                     "activity")
    if export is not None:
        return export
    pairs: list[tuple[str, Any]] = [(k, v) for k, v in filters.items() if v]
    if size_given:
        pairs.append(("_size", per_page))
    return await _render(datasette, request, "memarc_activity.html", {
        "workspace": workspace, "activity": rows, "total": total, "filters": filters,
        **_paging(functools.partial(_Urls(datasette).activity, workspace), pairs, page, per_page,
                  total),
    })


def _concepts(request: Any) -> list[str]:
    """Concept filters: ``concept`` repeated, each value possibly a comma-separated list."""
    values = (c.strip() for v in request.args.getlist("concept") for c in v.split(","))
    return list(dict.fromkeys(c for c in values if c))


def _search_request(request: Any, query: str) -> SearchRequest:
    """The recall request of the form's parameters.

    :raises InvalidInput: a value out of bounds or unknown (mode, family, top, filters).
    """
    filters: dict[str, Any] = {}
    for name in ("scope", "database", "schema", "table", "column"):
        value = (request.args.get(name) or "").strip()
        if value:
            filters[name] = value
    concepts = _concepts(request)
    if concepts:
        filters["concepts"] = concepts
    body: dict[str, Any] = {
        "query": query,
        "top": _int_arg(request, "top", 10, 1, MAX_TOP),
        "mode": (request.args.get("mode") or "search").strip(),
    }
    families = _list_arg(request, "family")
    if families:
        body["family"] = families
    if filters:
        body["filters"] = filters
    return convert_model(body, SearchRequest)


async def recall_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/{workspace}/-/recall``: the verified recall of the archive, with scores and
    retrieval paths. The form is a GET, so a search is a shareable URL."""
    workspace = await access.require_workspace(datasette, request)
    query = (request.args.get("q") or "").strip()
    form = {
        "q": query,
        "mode": (request.args.get("mode") or "search").strip(),
        "top": (request.args.get("top") or "10").strip(),
        "family": _list_arg(request, "family"),
        "scope": (request.args.get("scope") or "").strip(),
        "concept": ", ".join(_concepts(request)),
        **{k: (request.args.get(k) or "").strip() for k in ("database", "schema", "table", "column")},
    }
    archive = resources.search_archive(datasette)
    context: dict[str, Any] = {
        "workspace": workspace, "form": form, "modes": RECALL_MODES,
        "families": FAMILIES,
        "index_available": archive is not None, "index_message": resources.INDEX_NOT_AVAILABLE,
        "response": None, "error": None,
    }
    status = 200
    if query and archive is None:
        context["error"], status = resources.INDEX_NOT_AVAILABLE, 503
    elif query and archive is not None:
        try:
            req = _search_request(request, query)
            actor_id = (request.actor or {}).get("id") or "anonymous"
            principal = Principal(workspace=workspace, permissions=frozenset({"memory.read"}),
                                  actor=f"datasette:{actor_id}")
            context["response"] = await archive.search(principal, workspace, req, role="reader")
        except (InvalidInput, Forbidden, Unavailable) as exc:
            # shown with the form, so the search can be corrected (like Datasette's SQL errors)
            context["error"] = exc.message
            status = 503 if isinstance(exc, Unavailable) else 400
    response = context["response"]
    if response is not None:
        titles = {r.card.id: r.card.title for r in response.results}
        context["results"] = [{
            "rank": rank,
            "card": r.card,
            "score": f"{r.score:.6f}",
            "path": [{"id": cid, "title": titles.get(cid)} for cid in r.retrieval.path],
            "retrieval": r.retrieval,
        } for rank, r in enumerate(response.results, start=1)]
    return await _render(datasette, request, "memarc_recall.html", context, status=status)


#: ``register_routes``: (regex, view); the first match wins, so the fixed ``-/`` pages come
#: before the card page.
ROUTES: list[tuple[str, Any]] = [
    (r"^/$", home_view),
    (r"^/-/memory(\.(?P<format>json|csv))?$", workspaces_view),
    (rf"^/-/memory/{_WS}/-/pending(\.(?P<format>json|csv))?$", pending_view),
    (rf"^/-/memory/{_WS}/-/recall$", recall_view),
    (rf"^/-/memory/{_WS}/-/activity(\.(?P<format>json|csv))?$", activity_view),
    (rf"^/-/memory/{_WS}/(?P<card_id>[^/.]+)(\.(?P<format>json))?$", card_view),
    (rf"^/-/memory/{_WS}(\.(?P<format>json|csv))?$", cards_view),
]
