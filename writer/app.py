"""The writer: a Litestar app over :class:`shared.archive.cards.Archive` (DESIGN §3, §5, §8).

Handlers parse, call ``shared``, return. Errors are translated in one table of exception handlers
into RFC 9457 problem details (``application/problem+json``) with a machine-readable ``code``.
The app also serves the MCP server (:mod:`writer.mcp_server`) over streamable HTTP at ``/mcp``;
its session manager runs in the app's lifespan.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import msgspec
import psycopg
from litestar import Controller, Litestar, Request, Response, asgi, delete, get, post, put
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.params import FromPath, FromQuery, JSONBody, Parameter
from litestar.response import Stream
from litestar.types import Receive, Scope, Send

from shared import models
from shared.archive.activity import record_rejection
from shared.archive.authentication import FailedAuthLog
from shared.archive.cards import (Archive, CardDetail, CardPage, DeleteResult, ImportResult,
                                  PendingPage, RetryResult, WriteResult)
from shared.auth import Principal
from shared.config import Settings
from shared.errors import (ArchiveError, BadRequest, DatabaseUnavailable, InvalidInput,
                           UnsupportedEncoding)
from shared.models import CardWrite, ImportCard, RecallResponse, SearchRequest
from shared.projection.reconciliation import AuditReport
from shared.resources import Resources
from shared.store.listing import ListQuery
from writer.auth import authorize, principal_of, provide_principal, reject_unknown_query
from writer.mcp_server import McpHttpEndpoint
from writer.metrics import RequestMetrics, metrics
from writer.routes.admin import AdminPlugin
from writer.problems import (IMPORT_PROBLEM_RESPONSES, PROBLEM, PROBLEM_RESPONSES,
                             archive_problem, problem_body)
from writer.workflow import SchemaChangeController, SessionController

log = logging.getLogger("memarc.writer")

_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed",
               413: "request_too_large", 401: "unauthorized", 403: "forbidden"}
MAX_IMPORT_BYTES = 64_000_000
#: the largest ``offset`` of the pending and activity pages (a bound, so a huge number is a 400
#: naming the parameter rather than PostgreSQL's "bigint out of range")
MAX_OFFSET = 1_000_000_000

WorkspaceId = Annotated[str, Parameter(description="Workspace id", max_length=63)]
CardId = Annotated[str, Parameter(description="Card id, mem-<UUID>", max_length=60)]
Wait = Annotated[float | None, Parameter(
    description="Seconds (0..30) to wait for the projection to become current", ge=0, le=30)]


def problem(status: int, title: str, detail: str, code: str, request: Request | None = None,
            **extra: Any) -> Response:
    """An RFC 9457 problem-details response (:func:`~writer.problems.problem_body`)."""
    return _problem_response(problem_body(status, title, detail, code,
                                          request.url.path if request is not None else None,
                                          **extra))


def _problem_response(body: dict[str, Any]) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if body["status"] == 401 else None
    return Response(content=body, status_code=body["status"], media_type=PROBLEM, headers=headers)


def _archive_error(request: Request, exc: ArchiveError) -> Response:
    if exc.status >= 500:
        log.warning("%s %s -> %s: %s", request.method, request.url.path, exc.code, exc.message)
    return _problem_response(archive_problem(exc, request.url.path))


def _http_error(request: Request, exc: HTTPException) -> Response:
    status = exc.status_code
    if isinstance(exc, ValidationException):
        errors = exc.extra if isinstance(exc.extra, list) else None
        if errors and any(e.get("key") == "data" and e.get("message") == "'data'" for e in errors):
            return problem(400, "The request could not be read.", "a JSON request body is required",
                           "bad_request", request)
        return problem(400, "The request could not be read.", str(exc.detail), "bad_request",
                       request, errors=errors)
    titles = {400: "The request could not be read."}
    detail = str(exc.detail)
    extra: dict[str, Any] = {}
    if status == 413:  # name the limit that was exceeded
        handler = request.scope.get("route_handler")
        limit = handler.resolve_request_max_body_size() if handler is not None else None
        if limit:
            detail = f"the request body is larger than {limit:,} bytes (the limit of this route)"
            extra = {"limit": limit}
    response = problem(status, titles.get(status, str(exc.detail)), detail,
                       _HTTP_CODES.get(status, "http_error"), request, **extra)
    for name, value in (exc.headers or {}).items():  # e.g. Allow on 405
        response.headers[name] = value
    return response


def _db_error(request: Request, exc: psycopg.OperationalError) -> Response:
    return _archive_error(request, DatabaseUnavailable(f"PostgreSQL is unavailable: {type(exc).__name__}"))


def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem(500, "Internal error", "the archive could not complete the request",
                   "internal_error", request)


async def provide_archive(state: State) -> Archive:
    """The process's :class:`Archive` (opened in the lifespan)."""
    return state.archive


async def record_boundary_rejection(exc: Exception, scope: Scope) -> None:
    """``after_exception`` hook: a mutating route's error that ``shared`` did not record (a
    missing permission, an unreadable body, a query parameter out of bounds, a body over the
    size limit) is recorded as a rejected attempt of the route's activity verb
    (``opt["activity"]``), when :func:`~writer.auth.authorize` admitted a principal."""
    handler = scope.get("route_handler")
    verb = handler.opt.get("activity") if handler is not None else None
    principal = principal_of(scope)
    workspace = (scope.get("path_params") or {}).get("workspace_id")
    if not verb or principal is None or not isinstance(workspace, str) \
            or getattr(exc, "activity_recorded", False):
        return
    if isinstance(exc, HTTPException) and not isinstance(exc, ArchiveError):
        code = "bad_request" if isinstance(exc, ValidationException) else _HTTP_CODES.get(
            exc.status_code, "http_error")
        exc = BoundaryRejection(str(exc.detail), status=exc.status_code, code=code, cause=exc)
    card = (scope.get("path_params") or {}).get("card_id")
    archive: Archive = scope["litestar_app"].state.archive
    await record_rejection(archive.db, principal, workspace, verb, exc,
                           card_uuid=models.parse_card_id(card) if isinstance(card, str) else None)


class BoundaryRejection(ArchiveError):
    """The request was rejected before it reached the archive."""

    def __init__(self, message: str, *, status: int, code: str, cause: Exception) -> None:
        super().__init__(message)
        self.status, self.code = status, code
        cause.activity_recorded = True  # type: ignore[attr-defined]


def _wait(wait: float | None) -> float:
    return float(wait or 0.0)


def _decode_body(raw: bytes, encoding: str) -> bytes:
    """An import body without its content encoding (identity or gzip), decompressed in bounded
    steps so that a small gzip bomb cannot fill memory.

    :raises UnsupportedEncoding: another encoding. :raises BadRequest: invalid gzip, or more
        than ``4 × MAX_IMPORT_BYTES`` once decompressed.
    """
    import zlib

    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "x-gzip"):
        raise UnsupportedEncoding(f"Content-Encoding {encoding!r} is not supported (gzip or none)")
    limit = MAX_IMPORT_BYTES * 4
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise BadRequest(f"body is not valid gzip: {exc}") from exc
    if len(out) > limit or inflater.unconsumed_tail:
        raise BadRequest(f"decompressed body is larger than {limit} bytes")
    if not inflater.eof:
        raise BadRequest("body is not valid gzip: truncated")
    return out


NDJSON = "application/x-ndjson"
#: Bytes of JSON Lines an export gathers before it sends a chunk.
EXPORT_CHUNK = 64 * 1024


async def _ndjson(first: ImportCard | None, rest: AsyncIterator[ImportCard]) -> AsyncIterator[bytes]:
    """The lines of an export (``first``, then ``rest``) as JSON Lines, in chunks of about
    :data:`EXPORT_CHUNK` bytes; closes ``rest`` (its transaction) however the response ends."""
    encoder = msgspec.json.Encoder()
    buffer = bytearray()
    try:
        if first is None:
            return
        encoder.encode_into(first, buffer, len(buffer))
        buffer += b"\n"
        async for line in rest:
            encoder.encode_into(line, buffer, len(buffer))
            buffer += b"\n"
            if len(buffer) >= EXPORT_CHUNK:
                yield bytes(buffer)
                buffer.clear()
        if buffer:
            yield bytes(buffer)
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


class MemoryController(Controller):
    """Cards of one workspace: administration (memory.manage) and recall (memory.read)."""

    path = "/api/workspaces/{workspace_id:str}/memory"
    dependencies = {"archive": Provide(provide_archive), "principal": Provide(provide_principal)}
    tags = ["memory"]
    security = [{"bearer": []}]
    guards = [authorize, reject_unknown_query]
    opt = {"permission": "memory.manage"}

    @get("", responses=PROBLEM_RESPONSES, summary="List cards")
    async def list_cards(
        self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId],
        q: FromQuery[Annotated[str | None, Parameter(max_length=models.MAX_QUERY)]] = None,
        family: FromQuery[list[models.Family] | None] = None,
        origin: FromQuery[list[models.Origin] | None] = None,
        concepts: FromQuery[Annotated[list[str] | None, Parameter(max_items=models.MAX_CONCEPTS)]] = None,
        database: FromQuery[Annotated[str | None, Parameter(max_length=models.MAX_NAME)]] = None,
        schema: FromQuery[Annotated[str | None, Parameter(max_length=models.MAX_NAME)]] = None,
        table: FromQuery[Annotated[str | None, Parameter(max_length=models.MAX_NAME)]] = None,
        column: FromQuery[Annotated[str | None, Parameter(max_length=models.MAX_NAME)]] = None,
        updated_after: FromQuery[Annotated[str | None, Parameter(
            max_length=40, description="date (YYYY-MM-DD, UTC) or ISO 8601 timestamp")]] = None,
        updated_before: FromQuery[Annotated[str | None, Parameter(
            max_length=40, description="date (YYYY-MM-DD, UTC) or ISO 8601 timestamp")]] = None,
        sort: FromQuery[Literal["updated", "created", "title", "family"]] = "updated",
        desc: FromQuery[bool | None] = None,
        page: FromQuery[Annotated[int, Parameter(ge=1, le=1_000_000)]] = 1,
        per_page: FromQuery[Annotated[int, Parameter(ge=1, le=models.MAX_PER_PAGE)]] = 20,
    ) -> CardPage:
        """A page of cards. ``q``: text (case-insensitive substring of the title, scope,
        concepts or a content value; content keys are not searched) or a card id; ``family``, ``origin`` (any of), ``concepts`` (all of) repeatable; ``database``,
        ``schema``, ``table``, ``column``: one dependency entry carries them all;
        ``updated_after`` / ``updated_before``: dates (UTC midnight) or ISO timestamps; ``sort`` = updated (default,
        newest first), created, title, family, ``desc`` reverses; ties by id. Errors: 401, 403,
        404 (workspace), 422."""
        query = ListQuery(q=q, family=list(family or []), origin=list(origin or []),
                          concepts=list(concepts or []), database=database, schema=schema,
                          table=table, column=column,
                          updated_after=models.parse_time_bound("updated_after", updated_after),
                          updated_before=models.parse_time_bound("updated_before", updated_before),
                          sort=sort, desc=desc, page=page,
                          per_page=per_page)
        return await archive.list_cards(principal, workspace_id, query)

    @post("", responses=PROBLEM_RESPONSES,
          summary="Create a card", status_code=201, opt={"activity": "create"})
    async def create_card(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                          workspace_id: FromPath[WorkspaceId], data: JSONBody[CardWrite],
                          wait: FromQuery[Wait] = None) -> WriteResult:
        """Create a manual card. 201 with ``index_status`` (``pending`` unless ``wait`` saw the
        projection complete). Errors: 400 malformed, 422 invalid (link to a missing card or another
        workspace's card included), 401, 403, 404, 503 ``database_unavailable``."""
        return await archive.create_card(principal, workspace_id, data, _wait(wait))

    @get("/pending", responses=PROBLEM_RESPONSES, summary="Incomplete index operations")
    async def pending(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                      workspace_id: FromPath[WorkspaceId],
                      limit: FromQuery[Annotated[int, Parameter(ge=1, le=1000)]] = 100,
                      offset: FromQuery[Annotated[int, Parameter(ge=0, le=MAX_OFFSET)]] = 0) -> PendingPage:
        """Every incomplete projection operation (upserts and deletions): card id, operation,
        status, attempts, last error, age in seconds."""
        return await archive.pending(principal, workspace_id, limit, offset)

    @get("/activity", responses=PROBLEM_RESPONSES, summary="Activity log")
    async def activity(
        self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId],
        verb: FromQuery[Annotated[str | None, Parameter(max_length=100)]] = None,
        card_id: FromQuery[Annotated[str | None, Parameter(max_length=60)]] = None,
        outcome: FromQuery[Annotated[str | None, Parameter(max_length=100)]] = None,
        limit: FromQuery[Annotated[int, Parameter(ge=1, le=500)]] = 50,
        offset: FromQuery[Annotated[int, Parameter(ge=0, le=MAX_OFFSET)]] = 0,
    ) -> dict[str, Any]:
        """Every state change and every rejected or failed attempt, newest first:
        ``{activity: [{id, at, actor, verb, card_id, outcome, detail}], total}``; filters
        ``verb``, ``card_id``, ``outcome`` (prefix, e.g. ``rejected``)."""
        return await archive.activity(principal, workspace_id, verb=verb, card_id=card_id,
                                      outcome=outcome, limit=limit, offset=offset)

    @get("/status", responses=PROBLEM_RESPONSES,
         summary="Card and projection counts", opt={"permission": "memory.read"})
    async def status(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                     workspace_id: FromPath[WorkspaceId]) -> dict[str, Any]:
        """Cards per family, how many have a current projection, open operations, and
        ``dependencies``: ``{"database": "up", "queue": "up" | "down"}`` (Redis)."""
        return await archive.status(principal, workspace_id)

    @post("/index", responses=PROBLEM_RESPONSES,
          summary="Rebuild the workspace's index", status_code=202,
          opt={"activity": "index"})
    async def start_rebuild(self, archive: NamedDependency[Archive],
                            principal: NamedDependency[Principal],
                            workspace_id: FromPath[WorkspaceId]) -> dict[str, Any]:
        """Queue a tracked rebuild of the projection from authoritative cards into a new
        collection, switched in when complete (recall keeps working on the old one). 202 with
        the rebuild ``{id, status, ...}``; follow it with ``GET .../index/{id}``. Errors: 409 a
        rebuild is already queued or running."""
        return await archive.start_rebuild(principal, workspace_id)

    @get("/index", responses=PROBLEM_RESPONSES, summary="Latest index rebuild")
    async def latest_rebuild(self, archive: NamedDependency[Archive],
                             principal: NamedDependency[Principal],
                             workspace_id: FromPath[WorkspaceId]) -> dict[str, Any]:
        """The latest rebuild: status (queued, running, done, failed), progress ``done/total``,
        summary or error. 404 when the workspace was never rebuilt."""
        return await archive.rebuild_status(principal, workspace_id)

    @get("/index/{rebuild_id:str}", responses=PROBLEM_RESPONSES, summary="One index rebuild")
    async def rebuild(self, archive: NamedDependency[Archive],
                      principal: NamedDependency[Principal],
                      workspace_id: FromPath[WorkspaceId],
                      rebuild_id: FromPath[Annotated[str, Parameter(max_length=40)]]) -> dict[str, Any]:
        """One tracked rebuild by id. Errors: 404."""
        return await archive.rebuild_status(principal, workspace_id, rebuild_id)

    @get("/audit", responses=PROBLEM_RESPONSES, summary="Audit the index against PostgreSQL")
    async def audit(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                    workspace_id: FromPath[WorkspaceId]) -> AuditReport:
        """Point-by-point comparison: ``missing``, ``stale``, ``orphan`` and ``misplaced`` card
        ids, plus counts. Errors: 503 ``index_unavailable``."""
        return await archive.audit(principal, workspace_id)

    @post("/audit/repair", responses=PROBLEM_RESPONSES,
          summary="Audit and queue the fixes", status_code=202,
          opt={"activity": "audit-repair"})
    async def audit_repair(self, archive: NamedDependency[Archive],
                           principal: NamedDependency[Principal],
                           workspace_id: FromPath[WorkspaceId]) -> AuditReport:
        """As ``GET .../audit``, then queue upserts for missing and stale cards and deletions for
        orphan and misplaced points (``queued`` lists the operation ids)."""
        return await archive.repair_index(principal, workspace_id)

    @post("/search", responses=PROBLEM_RESPONSES, summary="Verified hybrid recall", status_code=200,
          opt={"permission": "memory.read", "activity": None})  # a read: nothing to record
    async def search(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                     workspace_id: FromPath[WorkspaceId], data: JSONBody[SearchRequest]) -> RecallResponse:
        """Hybrid (dense + BM25, reciprocal rank fusion k = 60) search, verified against
        PostgreSQL. Body ``{query, top (1..100), mode (search|rules|solved), family?, filters?,
        exclude?, session?}``; ``session``: the caller's workflow session, whose decided cards
        (``POST .../sessions/{id}/decisions``) are left out and never bridge. Errors: 400/422
        bad input, 403 (permission or binding), 503 ``index_unavailable`` / ``index_incompatible`` / ``embedder_unavailable`` /
        ``database_unavailable`` (never an empty success)."""
        return await archive.search(principal, workspace_id, data)

    @post("/import", responses=IMPORT_PROBLEM_RESPONSES,
          summary="Import a cards file (JSON Lines)", status_code=201,
          request_max_body_size=MAX_IMPORT_BYTES, opt={"activity": "import"})
    async def import_cards(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal], request: Request,
                           workspace_id: FromPath[WorkspaceId],
                           on_conflict: FromQuery[Annotated[models.OnConflict, Parameter(
                               description="a line whose key is already a card's: skip it, or "
                                           "update the card where it differs")]] = "skip",
                           ) -> ImportResult:
        """Import a JSON Lines body (one card per line, ``key`` + card fields; links by key or
        card id), optionally ``Content-Encoding: gzip``. All or nothing, idempotent by key: a
        line whose key is already a card's key in the workspace is that card, skipped
        (``on_conflict=skip``, the default) or updated in place where it differs (``update``:
        same id, revision + 1); the others create cards that remember their keys. 201 with
        ``{created, by_family, updated, unchanged, skipped, enqueued}``. Errors: 400 unreadable or
        another ``on_conflict``, 422 invalid line (named; a key with surrounding whitespace too) or
        no card lines (``no cards``), 413 too large (also decompressed: at
        most 4 × the body limit), 415 another content encoding."""
        raw = _decode_body(await request.body(), request.headers.get("content-encoding", ""))
        cards = []
        for n, line in enumerate(raw.splitlines(), start=1):
            if line.strip():
                try:
                    cards.append(models.decode_json(line, ImportCard))
                except ArchiveError as exc:
                    raise InvalidInput(f"line {n}: {exc.message}") from exc
        return await archive.import_cards(principal, workspace_id, cards, on_conflict)

    @get("/export", responses=PROBLEM_RESPONSES, summary="Export the cards file (JSON Lines)",
         media_type=NDJSON)
    async def export_cards(
        self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId],
        family: FromQuery[list[models.Family] | None] = None,
    ) -> Stream:
        """The workspace's cards as the cards file ``POST .../import`` reads, streamed (JSON
        Lines, ``application/x-ndjson``, chunked): one card per line under its key (its import
        key, else its id), with title, content, scope, concepts, dependencies, links by their
        targets' keys, origin and source; no ids, revisions, vectors or index state; in key order.
        ``family`` (repeatable) narrows it; links to cards of other families are kept. A stream
        cut short (PostgreSQL lost mid-way) ends without its last chunk, which HTTP clients
        report as an incomplete body. Errors (before the first byte): 400 an unknown family,
        401, 403, 404, 503 ``database_unavailable``."""
        lines = await archive.export_cards(principal, workspace_id, family or ())
        first = await anext(lines, None)  # PostgreSQL errors become a problem, not a cut stream
        return Stream(_ndjson(first, lines), media_type=NDJSON)

    @get("/{card_id:str}", responses=PROBLEM_RESPONSES, summary="Show a card")
    async def show(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                   workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId]) -> CardDetail:
        """The card, incoming links and open operations. 404 for a missing card and for a card
        of another workspace alike."""
        return await archive.get_card(principal, workspace_id, card_id)

    @put("/{card_id:str}", responses=PROBLEM_RESPONSES,
         summary="Update a card", opt={"activity": "update"})
    async def update(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                     workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId],
                     data: JSONBody[CardWrite], wait: FromQuery[Wait] = None) -> WriteResult:
        """Replace the card's editable fields; the body's ``revision`` is the one edited.
        Errors: 409 ``stale_revision`` (nothing changed), 404, 422."""
        return await archive.update_card(principal, workspace_id, card_id, data, _wait(wait))

    @delete("/{card_id:str}", responses=PROBLEM_RESPONSES,
            summary="Delete a card", status_code=200, opt={"activity": "delete"})
    async def remove(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                     workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId],
                     wait: FromQuery[Wait] = None) -> DeleteResult:
        """Delete the card, its dependencies and every link into or out of it; its point is
        removed by the worker. Errors: 404."""
        return await archive.delete_card(principal, workspace_id, card_id, _wait(wait))

    @post("/{card_id:str}/retry", responses=PROBLEM_RESPONSES,
          summary="Re-run a card's projection", status_code=202,
          opt={"activity": "retry"})
    async def retry(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                    workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId]) -> RetryResult:
        """Re-queue the card's open (or failed) operations against its current state; for a
        deleted card this completes the point deletion. Errors: 404."""
        return await archive.retry(principal, workspace_id, card_id)


@get("/healthz", summary="Liveness", include_in_schema=True, tags=["health"])
async def healthz() -> dict[str, str]:
    """Always ``{"status": "ok"}`` while the process serves HTTP."""
    return {"status": "ok"}


@get("/readyz", summary="Readiness", tags=["health"])
async def readyz(state: State) -> dict[str, Any]:
    """``{"status": "ready", "dependencies": {"database": "up", "queue": "up"}}`` when
    PostgreSQL answers with the expected schema and Redis (the projection queue) answers;
    ``"status": "degraded"`` with ``"queue": "down"`` while Redis is unreachable (saves still
    commit, their projection waits); 503 ``database_unavailable`` / ``schema_outdated`` when
    PostgreSQL is down or not migrated, ``pool_exhausted`` when no pooled connection came free
    within ``MEMARC_DB_POOL_TIMEOUT_SECONDS``."""
    await state.archive.db.check_schema()
    queue = "up" if await state.archive.queue.reachable() else "down"
    return {"status": "ready" if queue == "up" else "degraded",
            "dependencies": {"database": "up", "queue": queue}}


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

    @asgi("/mcp", copy_scope=True)
    async def mcp(scope: Scope, receive: Receive, send: Send) -> None:
        """The MCP server over streamable HTTP (:class:`writer.mcp_server.McpHttpEndpoint`):
        tools ``search``, ``rules``, ``solved``, ``get_card``, ``list_pending``, ``propose``
        for the bearer token's workspace."""
        await mcp_endpoint(scope, receive, send)

    return Litestar(
        route_handlers=[MemoryController, SessionController, SchemaChangeController, healthz, readyz,
                        metrics, mcp],
        lifespan=[lifespan, mcp_lifespan],
        middleware=[RequestMetrics()],
        state=state,
        exception_handlers={
            ArchiveError: _archive_error,
            HTTPException: _http_error,
            psycopg.OperationalError: _db_error,
            Exception: _internal_error,
        },
        openapi_config=OpenAPIConfig(
            title="Memory archive writer", version="0.1.0", path="/schema",
            components=Components(security_schemes={
                "bearer": SecurityScheme(type="http", scheme="bearer",
                                         description="API token from `memarc token create`")}),
        ),
        request_max_body_size=models.MAX_BODY_BYTES,
        after_exception=[record_boundary_rejection],
        plugins=[AdminPlugin(settings)],
        debug=False,
    )

