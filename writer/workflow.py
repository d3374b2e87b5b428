"""The writer's workflow routes (DESIGN §6, §7): sessions, schema changes.

The reviewer gate (issue 16): proposals need ``memory.propose``; review and solved-index need
``memory.review``; the summary either one (the proposer checks its batch, the reviewer reads what
it applies). Recording the cards decided in a session needs ``memory.propose`` (the agent records
its user's decisions), listing them either one. Physical schema-change cleanup needs ``memory.schema``. Handlers parse, call
:mod:`shared.archive.sessions` / :mod:`shared.archive.schema_changes`, return. Errors are the
shared ones, turned into problem details by the app's exception handlers. An idempotent replay
(a review id or a schema-change run id delivered again) answers the stored result unchanged, with
the header ``Idempotent-Replayed: true``.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Response, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, JSONBody, Parameter

from shared.auth import Principal
from shared.workflow.requests import (DecideRequest, ProposeRequest, ProposeResult, ReviewReceipt,
                                      ReviewRequest, SessionDecisions, SolvedIndexResult, Summary)
from shared.archive.schema_changes import (CleanupRequest, SchemaChangeRequest,
                                           SchemaChangeResult, SchemaChanges)
from shared.archive.sessions import Workflow
from writer.auth import authorize, provide_principal, reject_unknown_query
from writer.problems import PROBLEM_RESPONSES

REPLAYED = "Idempotent-Replayed"

WorkspaceId = Annotated[str, Parameter(description="Workspace id", max_length=63)]
SessionId = Annotated[str, Parameter(description="Session id of the caller's workflow",
                                     max_length=200)]
Wait = Annotated[float | None, Parameter(
    description="Seconds (0..30) to wait for the run's point deletions", ge=0, le=30)]


async def provide_workflow(state: State) -> Workflow:
    """The workflow use cases of the process's archive (``Resources.archive()``)."""
    return state.archive.workflow


async def provide_schema_changes(state: State) -> SchemaChanges:
    """The schema-change cleanup of the process's archive (``Resources.archive()``)."""
    return state.archive.schema_changes


def _replayed(content: object, replayed: bool) -> Response:
    return Response(content=content, headers={REPLAYED: "true"} if replayed else None)


class SessionController(Controller):
    """A workflow session's proposals (memory.propose), summary (memory.propose or
    memory.review), review and solved-index (memory.review), decided cards (recorded with
    memory.propose, listed with memory.propose or memory.review)."""

    path = "/api/workspaces/{workspace_id:str}/sessions/{session_id:str}"
    dependencies = {"workflow": Provide(provide_workflow), "principal": Provide(provide_principal)}
    tags = ["workflow"]
    security = [{"bearer": []}]
    guards = [authorize, reject_unknown_query]
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
        ``Idempotent-Replayed: true``). Errors: 409 ``stale_revision`` (``item`` names the
        update; nothing written), 422 invalid link, unselected proposal, edit of the approved
        SQL, 409 review id reused for another request or session already reviewed, 404; 403
        without ``memory.review`` (a token that only proposes cannot apply a review)."""
        outcome = await workflow.review(principal, workspace_id, session_id, data)
        return _replayed(outcome.receipt, outcome.replayed)

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


class SchemaChangeController(Controller):
    """Physical schema-change cleanup (memory.schema)."""

    path = "/api/workspaces/{workspace_id:str}/schema-changes"
    dependencies = {"schema_changes": Provide(provide_schema_changes),
                    "principal": Provide(provide_principal)}
    tags = ["schema changes"]
    security = [{"bearer": []}]
    guards = [authorize, reject_unknown_query]
    opt = {"permission": "memory.schema"}

    @post("", responses=PROBLEM_RESPONSES,
          summary="Clean up after removed tables and columns (record, then run)",
          status_code=200, opt={"activity": "schema_change"})
    async def apply(self, schema_changes: NamedDependency[SchemaChanges],
                    principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                    data: JSONBody[SchemaChangeRequest],
                    wait: FromQuery[Wait] = None) -> Response[SchemaChangeResult]:
        """The one-call form of ``/record`` then ``/cleanup``. Body ``{run_id, database, schema,
        removed_tables: [...], removed_columns: [{table, column}]}``. Records the run (pending
        cleanup), then deletes the cards with a dependency on a removed object (a removed table
        covers its columns), with their links and points, and erases their content from the
        session archive. Answers ``{run_id, status, phase, deleted: [card ids], errors:
        [{card_id, error}], index_pending: [card ids], ...}``: ``status`` stays
        ``cleanup_pending`` (``phase: index_pending``) until the point deletions are done too
        (``wait``: seconds, at most 30, to wait for them). The same run id again completes an
        incomplete run (re-queuing failed point deletions) or answers the completed one
        unchanged (``Idempotent-Replayed: true``). Errors: 409 an earlier run of this
        database/schema is incomplete (``run_id``, ``index_pending``), or the run id was
        recorded with other objects; 403 permission or token binding; 422; 404."""
        outcome = await schema_changes.apply(principal, workspace_id, data, wait or 0.0)
        return _replayed(outcome.result, outcome.replayed)

    @post("/record", responses=PROBLEM_RESPONSES,
          summary="Record a schema-change run before the catalog commits its change",
          status_code=201, opt={"activity": "schema_change"})
    async def record(self, schema_changes: NamedDependency[SchemaChanges],
                     principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                     data: JSONBody[SchemaChangeRequest]) -> Response[SchemaChangeResult]:
        """Step 1: record the run (``status: cleanup_pending``, ``phase: recorded``) and delete
        nothing, so a catalog records the pending cleanup before it commits its own physical
        change, then asks for ``/cleanup``. 201; the same run id again answers the run as it is
        (200, ``Idempotent-Replayed: true``). Body and errors as ``POST .../schema-changes``."""
        outcome = await schema_changes.record_run(principal, workspace_id, data)
        return Response(content=outcome.result, status_code=200 if outcome.replayed else 201,
                        headers={REPLAYED: "true"} if outcome.replayed else None)

    @post("/cleanup", responses=PROBLEM_RESPONSES,
          summary="Run the cleanup of a recorded schema-change run", status_code=200,
          opt={"activity": "schema_change"})
    async def cleanup(self, schema_changes: NamedDependency[SchemaChanges],
                      principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                      data: JSONBody[CleanupRequest],
                      wait: FromQuery[Wait] = None) -> SchemaChangeResult:
        """Step 2: body ``{run_id}`` of a recorded run. Deletes its cards (from what was
        recorded: no new diff) and answers the run as ``POST .../schema-changes`` does; repeated,
        it re-queues the run's failed or pending point deletions and completes the run once they
        are done (``wait``: seconds, at most 30). A completed run is answered as it is. Errors:
        404 no such run; 403; 422."""
        return await schema_changes.cleanup(principal, workspace_id, data.run_id, wait or 0.0)
