"""Authentication and authorisation at the writer's boundary (DESIGN §8).

Every archive route has the :func:`authorize` guard, which Litestar runs before it reads the
body or the query: an unauthenticated caller learns nothing about the request's shape (401
before any 400), a token of another workspace gets 404 exactly like a missing workspace, and a
token without the route's permission (``opt["permission"]``: one, or a tuple of alternatives)
gets 403. The principal is kept in
the connection's scope for the handler's ``principal`` dependency; ``shared`` checks it again.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from shared.archive.authentication import FailedAuthLog, authenticate
from shared.auth import Principal
from shared.errors import BadRequest, Unauthorized
from shared.store.database import Database

PRINCIPAL_KEY = "memarc_principal"


def client_address(connection: ASGIConnection) -> str:
    """The caller's address as the server saw it (``?`` when unknown)."""
    return connection.client.host if connection.client else "?"


def principal_of(scope: Any) -> Principal | None:
    """The principal :func:`authorize` admitted for this request, if any."""
    return (scope.get("state") or {}).get(PRINCIPAL_KEY)


async def authorize(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    """Guard: authenticate ``Authorization: Bearer <token>``, then check the path's workspace and
    the route's permission. A failed authentication is counted and logged with the caller's
    address (never the token) by the app's :class:`~shared.archive.authentication.FailedAuthLog`.

    :raises Unauthorized: missing, unknown, revoked or expired token (401).
    :raises NotFound: the token belongs to another workspace (404).
    :raises Forbidden: the token lacks ``opt["permission"]`` (403).
    """
    state = connection.app.state
    principal = await authenticate_header(
        state.archive.db, state.auth_failures, connection.headers.get("authorization", ""),
        client_address(connection), connection.url.path)
    connection.scope.setdefault("state", {})[PRINCIPAL_KEY] = principal
    principal.require(str(connection.path_params.get("workspace_id", "")),
                      *route_permissions(handler))


async def authenticate_header(db: Database, failures: FailedAuthLog, authorization: str,
                              client: str, path: str) -> Principal:
    """The principal of an ``Authorization: Bearer <token>`` header value: for the routes'
    guard (:func:`authorize`), the MCP endpoint at ``/mcp``, and ``memarc mcp`` (which passes
    ``Bearer $MEMARC_TOKEN``). A failure is counted and logged by ``failures`` with ``client`` and
    ``path`` (never the token).

    :raises Unauthorized: missing, malformed, unknown, revoked or expired token.
    :raises DatabaseUnavailable: PostgreSQL cannot be reached.
    """
    scheme, _, token = authorization.partition(" ")
    try:
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("send Authorization: Bearer <token>", reason="missing")
        return await authenticate(db, token.strip())
    except Unauthorized as exc:
        failures.record(client, exc.reason, path)
        raise


def route_permissions(handler: BaseRouteHandler) -> tuple[str, ...]:
    """The permissions of a route (``opt["permission"]``: one, or a tuple of which any one is
    enough, e.g. a session's summary for the proposer and the reviewer)."""
    permission = handler.opt["permission"]
    return (permission,) if isinstance(permission, str) else tuple(permission)


async def provide_principal(request: Request) -> Principal:
    """The principal admitted by :func:`authorize` (dependency of the archive routes).

    :raises Unauthorized: the route has no :func:`authorize` guard (a wiring error).
    """
    principal = principal_of(request.scope)
    if principal is None:
        raise Unauthorized("this route is not behind the authorization guard")
    return principal


async def reject_unknown_query(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    """Guard (after :func:`authorize`): a query parameter the route does not take is a 400, not
    silently ignored (a misspelt list filter would otherwise answer an unfiltered page). What the
    route takes is read from the handler itself (:func:`query_parameters`); a path parameter's
    name given in the query is ignored, as Litestar does.

    :raises BadRequest: an unknown query parameter (named, with the allowed ones).
    """
    path = frozenset(connection.path_params)
    # worked out once per handler and path, in the app's own state: a module-level cache keyed
    # by the handler would keep every app ever built alive (the test suite builds hundreds)
    cache = connection.app.state.get(_QUERY_PARAMETERS)
    if cache is None:
        cache = connection.app.state[_QUERY_PARAMETERS] = {}
    taken = cache.get((handler, path))
    if taken is None:
        taken = cache[(handler, path)] = query_parameters(handler, path)
    unknown = sorted(set(connection.query_params) - taken - path)
    if unknown:
        names = ", ".join(sorted(taken)) or "none"
        raise BadRequest(f"unknown query parameter {unknown[0]!r} (this route takes: {names})",
                         parameter=unknown[0][:100])


#: the app state's key of :func:`reject_unknown_query`'s cache of :func:`query_parameters`
_QUERY_PARAMETERS = "memarc_query_parameters"


def query_parameters(handler: BaseRouteHandler, path_parameters: frozenset[str]) -> frozenset[str]:
    """The query parameters a route handler takes (their names in the query), as Litestar reads
    them from its signature and its dependencies' for the route's ``path_parameters`` (the guard
    keeps the answer per handler in the app's state)."""
    names = dict.fromkeys(path_parameters)  # only the names are read
    model = handler.create_kwargs_model(path_parameters=names)  # type: ignore[arg-type]
    return frozenset(p.field_alias for p in model.expected_query_params)
