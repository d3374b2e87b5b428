"""The writer: a Litestar app over :class:`shared.archive.cards.Archive` (DESIGN §3, §5, §8).

:func:`create_app` assembles it: the routes by area (:mod:`writer.routes`), the one table of
exception handlers that answers RFC 9457 problem details (:mod:`writer.problems`), the request
metrics and ``GET /metrics`` (:mod:`writer.metrics`), and the MCP server
(:mod:`writer.mcp_server`) over streamable HTTP at ``/mcp``, whose session manager runs in the
app's lifespan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar, asgi
from litestar.datastructures import State
from litestar.openapi.spec import Components, SecurityScheme
from litestar.types import ControllerRouterHandler, Receive, Scope, Send

from shared import models
from shared.archive.authentication import FailedAuthLog
from shared.config import Settings
from shared.resources import Resources
from writer import api_page
from writer.mcp_server import McpHttpEndpoint
from writer.metrics import RequestMetrics, metrics
from writer.problems import EXCEPTION_HANDLERS, record_boundary_rejection
from writer.routes import workspace_router
from writer.routes.admin import AdminPlugin
from writer.routes.health import healthz, readyz

def routes(mcp_endpoint: McpHttpEndpoint) -> list[ControllerRouterHandler]:
    """What the app serves: the workspace routes (one router: token guard, security and
    dependencies), the open health and metrics routes, the MCP endpoint, and the files of the
    API page at ``/schema`` (:mod:`writer.api_page`). The administration pages
    (:mod:`writer.routes.admin`, DESIGN §12) join this list as a router of their own."""

    @asgi("/mcp", copy_scope=True)
    async def mcp(scope: Scope, receive: Receive, send: Send) -> None:
        """The MCP server over streamable HTTP (:class:`writer.mcp_server.McpHttpEndpoint`):
        tools ``search``, ``rules``, ``solved``, ``get_card``, ``list_pending``, ``propose``
        for the bearer token's workspace."""
        await mcp_endpoint(scope, receive, send)

    return [workspace_router(), healthz, readyz, metrics, mcp, api_page.assets_router()]


def create_app(settings: Settings, resources: Resources | None = None) -> Litestar:
    """The writer app. Opens its own :class:`Resources` in the lifespan unless ``resources`` is
    given (``memarc up`` shares one set with the worker and the explorer)."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        if resources is not None:  # shared resources: opened and closed by their owner
            yield
            return
        res = await Resources.open(settings, with_index=True)
        app.state.archive = res.archive()
        try:
            yield
        finally:
            await res.close()

    state = State()
    state.auth_failures = FailedAuthLog()
    state.metrics_token = settings.metrics_token
    if resources is not None:
        state.archive = resources.archive()
    mcp_endpoint = McpHttpEndpoint(lambda: state.archive, state.auth_failures)

    @asynccontextmanager
    async def mcp_lifespan(app: Litestar) -> AsyncIterator[None]:
        async with mcp_endpoint.run():  # the SDK's session manager runs for the app's lifetime
            yield

    return Litestar(
        route_handlers=routes(mcp_endpoint),
        lifespan=[lifespan, mcp_lifespan],
        middleware=[RequestMetrics()],
        state=state,
        exception_handlers=EXCEPTION_HANDLERS,
        openapi_config=api_page.openapi_config(
            "Memory archive writer", "0.1.0", Components(security_schemes={
                "bearer": SecurityScheme(type="http", scheme="bearer",
                                         description="API token from `memarc token create`")})),
        request_max_body_size=models.MAX_BODY_BYTES,
        after_exception=[record_boundary_rejection],
        plugins=[AdminPlugin(settings)],
        debug=False,
    )
