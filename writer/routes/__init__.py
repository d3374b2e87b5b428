"""The writer's routes, by area: :mod:`~writer.routes.memory` (cards, recall, index, import and
export), :mod:`~writer.routes.sessions` (the session workflow), :mod:`~writer.routes.schema_changes`
(schema-change cleanup), :mod:`~writer.routes.evaluations` (recall evaluations), :mod:`~writer.routes.reports` (the
curation reports) and
:mod:`~writer.routes.health` (liveness, readiness).

Every archive route sits under one :class:`~litestar.Router`, :func:`workspace_router`, which
carries what they all need once: the path ``/api/workspaces/{workspace_id}``, the guards
(:func:`~writer.auth.authorize`, then :func:`~writer.auth.reject_unknown_query`), the bearer
security requirement and the dependencies (``archive``, ``workflow``, ``schema_changes``,
``transfer``, ``evaluations``, ``principal``). Each controller names its area's path, tag and permission
(``opt["permission"]``).
"""

from __future__ import annotations

from litestar import Router
from litestar.datastructures import State
from litestar.di import Provide

from shared.archive.cards import Archive
from shared.archive.evaluations import Evaluations
from shared.archive.transfer import Transfer
from shared.archive.schema_changes import SchemaChanges
from shared.archive.sessions import Workflow
from writer.auth import authorize, provide_principal, reject_unknown_query
from writer.routes.evaluations import EvaluationCaseController, EvaluationController
from writer.routes.memory import MemoryController
from writer.routes.reports import ReportController
from writer.routes.schema_changes import SchemaChangeController
from writer.routes.sessions import SessionController, list_sessions

WORKSPACE_PATH = "/api/workspaces/{workspace_id:str}"


async def provide_archive(state: State) -> Archive:
    """The process's :class:`Archive` (opened in the lifespan)."""
    return state.archive


async def provide_workflow(state: State) -> Workflow:
    """The workflow use cases of the process's archive (``Resources.archive()``)."""
    return state.archive.workflow


async def provide_transfer(state: State) -> Transfer:
    """The cards-file import and export of the process's archive (``Resources.archive()``)."""
    return state.archive.transfer


async def provide_evaluations(state: State) -> Evaluations:
    """The recall evaluations of the process's archive (``Resources.archive()``)."""
    return state.archive.evaluations


async def provide_schema_changes(state: State) -> SchemaChanges:
    """The schema-change cleanup of the process's archive (``Resources.archive()``)."""
    return state.archive.schema_changes


def workspace_router() -> Router:
    """The archive's routes of one workspace, behind the bearer-token guard (a new router per
    app: Litestar binds a router to the app that registers it)."""
    return Router(
        WORKSPACE_PATH,
        route_handlers=[MemoryController, ReportController, SessionController, list_sessions,
                        SchemaChangeController, EvaluationController,
                        EvaluationCaseController],
        guards=[authorize, reject_unknown_query],
        security=[{"bearer": []}],
        dependencies={"archive": Provide(provide_archive),
                      "workflow": Provide(provide_workflow),
                      "schema_changes": Provide(provide_schema_changes),
                      "transfer": Provide(provide_transfer),
                      "evaluations": Provide(provide_evaluations),
                      "principal": Provide(provide_principal)},
    )
