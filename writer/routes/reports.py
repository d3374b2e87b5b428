"""The curation reports over HTTP (issue 35 part 3, docs/usage.md "Curation reports"):
``GET /api/workspaces/{w}/memory/reports/{never-recalled | unhelpful | conflicts |
stale-dependencies}``
(``memory.manage``), each a JSON page; the administration serves the same reports as pages
with ``.json`` and ``.csv`` downloads (:mod:`writer.routes.admin.reports`).

Handlers parse, call :class:`shared.archive.reports.Reports`, return; the workspace router
(:func:`writer.routes.workspace_router`) gives them their guards, security and dependencies.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, Parameter

from shared import models
from shared.archive.cards import Archive
from shared.archive.reports import (DEFAULT_SIMILARITY, MAX_DAYS, MIN_SIMILARITY, ConflictSort,
                                    ConflictsPage, NeverRecalledPage, NeverRecalledSort,
                                    StaleSort, StaleTablesPage, UnhelpfulPage, UnhelpfulSort)
from shared.auth import Principal
from shared.store.listing import ListQuery
from writer.problems import PROBLEM_RESPONSES
from writer.routes.params import WorkspaceId

Q = Annotated[str | None, Parameter(max_length=models.MAX_QUERY,
                                    description="text (title, scope, concepts or a content "
                                                "value, case-insensitive) or a card id")]
Families = Annotated[list[models.Family] | None, Parameter(description="any of (repeatable)")]
Days = Annotated[int, Parameter(description=f"the window, in days (1..{MAX_DAYS}; out of it: 422)")]
Page = Annotated[int, Parameter(ge=1, le=1_000_000)]
PerPage = Annotated[int, Parameter(ge=1, le=models.MAX_PER_PAGE)]


def report_query(q: str | None, family: list[str] | None, page: int, per_page: int) -> ListQuery:
    """The card filters and page of a report request (the card list's ``q`` and ``family``)."""
    return ListQuery(q=q or None, family=list(family or []), page=page, per_page=per_page)


class ReportController(Controller):
    """The curation reports of one workspace (memory.manage)."""

    path = "/memory/reports"
    tags = ["reports"]
    opt = {"permission": "memory.manage"}

    @get("/never-recalled", responses=PROBLEM_RESPONSES, summary="Cards no recall returned")
    async def never_recalled(
        self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId], days: FromQuery[Days] = 30,
        q: FromQuery[Q] = None, family: FromQuery[Families] = None,
        sort: FromQuery[NeverRecalledSort] = "idle", desc: FromQuery[bool | None] = None,
        page: FromQuery[Page] = 1, per_page: FromQuery[PerPage] = 20,
    ) -> NeverRecalledPage:
        """Cards that no recall returned in the last ``days`` days (default 30; a card younger
        than that counts from its creation): ``{rows: [{id, family, title, created_at,
        last_recalled (null: never since created), recalls (0)}], total, page, per_page,
        days}``. ``sort`` = idle (default: longest without a recall first), created, title,
        family; ``desc`` reverses. Errors: 401, 403 (memory.manage), 404 (workspace), 422
        ``days`` out of bounds, 400 an unreadable parameter or a page out of bounds."""
        return await archive.reports.never_recalled(
            principal, workspace_id, report_query(q, family, page, per_page), days, sort, desc)

    @get("/unhelpful", responses=PROBLEM_RESPONSES, summary="Cards marked unhelpful")
    async def unhelpful(
        self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId], days: FromQuery[Days] = 30,
        min_feedback: FromQuery[Annotated[int, Parameter(
            description="fewest not_helpful + wrong verdicts (1..1000; out of it: 422)")]] = 1,
        q: FromQuery[Q] = None, family: FromQuery[Families] = None,
        sort: FromQuery[UnhelpfulSort] = "unhelpful", desc: FromQuery[bool | None] = None,
        page: FromQuery[Page] = 1, per_page: FromQuery[PerPage] = 20,
    ) -> UnhelpfulPage:
        """Cards with at least ``min_feedback`` (default 1) ``not_helpful`` + ``wrong`` verdicts
        on the recalls of the last ``days`` days: ``{rows: [{id, family, title, created_at,
        recalls, helpful, not_helpful, wrong}], total, page, per_page, days, min_feedback}``.
        ``sort`` = unhelpful (default: not_helpful + wrong, most first), share, recalls,
        title, family; ``desc`` reverses. Errors: 401, 403, 404, 422 ``days`` or ``min_feedback``
        out of bounds, 400 an unreadable parameter."""
        return await archive.reports.unhelpful(
            principal, workspace_id, report_query(q, family, page, per_page), days,
            min_feedback, sort, desc)

    @get("/conflicts", responses=PROBLEM_RESPONSES, summary="Possible conflicts")
    async def conflicts(
        self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId],
        min_similarity: FromQuery[Annotated[float, Parameter(
            description=f"lowest cosine similarity of a pair ({MIN_SIMILARITY}..1; out of it: "
                        "422)")]]
        = DEFAULT_SIMILARITY,
        q: FromQuery[Q] = None, family: FromQuery[Families] = None,
        sort: FromQuery[ConflictSort] = "rank", desc: FromQuery[bool | None] = None,
        page: FromQuery[Page] = 1, per_page: FromQuery[PerPage] = 20,
    ) -> ConflictsPage:
        """Pairs of cards of one family whose scope and dependencies overlap and whose key
        texts are near in the workspace's index (cosine similarity of the stored ``key``
        vectors ≥ ``min_similarity``, default 0.8): ``{pairs: [{family, a, b, similarity (cosine, -1..1),
        kind (conflict: near but other words | duplicate: the same words), values_differ (a
        number or quoted value differs), why}], total, page, per_page, min_similarity,
        compared, computed_at, seconds, cached}``; ``a`` and ``b`` are ``{id, title, scope,
        text, only (its words the other lacks), objects}``. A pair is listed when either card matches
        ``q`` / ``family``. ``sort`` = rank (default: conflicts before duplicates, those whose
        values differ first, each by similarity), similarity, family, title; ``desc`` reverses. Errors: 401, 403, 404,
        422 ``min_similarity`` out of bounds, 400 an unreadable parameter, 503 ``index_unavailable`` / ``index_incompatible``."""
        return await archive.reports.conflicts(
            principal, workspace_id, report_query(q, family, page, per_page), min_similarity,
            sort, desc)

    @get("/stale-dependencies", responses=PROBLEM_RESPONSES,
         summary="Tables no recent recall or schema run showed in use")
    async def stale_dependencies(
        self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId], days: FromQuery[Days] = 30,
        q: FromQuery[Q] = None, family: FromQuery[Families] = None,
        sort: FromQuery[StaleSort] = "stale", desc: FromQuery[bool | None] = None,
        page: FromQuery[Page] = 1, per_page: FromQuery[PerPage] = 20,
    ) -> StaleTablesPage:
        """Tables (``database.schema.table``) named by the dependencies of the cards matching
        ``q`` / ``family`` that nothing of the last ``days`` days (default 30) showed in use: no
        recall narrowed to the table or returned a card that depends on it, no schema-change
        run covered its schema without removing it. ``{rows: [{database, schema, table, cards,
        examples: [{id, title}], last_seen (null: no sign kept), seen_by (filter | result |
        schema_run | null)}], total, page, per_page, days}``. ``sort`` = stale (default: never
        seen first, then the longest unseen), table, cards; ``desc`` reverses. Errors: 401, 403,
        404, 422 ``days`` out of bounds, 400 an unreadable parameter."""
        return await archive.reports.stale_dependencies(
            principal, workspace_id, report_query(q, family, page, per_page), days, sort, desc)
