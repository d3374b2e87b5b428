"""The writer's recall evaluation routes (issue 34, ``docs/evaluation.md``): runs and curated
cases of one workspace, ``memory.manage``.

Handlers parse, call :class:`shared.archive.evaluations.Evaluations`, return.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Response, delete, get, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody, Parameter

from shared.archive.evaluations import CuratedCases, EvaluationRun, EvaluationRuns, Evaluations
from shared.auth import Principal
from shared.evaluation.cases import CaseWrite, CuratedCase
from shared.models import EmptyRequest
from writer.problems import PROBLEM_RESPONSES
from writer.routes.params import Offset, WorkspaceId

RunId = Annotated[str, Parameter(description="Evaluation run id (UUID)", max_length=40)]
CaseId = Annotated[str, Parameter(description="Curated case id (UUID)", max_length=40)]
RunWait = Annotated[float | None, Parameter(
    description="Seconds (0..30) to wait for the run to finish", ge=0, le=30)]


class EvaluationController(Controller):
    """Recall evaluations of one workspace (memory.manage)."""

    path = "/memory/evaluations"
    tags = ["evaluations"]
    opt = {"permission": "memory.manage"}

    @post("", responses=PROBLEM_RESPONSES, summary="Run a recall evaluation",
          opt={"activity": "evaluate"})
    async def start(self, evaluations: NamedDependency[Evaluations],
                    principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                    wait: FromQuery[RunWait] = None,
                    data: JSONBody[EmptyRequest | None] = None) -> Response[EvaluationRun]:
        """Queue a run for the worker: every case (derived from the archive, and curated)
        recalled through ``POST …/search``'s code path. 201 with the finished run (``status``
        done or failed) when it ended within ``wait`` seconds, else 202 with the run as it is
        (``id``, ``status`` queued or running, ``done`` of ``total``): poll ``GET
        …/evaluations/{id}``. No body, or ``{}``. Errors: 400 a body with members, or not JSON;
        409 a run is already queued or running (``run``: its id), 401, 403, 404."""
        run = await evaluations.start(principal, workspace_id, wait=wait or 0.0)
        return Response(run, status_code=201 if run.status in ("done", "failed") else 202)

    @get("", responses=PROBLEM_RESPONSES, summary="Evaluation runs, newest first")
    async def runs(self, evaluations: NamedDependency[Evaluations],
                   principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                   limit: FromQuery[Annotated[int, Parameter(ge=1, le=500)]] = 20,
                   offset: FromQuery[Offset] = 0) -> EvaluationRuns:
        """``{runs: [...], total}``, newest first, each with its figures per mode and source
        and its paired tests against the run before it (``tests``, ``regression``); misses are
        on a run's own page. Errors: 401, 403, 404."""
        return await evaluations.runs(principal, workspace_id, limit=limit, offset=offset)

    @get("/{run_id:str}", responses=PROBLEM_RESPONSES, summary="One evaluation run")
    async def run(self, evaluations: NamedDependency[Evaluations],
                  principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                  run_id: FromPath[RunId]) -> EvaluationRun:
        """One run with its ``misses``: each case whose expected card was not first, with its
        rank (null: not in the top 100) and the cards ranked above it. Errors: 404 (another
        workspace's run included), 401, 403."""
        return await evaluations.run(principal, workspace_id, run_id)


class EvaluationCaseController(Controller):
    """Curated evaluation cases of one workspace (memory.manage)."""

    path = "/memory/evaluation-cases"
    tags = ["evaluations"]
    opt = {"permission": "memory.manage"}

    @get("", responses=PROBLEM_RESPONSES, summary="Curated evaluation cases")
    async def cases(self, evaluations: NamedDependency[Evaluations],
                    principal: NamedDependency[Principal],
                    workspace_id: FromPath[WorkspaceId]) -> CuratedCases:
        """``{cases: [...], total}``, oldest first. Errors: 401, 403, 404."""
        return await evaluations.cases(principal, workspace_id)

    @post("", responses=PROBLEM_RESPONSES, summary="Add a curated evaluation case",
          status_code=201, opt={"activity": "case-create"})
    async def create(self, evaluations: NamedDependency[Evaluations],
                     principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                     data: JSONBody[CaseWrite]) -> CuratedCase:
        """Body ``{question, mode, expected: [card ids], filters?, match?: any|all, note?}``.
        201 with the case. Errors: 400 malformed, 422 (an expected card that is not this
        workspace's, a blank question), 401, 403, 404."""
        return await evaluations.create_case(principal, workspace_id, data)

    @put("/{case_id:str}", responses=PROBLEM_RESPONSES, summary="Replace a curated case",
         opt={"activity": "case-update"})
    async def update(self, evaluations: NamedDependency[Evaluations],
                     principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                     case_id: FromPath[CaseId], data: JSONBody[CaseWrite]) -> CuratedCase:
        """Body as ``POST``. Errors: 404 no such case, 400, 422, 401, 403."""
        return await evaluations.update_case(principal, workspace_id, case_id, data)

    @delete("/{case_id:str}", responses=PROBLEM_RESPONSES, summary="Delete a curated case",
            status_code=204, opt={"activity": "case-delete"})
    async def remove(self, evaluations: NamedDependency[Evaluations],
                     principal: NamedDependency[Principal], workspace_id: FromPath[WorkspaceId],
                     case_id: FromPath[CaseId]) -> None:
        """204. Errors: 404 no such case, 401, 403."""
        await evaluations.delete_case(principal, workspace_id, case_id)
