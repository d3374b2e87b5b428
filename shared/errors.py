"""The archive's error hierarchy: one root, translated to HTTP at the writer's boundary.

Each class docstring is its default message. ``status`` is the HTTP status the writer maps it to;
``code`` is a stable machine-readable identifier carried in the problem-details body.
"""

from __future__ import annotations

from typing import Any


class ArchiveError(Exception):
    """The memory archive could not complete the request."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str | None = None, **extra: Any) -> None:
        self.message = message or (self.__doc__ or "").strip()
        self.extra = extra
        super().__init__(self.message)


class InvalidInput(ArchiveError):
    """The request is not valid."""

    status = 422
    code = "invalid_input"


class BadRequest(ArchiveError):
    """The request could not be read."""

    status = 400
    code = "bad_request"


class UnsupportedEncoding(ArchiveError):
    """The body's content encoding is not supported."""

    status = 415
    code = "unsupported_encoding"


class Unauthorized(ArchiveError):
    """A valid bearer token is required."""

    status = 401
    code = "unauthorized"


class Forbidden(ArchiveError):
    """The token does not allow this operation."""

    status = 403
    code = "forbidden"


class NotFound(ArchiveError):
    """Not found (or not visible to this token)."""

    status = 404
    code = "not_found"


class Conflict(ArchiveError):
    """The request conflicts with the current state."""

    status = 409
    code = "conflict"


class StaleRevision(Conflict):
    """The card has changed since the revision this request edits."""

    code = "stale_revision"


class Unavailable(ArchiveError):
    """A dependency of the archive is unavailable."""

    status = 503
    code = "unavailable"


class DatabaseUnavailable(Unavailable):
    """PostgreSQL is unavailable."""

    code = "database_unavailable"


class LockTimeout(Unavailable):
    """A workspace lock (or a row lock) was not granted within ``MEMARC_LOCK_TIMEOUT_SECONDS``:
    another transaction of the workspace holds it (a long rebuild switch, a stuck client)."""

    code = "lock_timeout"


class TransactionConflict(Unavailable):
    """PostgreSQL aborted the transaction to resolve a deadlock or a serialization conflict with
    a concurrent one: nothing was written, the server is fine, and the same request can simply
    be sent again."""

    code = "transaction_conflict"


class PoolExhausted(Unavailable):
    """Every pooled PostgreSQL connection stayed in use for the whole pool wait
    (``MEMARC_DB_POOL_TIMEOUT_SECONDS``): the server is reachable but this process is saturated
    (``MEMARC_DB_POOL_SIZE`` connections busy); nothing was done, try again."""

    code = "pool_exhausted"


class SchemaOutdated(Unavailable):
    """The archive schema is missing or outdated: run `memarc migrate`."""

    code = "schema_outdated"


class IndexUnavailable(Unavailable):
    """The search index is unavailable."""

    code = "index_unavailable"


class IndexIncompatible(Unavailable):
    """The search index was built with another embedding model or vector configuration."""

    code = "index_incompatible"


class EmbedderUnavailable(Unavailable):
    """The embedding model is not loaded in this process."""

    code = "embedder_unavailable"


class QueueUnavailable(Unavailable):
    """The projection queue (Redis) is unavailable."""

    code = "queue_unavailable"
