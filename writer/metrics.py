"""The writer's Prometheus surface (issue 15): a middleware that counts and times every routed
request by its route template, and ``GET /metrics``.

Litestar's own Prometheus plugin (``litestar.plugins.prometheus``) is not used: its middleware
keeps its metrics in a class-level dict on prometheus-client's global registry, so every app of a
process would share (and mix) one set of counters; here each app counts into the registry of its
resources (:class:`shared.metrics.Metrics`).
"""

from __future__ import annotations

import hmac
import time

from litestar import Request, Response, get
from litestar.datastructures import State
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from shared.errors import Unauthorized
from writer.problems import PROBLEM_RESPONSES

#: the Prometheus text format 0.0.4, which every Prometheus version reads (Litestar appends
#: ``; charset=utf-8``); the metric names are valid in the older format too
MEDIA_TYPE = "text/plain; version=0.0.4"


class RequestMetrics(ASGIMiddleware):
    """Counts and times every HTTP request that reached a route: labels method, the route
    template (``scope["path_template"]``, so ids never become label values) and the status sent
    (500 when none was). Requests no route matched (404, 405 before routing) are not counted."""

    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        """Pass the request on, noting the status of its response and its duration."""
        start = time.perf_counter()
        status = 500

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await next_app(scope, receive, send_noting_status)
        finally:
            archive = getattr(scope["litestar_app"].state, "archive", None)
            if archive is not None:
                archive.metrics.observe_request(scope["method"], scope.get("path_template", ""),
                                                status, time.perf_counter() - start)


@get("/metrics", summary="Prometheus metrics", tags=["health"], responses=PROBLEM_RESPONSES,
     media_type=MEDIA_TYPE)
async def metrics(state: State, request: Request) -> Response[bytes]:
    """The process's metrics in the Prometheus text format (0.0.4): requests by route template
    and status, recall stage latencies, the index engine and projection format, and the
    projection queue read from PostgreSQL at this scrape in one statement (see docs/operations.md,
    "Metrics"). Open unless ``MEMARC_METRICS_TOKEN_FILE`` is set; then it requires
    ``Authorization: Bearer <that token>`` (401 otherwise) and the queue figures are per
    workspace; open, they are totals and name no workspace. PostgreSQL down: still 200, with
    ``memarc_database_up 0`` and no queue figures."""
    expected = state.metrics_token
    if expected is not None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                                 expected.encode()):
            raise Unauthorized("send Authorization: Bearer <the MEMARC_METRICS_TOKEN_FILE token>")
    archive = state.archive
    body = archive.metrics.exposition(await archive.queue_figures(),
                                      per_workspace=expected is not None)
    return Response(body, media_type=MEDIA_TYPE)
