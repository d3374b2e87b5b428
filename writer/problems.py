"""The writer's error documents: RFC 9457 problem details, as answered and as documented.

Every 4xx and 5xx of the writer is ``application/problem+json`` with ``type``, ``title``,
``status``, ``detail`` and a machine-readable ``code``; some carry more members (``instance``,
``field``, ``item``, ``limit``, ``parameter``, ``errors``; a 403 for a missing permission
``permissions``, the ones the route takes). :data:`PROBLEM_RESPONSES` documents
them in the OpenAPI document of every archive route, so clients and Schemathesis see the shape
the writer really answers.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar.openapi.datastructures import ResponseSpec

from shared.errors import ArchiveError

PROBLEM = "application/problem+json"


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
