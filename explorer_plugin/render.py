"""HTML pages: an explorer template rendered with the URLs, breadcrumbs and formats all share."""

from __future__ import annotations

from typing import Any

from datasette import Response

from . import config
from .export import iso_time
from .params import VERDICT_LABELS
from .urls import Urls, crumbs


def fmt_age(seconds: float | None) -> str:
    """An age for people: ``42 s``, ``3 min 5 s``, ``2 h 10 min``, ``4 d 1 h`` (``""`` for None)."""
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


async def page(datasette: Any, request: Any, template: str, context: dict[str, Any],
               status: int = 200, depth: int = 3) -> Response:
    """``template`` rendered by Datasette (its base template, menu and actor) with ``context``
    and the shared values ``memarc_urls`` (:class:`~explorer_plugin.urls.Urls`), ``fmt_time``
    (ISO 8601, UTC), ``fmt_age``, ``verdict_labels`` (verdict -> its button's label) and ``crumbs_items`` (breadcrumbs ``depth`` deep, see
    :func:`~explorer_plugin.urls.crumbs`; the workspace crumb from ``context["workspace"]``)."""
    urls = Urls(datasette)
    base = {"memarc_urls": urls, "fmt_time": iso_time, "fmt_age": fmt_age,
            "verdict_labels": VERDICT_LABELS,
            "memarc_admin_url": config.load(datasette).admin_url,
            "crumbs_items": crumbs(urls, depth, context.get("workspace"))}
    html = await datasette.render_template(template, {**base, **context}, request=request,
                                           view_name=template.removesuffix(".html"))
    return Response.html(html, status=status)
