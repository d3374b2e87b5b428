"""The archive as an MCP server (issue 15), on the official ``mcp`` Python SDK's low-level
:class:`mcp.server.Server`: an adapter like the HTTP app, over the same use cases.

Tools (:data:`TOOLS`): ``search``, ``rules`` and ``solved`` (verified recall in that mode, the
arguments and the result of ``POST .../memory/search``), ``get_card`` (``GET .../{card_id}``),
``list_pending`` (``GET .../pending``), ``propose`` (``POST .../sessions/{s}/proposals``) and
``feedback`` (``POST .../recalls/{recall_id}/feedback``). Each
calls the use case of :meth:`shared.resources.Resources.archive` that the route calls, which checks
the principal's workspace and permission and writes the activity records; the adapter adds only
what the writer's boundary adds (the record of a rejected ``propose`` whose arguments never
reached the use case, :func:`~shared.archive.activity.record_rejection`). Arguments are validated
by the API's own structs (:func:`shared.models.convert`), the input schemas are generated from
them (msgspec), and each tool declares the output schema of the API's response.

Identity comes from the token only, never from an argument: over HTTP the ``Authorization:
Bearer`` header of each request (:class:`McpHttpEndpoint`, served by the writer at ``/mcp``),
over stdio ``MEMARC_TOKEN`` (:func:`serve_stdio`, ``memarc mcp``), authenticated again for every
request so that a revoked token stops at once. The workspace is the token's. ``tools/list`` shows
only the tools the token's permissions allow (:meth:`~shared.auth.Principal.allows`); calling an
unlisted one reaches its use case, which refuses it (403 ``forbidden``, recorded).

Errors are JSON-RPC errors whose ``data`` is the API's problem-details document (``code``:
``not_found``, ``forbidden``, ``invalid_input``, ``database_unavailable``, ...; ``status``: the
HTTP status the API answers): :func:`mcp_error`. The JSON-RPC ``code`` is ``-32602`` (invalid
params) for bad input (400, 413, 415, 422) and :data:`ARCHIVE_ERROR` for every other archive
error. Over HTTP, a request without a valid token is answered before any MCP message is read:
HTTP 401 (503 when PostgreSQL is down) with ``WWW-Authenticate: Bearer`` and the same JSON-RPC
error body, which the SDK's client surfaces as that error.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

import mcp_types as types
import msgspec
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from shared import models
from shared.archive.activity import record_rejection
from shared.archive.authentication import FailedAuthLog
from shared.archive.cards import Archive
from shared.archive.responses import CardDetail, FeedbackResult, PendingPage
from shared.auth import Principal
from shared.errors import ArchiveError, NotFound
from shared.models import FeedbackRequest, RecallResponse, SearchRequest
from shared.archive.responses import ProposeResult
from shared.workflow.requests import ProposeRequest, SessionId
from writer.auth import authenticate_header
from writer.problems import archive_problem

log = logging.getLogger("memarc.mcp")

#: JSON-RPC error code of an archive error that is not bad input (JSON-RPC 2.0 leaves -32000 to
#: -32099 to the implementation; the problem's own ``code`` in ``data`` says which error it is)
ARCHIVE_ERROR = -32050
#: HTTP statuses of bad input: answered as JSON-RPC "invalid params"
_INVALID_PARAMS_STATUSES = frozenset({400, 413, 415, 422})
#: where the HTTP endpoint keeps the principal it authenticated, in the request's ASGI scope
PRINCIPAL_SCOPE_KEY = "memarc.mcp.principal"
SERVER_NAME = "memarc"

#: the largest tool result: bytes of its UTF-8 JSON text (about 8,000 tokens of an assistant's
#: context); :func:`fit` cuts a larger one and says so in its ``truncated`` member
MAX_RESULT_BYTES = 32_768
_RECALL_RETURNS = ("Returns the JSON of POST /search: {results: [{card, score, retrieval, "
                   "similarity, below_floor}], excluded, expansion, floor, recall_id}; every "
                   "card verified "
                   "against PostgreSQL; `score` only orders this query's results (a fused rank "
                   "score, not a similarity); `similarity` is the cosine similarity to the "
                   "question, and `below_floor` marks a result under the workspace's floor, "
                   "where its evaluations almost never found a card that applied.")
#: descriptions of the recall tools' arguments (the input schema carries them, with the bounds)
_RECALL_ARGUMENTS = {
    "query": "The question or term, in the user's words.",
    "top": "How many cards to return.",
    "family": "Only these card families.",
    "filters": "scope (exact), concepts (all required), and database/schema/table/column "
               "(satisfied by one dependency entry of the card).",
    "exclude": "Card ids to leave out.",
    "session": "The caller's workflow session: cards decided in it are left out.",
    "min_score": "Leave out results whose similarity is below this (-1..1), or below the "
                 "workspace's floor with \"floor\": an empty answer then means no card applies.",
}


def mcp_error(exc: BaseException) -> MCPError:
    """The MCP error of an exception raised by a tool: ``data`` is the API's problem-details
    document (:func:`~writer.problems.archive_problem`; the store translates driver errors, an
    unavailable PostgreSQL to ``database_unavailable``); anything that is not an archive error
    is logged and answered as ``internal_error`` without its details."""
    if isinstance(exc, MCPError):
        return exc
    if not isinstance(exc, ArchiveError):
        log.error("unhandled error in an MCP request", exc_info=exc)
        exc = ArchiveError("the archive could not complete the request")
    elif exc.status >= 500:
        log.warning("mcp -> %s: %s", exc.code, exc.message)
    code = types.INVALID_PARAMS if exc.status in _INVALID_PARAMS_STATUSES else ARCHIVE_ERROR
    return MCPError(code=code, message=f"{exc.code}: {exc.message}", data=archive_problem(exc))


# ---- the tools ----

def _arguments_struct(name: str, request: type[msgspec.Struct], *, drop: tuple[str, ...] = (),
                      before: tuple[tuple[str, Any], ...] = (),
                      descriptions: dict[str, str] | None = None) -> type[msgspec.Struct]:
    """A struct of a tool's arguments: the fields ``before`` (name, type), then the fields of
    the API's ``request`` struct except ``drop``, with their types, bounds and defaults, and the
    ``descriptions`` (field name -> text) in the input schema."""
    fields: list[Any] = list(before)
    for f in msgspec.structs.fields(request):
        if f.name in drop:
            continue
        kind = f.type
        if descriptions and f.name in descriptions:
            kind = Annotated[kind, msgspec.Meta(description=descriptions[f.name])]
        if f.default is not msgspec.NODEFAULT:
            fields.append((f.name, kind, f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, kind, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, kind))
    return msgspec.defstruct(name, fields, forbid_unknown_fields=True, kw_only=True)


class GetCardArguments(msgspec.Struct, forbid_unknown_fields=True):
    """Arguments of ``get_card``: the card id (``mem-<uuid>``)."""

    card_id: models.CardRef


class ListPendingArguments(msgspec.Struct, forbid_unknown_fields=True):
    """Arguments of ``list_pending``: a page of the operations, oldest first (the bounds of
    ``GET .../pending``)."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0


#: ``search``, ``rules``, ``solved``: the body of ``POST .../search`` without ``mode``
SearchArguments = _arguments_struct("SearchArguments", SearchRequest, drop=("mode",),
                                    descriptions=_RECALL_ARGUMENTS)
#: ``propose``: the session id (the route's path parameter) and the body of the route
ProposeArguments = _arguments_struct(
    "ProposeArguments", ProposeRequest,
    before=(("session", Annotated[SessionId, msgspec.Meta(description="The workflow session.")]),),
    descriptions={"proposals": "Additions {key, decisions: [{id, status}], family, title, "
                               "content, scope, concepts, dependencies, links, rationale} and "
                               "updates {kind: update, card_id, revision, ...}."})


#: ``feedback``: the recall id (the route's path parameter) and the body of the route
FeedbackArguments = _arguments_struct(
    "FeedbackArguments", FeedbackRequest,
    before=(("recall_id", Annotated[str, msgspec.Meta(
        min_length=1, max_length=40,
        description="The recall_id of the search, rules or solved answer.")]),),
    descriptions={"cards": "Verdicts on cards that recall returned: {card_id, verdict: "
                           "helpful (it applied and you used it) | not_helpful (it did not "
                           "apply) | wrong (its content is wrong or out of date), note?}."})


def _schema(struct: Any) -> dict[str, Any]:
    """The JSON Schema of ``struct`` with an object at its root (as MCP wants) and the schemas
    it refers to under ``$defs``."""
    (ref,), components = msgspec.json.schema_components([struct], ref_template="#/$defs/{name}")
    root = dict(components.pop(ref["$ref"].rsplit("/", 1)[1]))
    if components:
        root["$defs"] = components
    return root


Call = Callable[[Archive, Principal, Any], Awaitable[Any]]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name and description, the permission a token needs to see it listed (the
    use case checks it again), its arguments struct, the member of its result that holds the
    result's list (cut first by :func:`fit`, None for a single object), whether it only reads,
    the activity verb its rejected calls are recorded under (mutating tools), and its call."""

    name: str
    title: str
    description: str
    permission: str
    arguments: Any
    items: str | None
    read_only: bool
    call: Call
    activity: str | None = None

    def tool(self) -> types.Tool:
        """The tool as ``tools/list`` shows it (no output schema: the result is sent once, as
        JSON text, see :func:`_result`)."""
        annotations = types.ToolAnnotations(
            title=self.title, read_only_hint=self.read_only, open_world_hint=False,
            **({} if self.read_only else {"destructive_hint": False, "idempotent_hint": True}))
        return types.Tool(name=self.name, title=self.title, description=self.description,
                          input_schema=_schema(self.arguments), annotations=annotations)


def _recall(mode: str) -> Call:
    async def call(archive: Archive, principal: Principal, args: Any) -> RecallResponse:
        req = SearchRequest(mode=mode, **msgspec.structs.asdict(args))  # type: ignore[arg-type]
        return await archive.search(principal, principal.workspace, req)

    return call


async def _get_card(archive: Archive, principal: Principal, args: Any) -> CardDetail:
    return await archive.get_card(principal, principal.workspace, args.card_id)


async def _list_pending(archive: Archive, principal: Principal, args: Any) -> PendingPage:
    return await archive.pending(principal, principal.workspace, args.limit, args.offset)


async def _propose(archive: Archive, principal: Principal, args: Any) -> ProposeResult:
    return await archive.workflow.propose(principal, principal.workspace, args.session,
                                          ProposeRequest(proposals=args.proposals))


async def _feedback(archive: Archive, principal: Principal, args: Any) -> FeedbackResult:
    return await archive.feedback.give(principal, principal.workspace, args.recall_id,
                                       FeedbackRequest(cards=args.cards), via="mcp")


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "search", "Recall domain memory",
        "Verified hybrid recall of the workspace's domain memory (definitions, SQL rules, "
        "explained errors): what a term means, which rule applies. " + _RECALL_RETURNS,
        "memory.read", SearchArguments, "results", True, _recall("search")),
    ToolSpec(
        "rules", "Recall SQL rules",
        "Verified recall of SQL rules and explained errors only: how to write the SQL, which "
        "mistakes to avoid. Returns what `search` returns.",
        "memory.read", SearchArguments, "results", True, _recall("rules")),
    ToolSpec(
        "solved", "Recall solved questions",
        "Verified recall of solved questions with the SQL that answered them, as examples "
        "(never an approval of a new query). Returns what `search` returns.",
        "memory.read", SearchArguments, "results", True, _recall("solved")),
    ToolSpec(
        "feedback", "Say which recalled cards helped",
        "After answering, say which cards of a recall (its `recall_id`) helped, did not apply, "
        "or are wrong; the curators see it, and cards marked wrong are reviewed. One verdict "
        "per card of a recall; sending another replaces it. Only cards that recall returned. "
        "Returns the stored verdicts, each with `change` (created, updated, unchanged).",
        "memory.read", FeedbackArguments, "cards", False, _feedback, activity="feedback"),
    ToolSpec(
        "get_card", "Show a card",
        "One card by id (`mem-<uuid>`) with its incoming links and open operations, as "
        "GET /{card_id}. Another workspace's card is not_found, like a missing one.",
        "memory.manage", GetCardArguments, None, True, _get_card),
    ToolSpec(
        "list_pending", "Pending index updates",
        "Cards saved but not yet indexed (left out of recall until then): the incomplete "
        "projection operations, oldest first, with attempts and last error, as GET /pending.",
        "memory.manage", ListPendingArguments, "operations", True, _list_pending),
    ToolSpec(
        "propose", "Propose cards for review",
        "Store proposals of a workflow session for a human reviewer (never writes a card). An "
        "addition needs one `approved` decision; an update names card_id and revision. "
        "Re-sending an identical proposal changes nothing. Returns each proposal's action "
        "(create|reuse|update), whether it was stored, whether it is stale, and its card_id.",
        "memory.propose", ProposeArguments, "proposals", False, _propose, activity="propose"),
)
TOOLS_BY_NAME = {spec.name: spec for spec in TOOLS}


def _encode(document: Any) -> bytes:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def _cut_longest_string(node: Any, excess: int) -> bool:
    """Shorten the longest string in ``node`` (a JSON document, changed in place) by at least
    ``excess`` characters plus its marker; False when no string is long enough to be worth it."""
    best: tuple[int, Any, Any] | None = None
    stack = [node]
    while stack:
        parent = stack.pop()
        pairs = parent.items() if isinstance(parent, dict) else enumerate(parent)
        for key, value in pairs:
            if isinstance(value, str):
                if best is None or len(value) > best[0]:
                    best = (len(value), parent, key)
            elif isinstance(value, (dict, list)):
                stack.append(value)
    if best is None or best[0] <= 64:
        return False
    length, parent, key = best
    keep = max(32, length - excess - 48)
    parent[key] = f"{parent[key][:keep]}… [cut: {length - keep} more characters]"
    return True


def fit(document: dict[str, Any], items: str | None,
        cap: int = MAX_RESULT_BYTES) -> bytes:
    """``document`` as compact UTF-8 JSON of at most ``cap`` bytes where it can be made so.

    A larger one gets a ``truncated`` member ``{returned, found, cap_bytes, hint}`` and loses,
    first, the last entries of its list ``items`` (the largest prefix that fits, found by
    bisection: recall results stay in rank order); when even one entry (or a single object)
    is too large, its longest strings are cut, each ending ``… [cut: N more characters]``
    (``strings_cut`` counts them). The whole document is always on the HTTP API, uncut.
    """
    text = _encode(document)
    if len(text) <= cap:
        return text
    found = len(document[items]) if items else 1
    note: dict[str, Any] = {
        "returned": found, "found": found, "cap_bytes": cap,
        "hint": "ask for fewer results (`top`, `limit`), or read one card with get_card; the "
                "HTTP API answers the whole document"}

    def trimmed(k: int) -> dict[str, Any]:
        return {**document, **({items: document[items][:k]} if items else {}),
                "truncated": {**note, "returned": k}}

    kept = found
    if items:
        low, high = 0, found - 1
        while low < high:
            middle = (low + high + 1) // 2
            if len(_encode(trimmed(middle))) <= cap:
                low = middle
            else:
                high = middle - 1
        if low:
            return _encode(trimmed(low))
        kept = min(found, 1)
    shortened = json.loads(_encode(trimmed(kept)))
    marked = {**shortened.pop("truncated"), "strings_cut": 0}
    for _ in range(64):  # a cut removes at least the excess; bounded all the same
        excess = len(_encode({**shortened, "truncated": marked})) - cap
        if excess <= 0 or not _cut_longest_string(shortened, excess):
            break
        marked["strings_cut"] += 1
    return _encode({**shortened, "truncated": marked})


def _result(spec: ToolSpec, value: Any) -> types.CallToolResult:
    """A tool's result: the API's JSON document, sent once as text (no structured copy: an
    assistant reads the text), cut to :data:`MAX_RESULT_BYTES` by :func:`fit`."""
    text = fit(msgspec.to_builtins(value), spec.items).decode()
    return types.CallToolResult(content=[types.TextContent(text=text)])


# ---- the server ----

#: How a request's principal is found: from the HTTP request's scope, or MEMARC_TOKEN (stdio)
Identify = Callable[[ServerRequestContext[Any, Any]], Awaitable[Principal]]


def build_server(archive_of: Callable[[], Archive], identify: Identify) -> Server[Any]:
    """The MCP server over the archive that ``archive_of`` returns, with the principal of each
    request from ``identify``.

    ``tools/list``: the tools the principal's permissions allow. ``tools/call``: check the
    tool's permission (403 ``forbidden`` before any argument is read), validate the
    arguments with the API's structs, call the use case with the token's workspace, answer its
    result (:func:`_result`) or raise :func:`mcp_error` (an unknown tool is ``not_found``).
    """

    definitions = [(spec.permission, spec.tool()) for spec in TOOLS]

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        try:
            principal = await identify(ctx)
        except Exception as exc:  # noqa: BLE001 - every error is answered as an MCP error
            raise mcp_error(exc) from exc
        return types.ListToolsResult(
            tools=[tool for permission, tool in definitions if principal.allows(permission)])

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        principal: Principal | None = None
        spec = TOOLS_BY_NAME.get(params.name)
        try:
            principal = await identify(ctx)
            if spec is None:
                raise NotFound(f"no tool {params.name!r} (tools: {', '.join(TOOLS_BY_NAME)})")
            # as the API's guard: the permission before the arguments, so that a token never
            # learns the arguments of a tool it may not call (403, not 422)
            principal.require(principal.workspace, spec.permission)
            args = models.convert(params.arguments or {}, spec.arguments)
            return _result(spec, await spec.call(archive_of(), principal, args))
        except Exception as exc:  # noqa: BLE001 - every error is answered as an MCP error
            if spec is not None and spec.activity and principal is not None:
                # as the writer's boundary does: a rejection that never reached the use case
                await record_rejection(archive_of().db, principal, principal.workspace,
                                       spec.activity, exc)
            raise mcp_error(exc) from exc

    return Server(SERVER_NAME, version="0.1.0", title="Memory archive",
                  instructions="Verified recall of this workspace's knowledge cards (search, "
                               "rules, solved), card look-up, and proposals for review. The "
                               "workspace is the token's. Results are JSON text of at most "
                               f"{MAX_RESULT_BYTES} bytes; a longer one is cut and says so "
                               "in `truncated`.",
                  on_list_tools=list_tools, on_call_tool=call_tool)


# ---- streamable HTTP (the writer's /mcp) ----

class McpHttpEndpoint:
    """The MCP server over the SDK's streamable HTTP transport, as an ASGI app the writer mounts
    at ``/mcp`` (stateless: every POST carries its own token and is answered by itself in JSON, so
    any writer replica can answer any request; bodies up to the API's 1 MB).

    Each request is authenticated first (:func:`~writer.auth.authenticate_header`, failures
    counted and logged like the API's); without a valid token it is answered HTTP 401 (503
    when PostgreSQL is down) with a JSON-RPC error carrying the problem document, else it
    goes to the SDK's session manager with the principal in its scope. :meth:`run` is the
    session manager's lifespan (the writer's lifespan enters it).
    """

    def __init__(self, archive_of: Callable[[], Archive], failures: FailedAuthLog) -> None:
        self.archive_of = archive_of
        self.failures = failures
        self.server = build_server(archive_of, self._principal)
        self.session_manager = StreamableHTTPSessionManager(
            app=self.server, stateless=True, json_response=True,
            max_request_body_size=models.MAX_BODY_BYTES)  # the API's limit (413 beyond)

    @staticmethod
    async def _principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
        principal = (ctx.request.scope if ctx.request is not None else {}).get(PRINCIPAL_SCOPE_KEY)
        if not isinstance(principal, Principal):  # a wiring error: the endpoint sets it
            raise ArchiveError("this MCP request was not authenticated")
        return principal

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Run the SDK's session manager (once per endpoint) for the writer's lifetime."""
        async with self.session_manager.run():
            yield

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("method") == "GET":
            # Stateless: no server-initiated messages, so no SSE stream to offer (the SDK would
            # hold an empty one open until the client leaves); the transport's spec allows 405.
            await _send_method_not_allowed(send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        client = scope.get("client")
        try:
            principal = await authenticate_header(
                self.archive_of().db, self.failures, headers.get("authorization", ""),
                client[0] if client else "?", scope.get("path", "/mcp"))
        except ArchiveError as exc:
            await _send_rejection(send, mcp_error(exc))
            return
        await self.session_manager.handle_request({**scope, PRINCIPAL_SCOPE_KEY: principal},
                                                  receive, send)


async def _send_method_not_allowed(send: Any) -> None:
    """Answer ``GET /mcp``: 405 with ``Allow: POST`` and a JSON-RPC error (id null)."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": "Method Not Allowed: this stateless endpoint offers no SSE "
                                   "stream; send JSON-RPC messages with POST"}}).encode()
    await send({"type": "http.response.start", "status": 405, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"allow", b"POST")]})
    await send({"type": "http.response.body", "body": body})


async def _send_rejection(send: Any, error: MCPError) -> None:
    """Answer a request refused before any MCP message was read: the problem's HTTP status and a
    JSON-RPC error (id null) whose ``data`` is the problem document."""
    status = int((error.data or {}).get("status", 500))
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error.error.model_dump(
        mode="json", exclude_none=True)}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# ---- stdio (memarc mcp) ----

async def serve_stdio(archive: Archive, token: str) -> None:
    """Serve MCP over this process's stdin and stdout until stdin closes, as the holder of
    ``token`` (``MEMARC_TOKEN``), authenticated for every request: a revoked token is refused
    from its next request on (``unauthorized``). Failed authentications are logged on
    ``memarc.auth`` as client ``stdio``."""
    from mcp.server.stdio import stdio_server

    failures = FailedAuthLog()

    async def identify(ctx: ServerRequestContext[Any, Any]) -> Principal:
        return await authenticate_header(archive.db, failures, f"Bearer {token}", "stdio",
                                         f"mcp:{ctx.method}")

    server = build_server(lambda: archive, identify)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
