"""Activity records of rejected and failed attempts (DESIGN §8): :func:`audited` and its helper.

Every state change writes an activity record (who, verb, card, outcome, time). A successful change
writes it in its own transaction; a rejected or failed attempt writes it here, in a transaction of
its own, so it is the only trace the attempt leaves. Two layers record, and each attempt is
recorded once (:func:`~shared.errors.mark_recorded`, :attr:`ArchiveError.activity_recorded`):

- :func:`audited` wraps every mutating use case of ``shared`` and records whatever escapes it (bad
  input, a missing permission, a card id that is not one, a dependency that failed), naming the
  card (``card_id``), the session (``session_id``) or the run (``req.run_id``) from its arguments;
- the writer's boundary records what never reached ``shared`` (an unreadable body, a query
  parameter out of bounds, a body over the size limit) with :func:`record_rejection`.

A principal of another workspace leaves no record: its attempt is not written into a workspace
it cannot see (the writer answers 404, as for a missing workspace).
"""

from __future__ import annotations

import functools
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from shared.auth import Principal
from shared.errors import (ArchiveError, DatabaseUnavailable, PoolExhausted, StatementCanceled,
                           is_recorded, mark_recorded)
from shared.models import parse_card_id
from shared.store import activity
from shared.store.database import Database

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def outcome_of(exc: BaseException) -> str:
    """``rejected:<code>`` for a 4xx error, ``failed:<code>`` for anything else."""
    if isinstance(exc, ArchiveError) and exc.status < 500:
        return f"rejected:{exc.code}"
    return f"failed:{getattr(exc, 'code', 'internal_error')}"


def _printable(value: Any) -> Any:
    """``value`` (a detail: strings, lists, dicts) with each NUL character written as the six
    characters ``\\u0000``: a rejected request may carry one (its session or run id, say), and
    PostgreSQL's jsonb cannot store it, so the record would be lost."""
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000")
    if isinstance(value, dict):
        return {_printable(k): _printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_printable(v) for v in value]
    return value


async def record_rejection(db: Database, principal: Principal, workspace: str, verb: str,
                           exc: BaseException, *, card_uuid: uuid.UUID | None = None,
                           detail: dict[str, Any] | None = None) -> bool:
    """Record a rejected or failed ``verb`` in its own transaction, once per exception.

    Nothing is recorded when the principal belongs to another workspace, when the exception was
    recorded already, or when PostgreSQL or the pool is the failing dependency (it cannot take the
    record).
    A failure to record is logged, never raised: the caller re-raises the original error.

    :returns: True when a record was written by this call.
    """
    if is_recorded(exc) or workspace != principal.workspace:
        return False
    mark_recorded(exc)
    if isinstance(exc, (DatabaseUnavailable, StatementCanceled, PoolExhausted)):
        return False  # PostgreSQL (or the pool) is what failed: a record would only wait for it
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    try:
        async with db.transaction(workspace) as conn:
            await activity.record(
                conn, workspace, actor=principal.actor, verb=verb, card_uuid=card_uuid,
                outcome=outcome_of(exc),
                detail=_printable({**(detail or {}), "message": message[:500]}))
    except Exception:  # noqa: BLE001 - the original error is what the caller reports
        log.warning("could not record %s %s in %s", outcome_of(exc), verb, workspace)
        return False
    return True


def audited(verb: str) -> Callable[[F], F]:
    """Decorate a mutating use case ``(self, principal, workspace, ...)`` whose ``self`` has a
    ``db``: any exception it raises is recorded as a rejected or failed ``verb`` (unless recorded
    already), then re-raised. A ``card_id`` argument names the card; ``session_id`` and a body
    with a ``run_id`` go into the detail."""

    def decorate(func: F) -> F:
        signature = inspect.signature(func)

        @functools.wraps(func)
        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return await func(self, *args, **kwargs)
            except Exception as exc:
                bound = signature.bind_partial(self, *args, **kwargs).arguments
                principal, workspace = bound.get("principal"), bound.get("workspace")
                if isinstance(principal, Principal) and isinstance(workspace, str):
                    card_id = bound.get("card_id")
                    detail = {k: str(v)[:200] for k, v in (
                        ("session", bound.get("session_id")),
                        ("run", getattr(bound.get("req"), "run_id", None))) if v is not None}
                    await record_rejection(
                        self.db, principal, workspace, verb, exc, detail=detail,
                        card_uuid=parse_card_id(card_id) if isinstance(card_id, str) else None)
                raise

        wrapper.activity_verb = verb  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
