"""The archive's error hierarchy: one root, translated to HTTP at the writer's boundary.

Each class docstring is its default message. ``status`` is the HTTP status the writer maps it to;
``code`` is a stable machine-readable identifier carried in the problem-details body. Every error
class of the archive is defined here; driver errors (psycopg) are translated into them once, in
the store (:mod:`shared.store.database`), and never leave it.
"""

from __future__ import annotations

from typing import Any


class ArchiveError(Exception):
    """The memory archive could not complete the request."""

    status = 500
    code = "internal_error"
    #: set once an activity record of this failed attempt is written
    #: (:func:`shared.archive.activity.record_rejection`), so no other layer records it again
    activity_recorded: bool = False

    def __init__(self, message: str | None = None, **extra: Any) -> None:
        #: the ``detail`` of the problem document
        self.message = message or (self.__doc__ or "").strip()
        #: further members of the problem document (``field``, ``item``, ``permissions``, ...)
        self.extra = extra
        super().__init__(self.message)


def mark_recorded(exc: BaseException) -> None:
    """Note that the failed attempt ``exc`` has its activity record. An archive error keeps it in
    :attr:`ArchiveError.activity_recorded`; any other exception (a bug, or an error of the web
    framework the writer rejects with) carries the same attribute."""
    try:
        exc.activity_recorded = True  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover - builtin exceptions without __dict__
        pass


def is_recorded(exc: BaseException) -> bool:
    """True when :func:`mark_recorded` noted ``exc``."""
    return bool(getattr(exc, "activity_recorded", False))


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

    def __init__(self, message: str | None = None, *, reason: str = "?", **extra: Any) -> None:
        super().__init__(message, **extra)
        #: why the token was refused (``missing``, ``malformed``, ``unknown``, ``revoked``,
        #: ``expired``), for the failed-authentication log only, never in the response
        self.reason = reason


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


class NoPreviousIndex(Conflict):
    """The workspace has no previous index to switch back to or drop.

    Only a shadow switch keeps one, until it is dropped."""

    code = "no_previous_index"


class StaleRevision(Conflict):
    """The card has changed since the revision this request edits."""

    code = "stale_revision"


class SummaryChanged(Conflict):
    """The session's summary changed since the version a review was made on (a proposal it
    showed was reviewed or erased meanwhile): reload the summary and review again."""

    code = "summary_changed"


class SummaryVersionRequired(ArchiveError):
    """A review that declines every proposal must name the summary version it was made on.

    (``decline_all`` names no proposal; without the ``version`` that ``GET …/summary`` answers
    it would decline proposals stored after the reviewer looked: RFC 6585's 428 Precondition
    Required.)"""

    status = 428
    code = "summary_version_required"


class IntegrityViolation(Conflict):
    """PostgreSQL refused a write that would break a reference or a uniqueness rule."""

    code = "integrity_violation"


class RecordRefused(ArchiveError):
    """PostgreSQL refused to store a record (a privilege or a rule of its table): a recall's
    record (migration 026) is then lost, and the recall answers without it."""

    status = 500
    code = "record_refused"


class MigrationError(ArchiveError):
    """The migrations cannot be applied."""

    status = 500
    code = "migration_error"


class BoundaryRejection(ArchiveError):
    """The request was rejected before it reached the archive."""

    def __init__(self, message: str, *, status: int, code: str, cause: BaseException) -> None:
        super().__init__(message)
        self.status, self.code = status, code
        #: the web framework's error this rejection stands for (recorded through this one)
        self.cause = cause
        mark_recorded(cause)


class Unavailable(ArchiveError):
    """A dependency of the archive is unavailable."""

    status = 503
    code = "unavailable"


class DatabaseUnavailable(Unavailable):
    """PostgreSQL is unavailable."""

    code = "database_unavailable"


class StatementCanceled(Unavailable):
    """PostgreSQL is unavailable.

    It canceled the statement (a statement timeout, or an administrator's cancel) while the server
    itself answers: the same answer as :class:`DatabaseUnavailable`, but the server is not marked
    unreachable, and the worker does not take it for an outage.
    """

    code = "database_unavailable"


class BootstrapUnavailable(Unavailable):
    """PostgreSQL cannot be reached with the migrator credentials (a bootstrap command)."""


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


class PrivacyFilterFailed(Unavailable):
    """The privacy filter could not redact a text; nothing was sent to the embedder or the index.

    A 503 like any other part of the pipeline that cannot safely proceed (fail closed)."""

    code = "privacy_filter_failed"


class QueueUnavailable(Unavailable):
    """The projection queue (Redis) is unavailable."""

    code = "queue_unavailable"
