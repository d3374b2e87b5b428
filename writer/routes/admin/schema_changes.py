"""Schema-change cleanups (DESIGN §7) in the browser: the workspace's runs with their phase, the
removed objects and the deletion receipts; a run's page; a Retry of an unfinished run.

Everything needs ``memory.schema``, the permission of the API's ``/schema-changes`` routes, and
goes through the same use case (:class:`shared.archive.schema_changes.SchemaChanges`): a Retry is
the API's ``POST …/schema-changes/cleanup`` of the run (it deletes the cards a recorded run still
has to delete, re-queues its open point deletions, and completes it once they are done), with the
session's principal, so the token binding and the activity log apply unchanged.

A run id may hold any text (a slash too), so it travels as a query parameter (``?run_id=``) and
a form field, never in the path.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, Parameter

from shared.archive.schema_changes import SchemaChanges
from shared.errors import InvalidInput
from writer.routes import provide_schema_changes
from writer.routes.admin.pages import Person, Urls, provide_person, render, see_other

DEPS = {"person": Provide(provide_person), "schema_changes": Provide(provide_schema_changes)}
WorkspaceId = Annotated[str, Parameter(max_length=63)]
RunId = Annotated[str, Parameter(min_length=1, max_length=200)]
Flag = Annotated[int | None, Parameter(ge=0, le=1)]
#: most runs the list shows (newest first)
LIMIT = 200
#: seconds a Retry waits for the worker's point deletions before it answers
RETRY_WAIT_SECONDS = 5.0


def runs_url(workspace: str) -> str:
    """The list of a workspace's runs."""
    return f"{Urls(workspace).base}/schema-changes"


def run_url(workspace: str, run_id: str, **query: Any) -> str:
    """A run's page (``query``: the outcome of a retry)."""
    q = {"run_id": run_id, **{k: v for k, v in query.items() if v is not None}}
    return f"{runs_url(workspace)}/run?{urlencode(q)}"


def retry_url(workspace: str) -> str:
    """Where a run's Retry form posts."""
    return f"{runs_url(workspace)}/retry"


@get("/workspaces/{workspace_id:str}/schema-changes", dependencies=DEPS)
async def runs_page(person: NamedDependency[Person],
                    schema_changes: NamedDependency[SchemaChanges],
                    workspace_id: FromPath[WorkspaceId]) -> Response:
    """The workspace's runs, newest first: phase, removed objects, deleted cards and errors,
    and a Retry for each unfinished one."""
    page = await schema_changes.runs(person.principal, workspace_id, LIMIT, 0)
    return render("schema_changes.html", person, runs=page.runs, total=page.total,
                  run_url=run_url, retry_url=retry_url(workspace_id))


@get("/workspaces/{workspace_id:str}/schema-changes/run", dependencies=DEPS)
async def run_page(person: NamedDependency[Person], schema_changes: NamedDependency[SchemaChanges],
                   workspace_id: FromPath[WorkspaceId], run_id: FromQuery[RunId],
                   retried: FromQuery[Flag] = None, queue_down: FromQuery[Flag] = None
                   ) -> Response:
    """One run: what was removed, what its cleanup deleted, what is still open, and the outcome
    of the last Retry (``retried=1``; ``queue_down=1``: Redis did not answer)."""
    run = await schema_changes.get_run(person.principal, workspace_id, run_id)
    return render("schema_change.html", person, run=run, retried=retried, queue_down=queue_down,
                  runs_url=runs_url(workspace_id), retry_url=retry_url(workspace_id))


@post("/workspaces/{workspace_id:str}/schema-changes/retry", dependencies=DEPS,
      opt={"activity": None})
async def retry_run(request: Request, person: NamedDependency[Person],
                    schema_changes: NamedDependency[SchemaChanges],
                    workspace_id: FromPath[WorkspaceId]) -> Response:
    """Retry the cleanup of the run named by the form's ``run_id`` (the API's ``/cleanup``),
    waiting up to :data:`RETRY_WAIT_SECONDS` for its point deletions when the queue answers;
    303 to the run's page, which shows the outcome.

    :raises InvalidInput: no ``run_id`` (422 page). Errors of the use case are pages too (403
    permission or binding, 404 no such run)."""
    run_id = str((await request.form()).get("run_id") or "").strip()
    if not run_id or len(run_id) > 200:
        raise InvalidInput("the form names no run (run_id)", field="run_id")
    reachable = await schema_changes.queue.reachable(timeout=1.0)
    result = await schema_changes.cleanup(person.principal, workspace_id, run_id,
                                          RETRY_WAIT_SECONDS if reachable else 0.0)
    return see_other(run_url(workspace_id, result.run_id, retried=1,
                             queue_down=None if reachable else 1))


HANDLERS = [runs_page, run_page, retry_run]
