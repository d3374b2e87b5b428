"""The writer's error documents: RFC 9457 problem details, as answered and as documented.

Every 4xx and 5xx of the writer is ``application/problem+json`` with ``type``, ``title``,
``status``, ``detail`` and a machine-readable ``code``; some carry more members (``instance``,
``field``, ``item``, ``limit``, ``parameter``, ``errors``; a 403 for a missing permission
``permissions``, the ones the route takes). :data:`PROBLEM_RESPONSES` documents
them in the OpenAPI document of every archive route, so clients and Schemathesis see the shape
the writer really answers.

:data:`EXCEPTION_HANDLERS` is the one table that turns every error into a problem-details
response (archive errors, Litestar's HTTP errors, a lost PostgreSQL, anything unexpected);
:func:`record_boundary_rejection` records the rejections that never reached ``shared``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.types import Scope

from shared import models
from shared.archive.activity import record_rejection
from shared.enum_errors import with_allowed
from shared.errors import ArchiveError, BoundaryRejection, is_recorded
from writer.auth import principal_of

if TYPE_CHECKING:
    from shared.archive.cards import Archive

log = logging.getLogger("memarc.writer")

PROBLEM = "application/problem+json"
_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed",
               413: "request_too_large", 401: "unauthorized", 403: "forbidden"}


def problem_body(status: int, title: str, detail: str, code: str, instance: str | None = None,
                 **extra: Any) -> dict[str, Any]:
    """An RFC 9457 problem-details document: ``type``, ``title``, ``status``, ``detail``,
    ``code``, ``instance`` when given, then the ``extra`` members that are not None."""
    body: dict[str, Any] = {"type": f"https://memarc.dev/problems/{code}", "title": title,
                            "status": status, "detail": detail, "code": code}
    if instance is not None:
        body["instance"] = instance
    body.update({k: v for k, v in extra.items() if v is not None})
    return body


def archive_problem(exc: ArchiveError, instance: str | None = None) -> dict[str, Any]:
    """The problem-details document of an archive error: its status and ``code``, its message
    as ``detail``, the first line of its class docstring as ``title``, its ``extra`` members
    (``field``, ``item``, ``permissions``, ...). The HTTP API and the MCP server both answer it."""
    title = (type(exc).__doc__ or "").strip().splitlines()[0]
    return problem_body(exc.status, title, exc.message, exc.code, instance, **exc.extra)


class ProblemDetails(msgspec.Struct, omit_defaults=True):
    """An RFC 9457 problem-details body (further members may follow)."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    instance: str | None = None


def _spec(description: str) -> ResponseSpec:
    return ResponseSpec(data_container=ProblemDetails, description=description,
                        media_type=PROBLEM, generate_examples=False)


#: The error responses every archive route may answer (``responses=`` of each handler).
PROBLEM_RESPONSES: dict[int, Any] = {
    400: _spec("The request could not be read (malformed body or query, unknown parameter)."),
    401: _spec("No valid bearer token (missing, unknown, revoked or expired)."),
    403: _spec("The token lacks the route's permission, or its database/schema binding."),
    404: _spec("No such workspace, card, session or rebuild for this token."),
    409: _spec("Conflict with the current state (stale revision, replayed id, running rebuild)."),
    413: _spec("The request body is over the route's limit (named in the body)."),
    422: _spec("The request is well-formed but invalid (a bound or a rule, named in the body)."),
    503: _spec("A dependency is unavailable or saturated (code: database_unavailable, "
               "schema_outdated, lock_timeout, transaction_conflict, pool_exhausted, "
               "index_unavailable, ...)."),
}

#: The import route also refuses a content encoding other than gzip.
IMPORT_PROBLEM_RESPONSES: dict[int, Any] = {
    **PROBLEM_RESPONSES,
    415: _spec("The body's Content-Encoding is neither gzip nor identity."),
}


def problem(status: int, title: str, detail: str, code: str, request: Request | None = None,
            **extra: Any) -> Response:
    """An RFC 9457 problem-details response (:func:`problem_body`)."""
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
        errors = [_name_allowed_values(request, e) for e in errors or []] or None
        enum_errors = [f"{e.get('key')}: {e['message']}" for e in errors or []
                       if str(e.get("message", "")).startswith("Invalid enum value")]
        return problem(400, "The request could not be read.",
                       "; ".join(enum_errors) or str(exc.detail), "bad_request",
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


def _name_allowed_values(request: Request, error: Any) -> Any:
    """A Litestar validation error (``{message, key, source}``) whose message is an enum error,
    with the allowed values added (:func:`shared.enum_errors.with_allowed`): found in the route's
    body type (``source`` ``body``) or its signature model (a query, path or header parameter)."""
    if not isinstance(error, dict) or not isinstance(error.get("message"), str) \
            or not isinstance(error.get("key"), str):
        return error
    handler = request.scope.get("route_handler")
    if handler is None:
        return error
    if error.get("source") == "body":
        data = handler.parsed_fn_signature.parameters.get("data")
        type_, path = (data.annotation if data is not None else None), error["key"]
    else:
        type_, path = handler.signature_model, error["key"]
    if type_ is None:
        return error
    return {**error, "message": with_allowed(error["message"], type_, path)}


#: msgspec's message when a body nests deeper than the interpreter's recursion limit allows.
_TOO_DEEP = "while deserializing"


def too_deeply_nested(exc: BaseException) -> bool:
    """True for the ``RecursionError`` msgspec raises while decoding a body nested deeper than
    Python's recursion limit (about 1,000 levels of ``[`` or ``{``): the client's fault, a 400,
    not an internal error. Any other ``RecursionError`` stays a 500."""
    return isinstance(exc, RecursionError) and _TOO_DEEP in str(exc)


def _too_deep(request: Request, exc: RecursionError) -> Response:
    if not too_deeply_nested(exc):
        return _internal_error(request, exc)
    return problem(400, "The request could not be read.",
                   "the JSON body is nested too deeply to be read", "bad_request", request)


def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem(500, "Internal error", "the archive could not complete the request",
                   "internal_error", request)


#: The writer's one table of exception handlers (``exception_handlers=`` of the app).
EXCEPTION_HANDLERS: dict[type[Exception], Any] = {
    ArchiveError: _archive_error,
    HTTPException: _http_error,
    RecursionError: _too_deep,
    Exception: _internal_error,
}


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
            or is_recorded(exc):
        return
    if too_deeply_nested(exc):
        exc = BoundaryRejection("the JSON body is nested too deeply to be read", status=400,
                                code="bad_request", cause=exc)
    elif isinstance(exc, HTTPException) and not isinstance(exc, ArchiveError):
        code = "bad_request" if isinstance(exc, ValidationException) else _HTTP_CODES.get(
            exc.status_code, "http_error")
        exc = BoundaryRejection(str(exc.detail), status=exc.status_code, code=code, cause=exc)
    card = (scope.get("path_params") or {}).get("card_id")
    archive: Archive = scope["litestar_app"].state.archive
    await record_rejection(archive.db, principal, workspace, verb, exc,
                           card_uuid=models.parse_card_id(card) if isinstance(card, str) else None)
