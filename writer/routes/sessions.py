"""The writer's session routes (DESIGN §6): a workflow session's proposals, summary, review,
solved-index and decided cards.

The reviewer gate (issue 16): proposals need ``memory.propose``; review and solved-index need
``memory.review``; the summary either one (the proposer checks its batch, the reviewer reads what
it applies). Recording the cards decided in a session needs ``memory.propose`` (the agent records
its user's decisions), listing them either one. Handlers parse, call
:mod:`shared.archive.sessions`, return; errors are the shared ones, turned into problem details
by the app's exception handlers. A review id delivered again answers the stored receipt
unchanged, with the header ``Idempotent-Replayed: true``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from litestar import Controller, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody, Parameter

from shared.auth import Principal
from shared.archive.responses import (ProposeResult, ReviewReceipt, SessionDecisions,
                                     SessionList, SolvedIndexResult, Summary)
from shared.workflow.requests import DecideRequest, ProposeRequest, ReviewRequest
from shared.archive.sessions import Workflow
from writer.problems import PROBLEM_RESPONSES
from writer.routes.params import SessionId, WorkspaceId, replayed


@get("/sessions", responses=PROBLEM_RESPONSES, summary="The sessions to review",
     tags=["workflow"], opt={"permission": ("memory.propose", "memory.review")})
async def list_sessions(
    workflow: NamedDependency[Workflow], principal: NamedDependency[Principal],
    workspace_id: FromPath[WorkspaceId],
    status: FromQuery[Annotated[Literal["open", "reviewed", "all"], Parameter(
        description="open (not reviewed yet), reviewed, or all")]] = "open",
    limit: FromQuery[Annotated[int, Parameter(ge=1, le=500)]] = 100,
) -> SessionList:
    """The workspace's sessions with proposals, latest proposal first: ``{status, limit,
    sessions: [{session_id, additions, updates, stale, erased, first_proposed_at,
    last_proposed_at, proposed_by: [actor], reviewed, review_id, outcome, reviewed_by,
    reviewed_at}]}``. Errors: 400 unknown query parameter or bad ``status``/``limit``; 403
    without ``memory.propose`` or ``memory.review``; 401, 404."""
    return await workflow.sessions(principal, workspace_id, status, limit)


class SessionController(Controller):
    """A workflow session's proposals (memory.propose), summary (memory.propose or
    memory.review), review and solved-index (memory.review), decided cards (recorded with
    memory.propose, listed with memory.propose or memory.review)."""

    path = "/sessions/{session_id:str}"
    tags = ["workflow"]
    # no default permission: each route names its own, so that a new route has to choose its
    # side of the reviewer gate (the isolation audit refuses a route without one)

    @post("/proposals", responses=PROBLEM_RESPONSES,
          summary="Store a session's proposals", status_code=201,
          opt={"activity": "propose", "permission": "memory.propose"})
    async def propose(self, workflow: NamedDependency[Workflow],
                      principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                      session_id: FromPath[SessionId],
                      data: JSONBody[ProposeRequest]) -> ProposeResult:
        """Validate and store a batch ``{proposals: [{key, kind (addition|update), decisions:
        [{id, status}], family, title, content, scope, concepts, dependencies, links: [{target:
        mem-id or key, meaning}], rationale, card_id + revision (updates)}]}``. 201 with each
        proposal's ``action`` (create, reuse of the same card, update), ``stale``, ``stored``
        (new, or unchanged for an identical re-send) and ``possible_duplicate`` (an existing
        card with loosely matching content that is not the same card: ``{card_id, revision,
        title, differs}``). Errors: 422 no approved decision, no reusable content, invalid field
        or link, the same card as another proposal of the session (``item`` names the
        proposal); 409 session already reviewed or key reused with other content; 403 without
        ``memory.propose``; 401, 404."""
        return await workflow.propose(principal, workspace_id, session_id, data)

    @get("/summary", responses=PROBLEM_RESPONSES, summary="Reviewable summary of a session",
         opt={"permission": ("memory.propose", "memory.review")})
    async def summary(self, workflow: NamedDependency[Workflow],
                      principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                      session_id: FromPath[SessionId]) -> Summary:
        """Every proposal with what it would create, reuse or change (``changes``: a field diff
        ``{field: {before, after}}`` against the card now), ``stale`` updates, ``problems`` and
        ``possible_duplicate``; ``counts``; the ``review`` receipt once reviewed. Errors: 404 no
        proposals; 403 without ``memory.propose`` or ``memory.review``; 401."""
        return await workflow.summary(principal, workspace_id, session_id)

    @post("/review", responses=PROBLEM_RESPONSES,
          summary="Apply a review (idempotent by review_id)", status_code=200,
          opt={"activity": "review", "permission": "memory.review"})
    async def review(self, workflow: NamedDependency[Workflow],
                     principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                     session_id: FromPath[SessionId],
                     data: JSONBody[ReviewRequest]) -> Response[ReviewReceipt]:
        """Body ``{review_id, selected: [{key, edits?: {title, content, scope, concepts,
        dependencies, links}, as_update_of?: {card_id, revision}}], note?}`` or ``{review_id,
        decline_all: true}`` (``as_update_of`` applies an addition to that card). One transaction;
        answers the durable receipt ``{review_id, session_id, outcome, items: [{key, action
        (created|updated|reused), card_id, revision}], declined, projection}``. The same
        ``review_id`` again answers the same receipt and writes nothing (header
        ``Idempotent-Replayed: true``). ``version`` (optional): the summary's ``version`` the
        review was made on; proposals stored after it stay open (receipt ``open``), and a
        summary changed otherwise since is a 409 ``summary_changed`` (reload it). Errors: 409 ``stale_revision`` (``item`` names the
        update; nothing written), 422 invalid link, unselected proposal, edit of the approved
        SQL, 409 review id reused for another request or session already reviewed, 404; 403
        without ``memory.review`` (a token that only proposes cannot apply a review)."""
        outcome = await workflow.review(principal, workspace_id, session_id, data)
        return replayed(outcome.receipt, outcome.replayed)

    @post("/solved-index", responses=PROBLEM_RESPONSES,
          summary="Re-queue the projection of a session's receipt",
          status_code=202, opt={"activity": "solved_index", "permission": "memory.review"})
    async def solved_index(self, workflow: NamedDependency[Workflow],
                           principal: NamedDependency[Principal],
                           workspace_id: FromPath[WorkspaceId],
                           session_id: FromPath[SessionId]) -> SolvedIndexResult:
        """Re-run the projection of every card the session's review wrote, from its current
        state; a card deleted since is never recreated. 202 ``{cards: [{card_id, status
        (requeued|deleted), operations}], operations, enqueued}``. Errors: 404 no receipt; 403
        without ``memory.review``."""
        return await workflow.solved_index(principal, workspace_id, session_id)

    @post("/decisions", responses=PROBLEM_RESPONSES,
          summary="Record the cards decided in a session", status_code=200,
          opt={"activity": "decide", "permission": "memory.propose"})
    async def decide(self, workflow: NamedDependency[Workflow],
                     principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                     session_id: FromPath[SessionId],
                     data: JSONBody[DecideRequest]) -> SessionDecisions:
        """Body ``{decisions: [{card_id: mem-…, decision: accepted|rejected}]}`` (1..100, each
        card once). Records the user's decisions on cards of the workspace in this session; a
        card decided before takes the new decision. Recall with ``session`` (``POST
        .../memory/search``) then excludes every card decided in the session and never bridges
        through one. Answers ``{session_id, decisions: [{card_id, decision, decided_by,
        decided_at, stored (new|changed|unchanged)}], counts: {total, accepted, rejected}}``.
        Errors (nothing written): 422 a card id that is not one, a card named twice, a card not
        in this workspace (``field`` names it); 409 more than 500 decided cards in the session;
        403 without ``memory.propose``; 401, 404."""
        return await workflow.decide(principal, workspace_id, session_id, data)

    @get("/decisions", responses=PROBLEM_RESPONSES, summary="The cards decided in a session",
         opt={"permission": ("memory.propose", "memory.review")})
    async def decisions(self, workflow: NamedDependency[Workflow],
                        principal: NamedDependency[Principal],
                        workspace_id: FromPath[WorkspaceId],
                        session_id: FromPath[SessionId]) -> SessionDecisions:
        """``{session_id, decisions: [{card_id, decision, decided_by, decided_at}], counts}``,
        in the order they were decided. Errors: 404 no card decided in this session; 403
        without ``memory.propose`` or ``memory.review``; 401."""
        return await workflow.decisions(principal, workspace_id, session_id)
