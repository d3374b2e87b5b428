"""Paging of the explorer's lists: page sizes, the page in view, page-number windows, all pages.

URLs of the pages are built by :mod:`explorer_plugin.urls`; ``_page`` / ``_size`` are read by
:mod:`explorer_plugin.params`.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import msgspec

from shared.models import MAX_PER_PAGE

#: The highest ``_page`` accepted.
MAX_PAGE = 1_000_000


class Size(NamedTuple):
    """Rows per page of a list: the default, and the most ``_size`` may ask for."""

    default: int
    most: int


#: The card list: 20 cards a page, at most :data:`shared.models.MAX_PER_PAGE`.
CARD_PAGE = Size(20, MAX_PER_PAGE)
#: Pending operations and the activity log: 100 rows a page, at most 1000.
LOG_PAGE = Size(100, 1000)


class Page(NamedTuple):
    """The page in view: ``number`` (1-based), ``size`` (rows per page) and whether ``_size`` was
    in the URL (links then keep it)."""

    number: int
    size: int
    size_given: bool

    @property
    def offset(self) -> int:
        """Rows before this page."""
        return (self.number - 1) * self.size


def first_row(page: int, per_page: int) -> int:
    """The 1-based position of the first row of ``page``."""
    return (page - 1) * per_page + 1


def last_page(total: int, per_page: int) -> int:
    """The number of the last page of ``total`` rows (1 when there are none)."""
    return max(1, math.ceil(total / per_page))


def window(current: int, last: int) -> list[int | None]:
    """The page numbers a list links to: the first, the last, and two on each side of
    ``current``, in order, with ``None`` where numbers are left out."""
    wanted = sorted({1, last, *range(max(1, current - 2), min(last, current + 2) + 1)})
    numbers: list[int | None] = []
    previous = 0
    for n in wanted:
        if n - previous > 1:
            numbers.append(None)
        numbers.append(n)
        previous = n
    return numbers


async def every_page(fetch: Callable[[Any], Awaitable[tuple[list[Any], int]]], query: Any,
                     per_page: int) -> list[Any]:
    """Every row of a paged listing: ``fetch(query)`` -> ``(rows, total)`` is called for pages
    1, 2, ... of ``per_page`` rows (``query`` is a Struct with ``page`` and ``per_page``) until
    the total is reached or a page comes back empty."""
    rows: list[Any] = []
    page = msgspec.structs.replace(query, page=1, per_page=per_page)
    while True:
        chunk, total = await fetch(page)
        rows.extend(chunk)
        if not chunk or page.page * page.per_page >= total:
            return rows
        page = msgspec.structs.replace(page, page=page.page + 1)
