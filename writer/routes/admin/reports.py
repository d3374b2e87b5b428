"""The curation reports in the browser (issue 35 part 3, docs/usage.md "Curation reports"):
never recalled, unhelpful, possible conflicts and tables not seen in use, each a page that filters (text, family),
sorts and pages like the card list, with ``.json`` and ``.csv`` downloads of the page shown;
and the merge page of a conflict pair (``memory.manage``).

Merging is the person's decision, made on a page that shows both cards side by side: each
side links to its card's edit form and to the delete confirmation of the *other* card (the
existing confirmation, which names the links that go with it). The archive has no operation
that moves links from one card to another, so a merge does not re-point links: the page says
so, and the person adds the links the kept card needs on its edit form.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Response, get
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, Parameter

from shared import models
from shared.archive.cards import Archive
from shared.archive.reports import DEFAULT_SIMILARITY, REPORTS, to_csv
from shared.errors import InvalidInput, NotFound
from shared.store.listing import ListQuery
from writer.routes.admin.pages import Person, Urls, provide_archive, provide_person, render
from writer.routes.params import CardId, WorkspaceId

DEPS = {"person": Provide(provide_person), "archive": Provide(provide_archive)}
Text = Annotated[str | None, Parameter(max_length=200)]
Word = Annotated[str | None, Parameter(max_length=40)]
PER_PAGE = 50
#: each report's title, sorts (value, label) and the columns a person reads
TITLES = {"never-recalled": "Never recalled", "unhelpful": "Marked unhelpful",
          "conflicts": "Possible conflicts", "stale-dependencies": "Tables not seen in use"}
SORTS = {
    "never-recalled": [("idle", "longest without a recall"), ("created", "newest"),
                       ("title", "title"), ("family", "family")],
    "unhelpful": [("unhelpful", "most unhelpful verdicts"), ("share", "unhelpful share"),
                  ("recalls", "most recalled"), ("title", "title"), ("family", "family")],
    "conflicts": [("rank", "contradictions first"), ("similarity", "similarity"),
                  ("family", "family"), ("title", "title")],
    "stale-dependencies": [("stale", "longest unseen"), ("table", "table"),
                           ("cards", "most cards")],
}


def _number(name: str, value: str | None, kind: type, default: Any) -> Any:
    """A numeric query value of a report page (empty: ``default``).

    :raises InvalidInput: not a number (named)."""
    if value is None or value.strip() == "":
        return default
    try:
        return kind(value)
    except ValueError:
        raise InvalidInput(f"{name} must be a number, not {value!r}", field=name) from None


async def _report(person: Person, archive: Archive, workspace: str, name: str,
                  params: dict[str, Any], per_page: int) -> Any:
    """The report ``name``'s page for the page's query ``params``.

    :raises NotFound: no such report. :raises InvalidInput: a value out of bounds."""
    if params["family"] and params["family"] not in models.FAMILIES:
        raise InvalidInput(f"there is no family {params['family']!r}; the families are "
                           f"{', '.join(models.FAMILIES)}", field="family")
    query = ListQuery(q=params["q"] or None, family=[params["family"]] if params["family"] else [],
                      page=params["page"], per_page=per_page)
    reports = archive.reports
    sort = params["sort"] or SORTS[name][0][0]
    if name == "never-recalled":
        return await reports.never_recalled(person.principal, workspace, query,
                                            _number("days", params["days"], int, 30), sort)
    if name == "unhelpful":
        return await reports.unhelpful(person.principal, workspace, query,
                                       _number("days", params["days"], int, 30),
                                       _number("min_feedback", params["min_feedback"], int, 1),
                                       sort)
    if name == "stale-dependencies":
        return await reports.stale_dependencies(person.principal, workspace, query,
                                                _number("days", params["days"], int, 30), sort)
    return await reports.conflicts(
        person.principal, workspace, query,
        _number("min_similarity", params["min_similarity"], float, DEFAULT_SIMILARITY), sort)


@get("/workspaces/{workspace_id:str}/reports", dependencies=DEPS)
async def reports_home(person: NamedDependency[Person],
                       workspace_id: FromPath[WorkspaceId]) -> Response:
    """The first report (never recalled)."""
    return Response(content=None, status_code=303,
                    headers={"Location": Urls(workspace_id).report("never-recalled")})


@get("/workspaces/{workspace_id:str}/reports/merge", dependencies=DEPS)
async def merge(person: NamedDependency[Person], archive: NamedDependency[Archive],
                workspace_id: FromPath[WorkspaceId], a: FromQuery[CardId],
                b: FromQuery[CardId]) -> Response:
    """Two cards side by side (a conflict pair): each with its edit form's link and the delete
    confirmation of the other ("keep this one").

    :raises NotFound: either card is not in the workspace. :raises Forbidden: no
        ``memory.manage``."""
    person.principal.require(workspace_id, "memory.manage")
    if a == b:
        raise InvalidInput("a merge needs two different cards", field="b")
    sides = [await archive.get_card(person.principal, workspace_id, cid) for cid in (a, b)]
    return render("merge.html", person, sides=sides)


@get("/workspaces/{workspace_id:str}/reports/{name:str}", dependencies=DEPS)
async def report_page(person: NamedDependency[Person], archive: NamedDependency[Archive],
                      workspace_id: FromPath[WorkspaceId],
                      name: FromPath[Annotated[str, Parameter(max_length=40)]],
                      q: FromQuery[Text] = None, family: FromQuery[Word] = None,
                      sort: FromQuery[Word] = None,
                      page: FromQuery[Annotated[int, Parameter(ge=1, le=100_000)]] = 1,
                      days: FromQuery[Word] = None, min_feedback: FromQuery[Word] = None,
                      min_similarity: FromQuery[Word] = None) -> Response:
    """A report's page (``name``: never-recalled, unhelpful, conflicts, stale-dependencies), or
    its download with
    ``.json`` (the report's JSON page, as the API answers it) or ``.csv`` (the same rows,
    :func:`shared.archive.reports.to_csv`) after the name; the downloads carry up to 100 rows
    of the page asked for.

    :raises NotFound: no such report. :raises Forbidden: no ``memory.manage``.
    :raises InvalidInput: a value out of bounds (a 422 page naming it)."""
    base, _, suffix = name.partition(".")
    if base not in REPORTS or suffix not in ("", "json", "csv"):
        raise NotFound(f"there is no report {name!r}; the reports are {', '.join(REPORTS)}")
    params = {"q": q, "family": family, "sort": sort, "page": page, "days": days,
              "min_feedback": min_feedback, "min_similarity": min_similarity}
    if sort and sort not in dict(SORTS[base]):
        raise InvalidInput(f"unknown sort {sort!r}; allowed: "
                           f"{', '.join(dict(SORTS[base]))}", field="sort")
    result = await _report(person, archive, workspace_id, base, params,
                           models.MAX_PER_PAGE if suffix else PER_PAGE)
    if suffix == "json":
        return Response(content=result, media_type="application/json")
    if suffix == "csv":
        return Response(content=to_csv(result), media_type="text/csv; charset=utf-8", headers={
            "Content-Disposition": f'attachment; filename="{workspace_id}-{base}.csv"'})
    shown = {k: v for k, v in params.items() if k != "page"}
    return render("reports.html", person, report=base, reports=REPORTS, titles=TITLES,
                  sorts=SORTS[base], result=msgspec.to_builtins(result, builtin_types=(datetime,)), params=shown, page=page,
                  pages=max(1, -(-result.total // PER_PAGE)), families=models.FAMILIES,
                  default_similarity=DEFAULT_SIMILARITY)


HANDLERS = [reports_home, merge, report_page]
