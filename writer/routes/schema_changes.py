"""The writer's schema-change routes (DESIGN §7): physical schema-change cleanup, which needs
``memory.schema``.

Handlers parse, call :mod:`shared.archive.schema_changes`, return; errors are the shared ones,
turned into problem details by the app's exception handlers. A run id delivered again completes
the run, or answers the completed one unchanged with the header ``Idempotent-Replayed: true``.
"""

from __future__ import annotations

from litestar import Controller, Response, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody

from shared.auth import Principal
from shared.archive.schema_changes import (CleanupRequest, SchemaChangeRequest,
                                           SchemaChangeResult, SchemaChanges)
from writer.problems import PROBLEM_RESPONSES
from writer.routes.params import Wait, WorkspaceId, replayed


class SchemaChangeController(Controller):
    """Physical schema-change cleanup (memory.schema)."""

    path = "/schema-changes"
    tags = ["schema changes"]
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
        return replayed(outcome.result, outcome.replayed)

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
        return replayed(outcome.result, outcome.replayed, 200 if outcome.replayed else 201)

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
