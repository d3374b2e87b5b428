"""URL building for the explorer: page paths, query strings, facet, sort, page and export links.

A list's state is a list of ``(name, value)`` URL pairs (:func:`filter_pairs`, :func:`state_pairs`);
every link of the page keeps it, changing one thing.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from shared.archive import browsing as browse
from shared.store.listing import SORT_ORDER, ListQuery

from .paging import Page, last_page, window
from .params import SINGLE_FILTERS

Pairs = list[tuple[str, Any]]


class Urls:
    """Paths of the explorer's pages, under Datasette's ``base_url`` (``fmt``: ``json`` or
    ``csv`` for an export, None for the page). Templates see it as ``memarc_urls``."""

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

    def recall_record(self, workspace: str, recall_id: str, saved: str | None = None) -> str:
        """One of this actor's recalls (``saved``: the card whose verdict was just stored)."""
        return self.path(f"/-/memory/{workspace}/-/recalls/{recall_id}"
                         + query_string([("saved", saved)] if saved else []))

    def recall_feedback(self, workspace: str, recall_id: str) -> str:
        return self.path(f"/-/memory/{workspace}/-/recalls/{recall_id}/feedback")

    def activity(self, workspace: str, fmt: str | None = None) -> str:
        return self.path(f"/-/memory/{workspace}/-/activity" + (f".{fmt}" if fmt else ""))


def crumbs(urls: Urls, depth: int, workspace: str | None) -> list[tuple[str, str]]:
    """Breadcrumbs ``(label, href)`` to a page's ancestors, as Datasette shows them: ``depth``
    1 = home, 2 = home / memory, 3 = home / memory / workspace."""
    items = [("home", urls.path("/")), ("memory", urls.home())]
    if workspace is not None:
        items.append((workspace, urls.workspace(workspace)))
    return items[:depth]


def query_string(pairs: Iterable[tuple[str, Any]]) -> str:
    """``?a=1&b=2`` of the pairs (values as ``str``), or ``""`` when there are none."""
    qs = urllib.parse.urlencode([(k, str(v)) for k, v in pairs])
    return f"?{qs}" if qs else ""


def filter_pairs(query: ListQuery, size_given: bool) -> Pairs:
    """The URL pairs of a card list's filter and sort state (``_size`` when it was given; never
    the page): the inverse of :func:`explorer_plugin.params.list_query`."""
    pairs: Pairs = []
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
        descending = SORT_ORDER[query.sort][1] if query.desc is None else query.desc
        pairs.append(("_sort_desc" if descending else "_sort", query.sort))
    if size_given:
        pairs.append(("_size", query.per_page))
    return pairs


def state_pairs(filters: Mapping[str, str | None], page: Page) -> Pairs:
    """The URL pairs of a log list's state: its filters that are set, then ``_size`` when it
    was given."""
    pairs: Pairs = [(k, v) for k, v in filters.items() if v]
    if page.size_given:
        pairs.append(("_size", page.size))
    return pairs


def _dependents(name: str) -> set[str]:
    """The filters cleared with ``name``: a database's table and column, a table's column."""
    return {"table", "column"} if name == "database" else {"column"} if name == "table" else set()


def toggle(pairs: Pairs, name: str, value: str, selected: bool) -> Pairs:
    """The pairs with a facet value switched off (``selected``) or on; a single-valued filter is
    replaced, and choosing or removing a database also clears its table and column."""
    if selected:
        dependents = _dependents(name)
        return [p for p in pairs
                if not (p[0] == name and p[1] == value) and p[0] not in dependents]
    if name in SINGLE_FILTERS:
        drop = {name} | _dependents(name)
        return [p for p in pairs if p[0] not in drop] + [(name, value)]
    return pairs + [(name, value)]


def facet_links(base: str, pairs: Pairs, query: ListQuery,
                counts: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    """Each facet ``{name, values: [{value, count, selected, toggle_url}]}``, in the order of
    ``counts`` (facet -> value -> count); ``toggle_url`` adds or removes the value."""
    facets = []
    for name, by_value in counts.items():
        selected = browse.selected_values(query, name)
        facets.append({"name": name, "values": [
            {"value": value, "count": count, "selected": value in selected,
             "toggle_url": base + query_string(toggle(pairs, name, value, value in selected))}
            for value, count in by_value.items()]})
    return facets


def sort_links(base: str, pairs: Pairs, query: ListQuery) -> list[dict[str, Any]]:
    """One link per sort key ``{key, current, descending, url}``: the current key's link
    reverses its direction, another key's sorts in its default direction."""
    others = [p for p in pairs if p[0] not in ("_sort", "_sort_desc")]
    links = []
    for key, (_, default_desc) in SORT_ORDER.items():
        current = query.sort == key
        descending = default_desc
        if current and query.desc is not None:
            descending = query.desc
        flip = not descending if current else descending
        sort = [("_sort_desc" if flip else "_sort", key)]
        links.append({"key": key, "current": current, "descending": descending,
                      "url": base + query_string(others + sort)})
    return links


def list_links(url: Callable[[str | None], str], pairs: Pairs, page: int, per_page: int,
               total: int) -> dict[str, Any]:
    """Template values of a paginated list: ``pages`` (``{number, url, current}``, or
    ``{gap: True}``), ``last_page``, ``previous_url`` / ``next_url`` (None at an end) and the
    ``json_url`` / ``csv_url`` of this page. ``url(fmt)`` is the list's URL (``fmt`` None for
    HTML); ``pairs`` are its state, kept in every link."""
    last = last_page(total, per_page)

    def page_url(n: int) -> str:
        return url(None) + query_string(pairs + ([("_page", n)] if n > 1 else []))

    this_page = query_string(pairs + ([("_page", page)] if page > 1 else []))
    return {
        "pages": [{"gap": True} if n is None else
                  {"number": n, "url": page_url(n), "current": n == page}
                  for n in window(page, last)],
        "last_page": last,
        "previous_url": page_url(page - 1) if page > 1 else None,
        "next_url": page_url(page + 1) if page < last else None,
        "json_url": url("json") + this_page,
        "csv_url": url("csv") + this_page,
    }


def every_row_csv(csv_url: str, pairs: Pairs) -> str:
    """The CSV download of every row matching ``pairs`` (no ``_size``; ``_stream`` and ``_dl``)."""
    every = [p for p in pairs if p[0] != "_size"] + [("_stream", 1), ("_dl", 1)]
    return csv_url + query_string(every)
