"""Reading the explorer's query strings (filters, _sort, _page, _size, recall form; unknown
refused) and its one posted form (a verdict on a recall's card).

Every reader raises :class:`~shared.errors.InvalidInput` (a 400 page) on a bad value, naming the
parameter; nothing here touches the database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from shared.errors import InvalidInput
from shared.models import (MAX_QUERY, MAX_TOP, SORTS, CardVerdict, SearchRequest,
                           parse_time_bound)
from shared.models import convert as convert_model
from shared.store.listing import ListQuery

from .paging import CARD_PAGE, MAX_PAGE, Page, Size

#: Single-valued dependency filters of the card list, outermost first.
SINGLE_FILTERS = ("database", "schema", "table", "column")
#: The card list's own parameters (Datasette's ``_`` options come on top).
LIST_PARAMETERS = frozenset({"q", "family", "origin", "concepts", "updated_after",
                             "updated_before", *SINGLE_FILTERS})
#: Old names of filters, still accepted but neither shown nor documented: old -> the one name
#: the API, the explorer, the CLI and MCP share (tests/test_filter_names.py).
ALIASES = {"concept": "concepts"}
#: Filters of the activity log (``outcome`` is a prefix).
ACTIVITY_FILTERS = ("verb", "card_id", "outcome")
#: Text filters of the recall form, besides ``concepts``.
RECALL_FILTERS = ("scope", *SINGLE_FILTERS)


def text(request: Any, name: str, default: str = "") -> str:
    """The parameter's value, stripped (``default`` when absent or empty)."""
    return (request.args.get(name) or default).strip()


def integer(request: Any, name: str, default: int, lo: int, hi: int) -> int:
    """An integer parameter in ``lo..hi`` (``default`` when absent or blank).

    :raises InvalidInput: not an integer, or out of bounds.
    """
    raw = text(request, name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be an integer, got {raw!r}", field=name) from None
    if not lo <= value <= hi:
        raise InvalidInput(f"{name} must be between {lo} and {hi}", field=name)
    return value


def _given(request: Any, name: str) -> list[str]:
    """The raw values of ``name`` and of its old names (:data:`ALIASES`), in that order."""
    names = [name, *(old for old, new in ALIASES.items() if new == name)]
    return [v for n in names for v in request.args.getlist(n)]


def values(request: Any, name: str) -> list[str]:
    """Every non-empty value of a repeated parameter (or of its old name), stripped,
    de-duplicated, in order."""
    return list(dict.fromkeys(v.strip() for v in _given(request, name) if v.strip()))


def _size_given(request: Any) -> bool:
    return bool(text(request, "_size"))


def page(request: Any, size: Size) -> Page:
    """The page in view from ``_page`` (1..:data:`~explorer_plugin.paging.MAX_PAGE`, default 1)
    and ``_size`` (1..``size.most``, default ``size.default``).

    :raises InvalidInput: not integers, or out of bounds.
    """
    size_given = _size_given(request)
    return Page(integer(request, "_page", 1, 1, MAX_PAGE),
                integer(request, "_size", size.default, 1, size.most), size_given)


def _date(request: Any, name: str) -> datetime | None:
    return parse_time_bound(name, request.args.get(name))


def list_query(request: Any) -> tuple[ListQuery, bool]:
    """``(query, whether _size was given)`` of the card list from Datasette-style parameters:
    ``q`` (text, or a ``mem-`` id, at most :data:`~shared.models.MAX_QUERY` characters);
    repeatable ``family``, ``origin`` and ``concepts``; ``database`` / ``schema`` / ``table`` /
    ``column``; ``updated_after`` / ``updated_before`` (dates); ``_sort`` or ``_sort_desc``
    (updated, created, title, family); ``_page``; ``_size`` (1..100, default 20).

    :raises InvalidInput: an unknown parameter (a misspelt filter must not silently show every
        card, as the API refuses it too), or a bad value.
    """
    unknown = sorted({name for name in request.args if name not in LIST_PARAMETERS
                      and name not in ALIASES and not name.startswith("_")})
    if unknown:
        raise InvalidInput(f"unknown parameter(s) {', '.join(unknown)}; the card list takes "
                           f"{', '.join(sorted(LIST_PARAMETERS))} and Datasette's _ options",
                           field=unknown[0])
    q = text(request, "q")
    if len(q) > MAX_QUERY:
        raise InvalidInput(f"q is longer than {MAX_QUERY} characters", field="q")
    sort, desc = "updated", None
    if request.args.get("_sort_desc"):
        sort, desc = request.args.get("_sort_desc"), True
    elif request.args.get("_sort"):
        sort, desc = request.args.get("_sort"), False
    if sort not in SORTS:
        raise InvalidInput(f"_sort must be one of {', '.join(SORTS)}", field="_sort")
    singles = {name: text(request, name) or None for name in SINGLE_FILTERS}
    updated_after = _date(request, "updated_after")
    updated_before = _date(request, "updated_before")
    shown = page(request, CARD_PAGE)
    query = ListQuery(
        q=q or None,
        family=values(request, "family"),
        origin=values(request, "origin"),
        concepts=values(request, "concepts"),
        updated_after=updated_after,
        updated_before=updated_before,
        sort=sort, desc=desc,
        page=shown.number,
        per_page=shown.size,
        **singles,
    )
    return query, shown.size_given


def activity_filters(request: Any) -> dict[str, str | None]:
    """``verb``, ``card_id`` and ``outcome`` of the activity log, None when not given."""
    return {name: text(request, name) or None for name in ACTIVITY_FILTERS}


def concepts(request: Any) -> list[str]:
    """The recall form's concept filters: ``concepts`` (or its old name ``concept``) repeated,
    each value possibly a comma-separated list (the card list takes one concept a value)."""
    found = (c.strip() for v in _given(request, "concepts") for c in v.split(","))
    return list(dict.fromkeys(c for c in found if c))


def recall_form(request: Any) -> dict[str, Any]:
    """The recall form's values as typed, to show them again: ``q``, ``mode`` (default
    ``search``), ``top`` (default ``"10"``, unchecked), ``family`` (list), ``scope``,
    ``concepts`` (comma-separated) and the four dependency levels."""
    return {
        "q": text(request, "q"),
        "mode": text(request, "mode", "search"),
        "top": text(request, "top", "10"),
        "family": values(request, "family"),
        "scope": text(request, "scope"),
        "concepts": ", ".join(concepts(request)),
        **{name: text(request, name) for name in SINGLE_FILTERS},
    }


def search_request(request: Any, query: str) -> SearchRequest:
    """The recall request of the form's parameters for ``query``.

    :raises InvalidInput: a value out of bounds or unknown (mode, family, top, filters).
    """
    filters: dict[str, Any] = {}
    for name in RECALL_FILTERS:
        value = text(request, name)
        if value:
            filters[name] = value
    wanted = concepts(request)
    if wanted:
        filters["concepts"] = wanted
    body: dict[str, Any] = {
        "query": query,
        "top": integer(request, "top", 10, 1, MAX_TOP),
        "mode": text(request, "mode", "search"),
    }
    families = values(request, "family")
    if families:
        body["family"] = families
    if filters:
        body["filters"] = filters
    return convert_model(body, SearchRequest)


#: the verdicts as the feedback buttons name them
VERDICT_LABELS = {"helpful": "Helpful", "not_helpful": "Not helpful", "wrong": "Wrong"}


def card_verdict(form: dict[str, str]) -> CardVerdict:
    """The verdict of a feedback form (``card_id``, ``verdict`` from the button pressed,
    ``note`` optional; an empty note is none).

    :raises InvalidInput: no button pressed, a verdict not one of the three, a note longer than
        :data:`~shared.models.MAX_FEEDBACK_NOTE` characters, no card id."""
    verdict = (form.get("verdict") or "").strip()
    if not verdict:
        raise InvalidInput("Choose a verdict: press Helpful, Not helpful or Wrong.",
                           field="verdict")
    note = (form.get("note") or "").strip()
    return convert_model({"card_id": (form.get("card_id") or "").strip(), "verdict": verdict,
                          "note": note or None}, CardVerdict)
