"""What the archive's use cases answer (:class:`shared.archive.cards.Archive`): one msgspec
Struct per answer, so that every surface (the writer's OpenAPI document, the MCP server, the CLI
over HTTP) sees its shape. The JSON of each is what the API answers.

:class:`~shared.projection.reconciliation.AuditReport` (an audit) and
:class:`~shared.models.RecallResponse` (a recall) are made in lower layers; they are re-exported
here so that the answers of the use cases are imported from one place.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

import msgspec

from shared.models import Card, IncomingLink, IndexStatus, RecallResponse
from shared.projection.reconciliation import AuditReport

__all__ = ["ActivityEntry", "ActivityPage", "AuditReport", "CardDetail", "CardPage",
           "DeleteResult", "DependencyStatus", "ImportResult", "OpenOperation",
           "PendingOperation", "PendingPage", "QueuedRebuild", "Readiness", "RecallResponse",
           "Rebuild", "RetryResult", "WorkspaceStatus", "WriteResult"]


class WriteResult(msgspec.Struct):
    """Response of a create or update: the card as committed and its index status."""

    card: Card
    index_status: IndexStatus


class DeleteResult(msgspec.Struct):
    """Response of a delete: the removed id and whether its point is gone yet."""

    deleted: str
    index_status: Literal["current", "pending"]


#: What a projection operation does, and the statuses of one not done yet.
OperationKind = Literal["upsert", "delete"]
OpenStatus = Literal["pending", "running", "failed"]


class OpenOperation(msgspec.Struct):
    """An incomplete projection operation of a card: an ``upsert`` of a ``revision`` or a
    ``delete`` (no revision), its status, attempts and last error, and its age."""

    id: int
    op: OperationKind
    revision: int | None
    status: OpenStatus
    attempts: int
    last_error: str | None
    created_at: datetime
    age_seconds: float


class PendingOperation(msgspec.Struct):
    """An incomplete projection operation of the workspace (:class:`OpenOperation`, with its
    card's id, its lease and last update, and the card's title: None once the card is
    deleted)."""

    id: int
    card_id: str
    op: OperationKind
    revision: int | None
    status: OpenStatus
    attempts: int
    last_error: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    age_seconds: float
    title: str | None


class CardDetail(msgspec.Struct):
    """A card with its incoming links and projection detail (show)."""

    card: Card
    incoming_links: list[IncomingLink]
    open_operations: list[OpenOperation]


class CardPage(msgspec.Struct):
    """One page of a listing."""

    cards: list[Card]
    total: int
    page: int
    per_page: int


class PendingPage(msgspec.Struct):
    """Incomplete projection operations."""

    operations: list[PendingOperation]
    total: int


class RetryResult(msgspec.Struct):
    """Operations re-queued by a retry."""

    card_id: str
    operations: list[int]
    enqueued: bool


class ImportResult(msgspec.Struct):
    """What an import did: cards ``created`` (and ``by_family``, per family of those), existing
    cards ``updated`` (``on_conflict=update``, something differed), existing cards left as they
    were (``unchanged``: compared and equal, with ``update``; ``skipped``: not compared, with
    ``skip``), and whether Redis took the projection jobs (``enqueued``; true when there were
    none)."""

    created: int
    by_family: dict[str, int]
    enqueued: bool
    updated: int = 0
    unchanged: int = 0
    skipped: int = 0


class ActivityEntry(msgspec.Struct):
    """One activity record: a state change, or a rejected or failed attempt (``outcome``
    ``rejected:<code>`` / ``failed:<code>``); ``card_id`` None when it names no card."""

    id: int
    at: datetime
    actor: str
    verb: str
    card_id: str | None
    outcome: str
    detail: dict[str, Any] | None


class ActivityPage(msgspec.Struct):
    """A page of the activity log, newest first, and how many records match in all."""

    activity: list[ActivityEntry]
    total: int


class Rebuild(msgspec.Struct):
    """A tracked index rebuild: ``status`` (queued, running, done, failed), progress ``done`` of
    ``total``, the ``collection`` it writes, its ``summary`` or ``error``."""

    id: uuid.UUID
    workspace_id: str
    status: Literal["queued", "running", "done", "failed"]
    requested_by: str
    total: int | None
    done: int
    collection: str | None
    summary: dict[str, Any] | None
    error: str | None
    lease_expires_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class QueuedRebuild(Rebuild):
    """A rebuild just queued, and whether Redis took its job (``enqueued``; the sweep starts it
    otherwise)."""

    enqueued: bool


class DependencyStatus(msgspec.Struct):
    """Whether the archive's dependencies answer: PostgreSQL (up, since it answered) and the
    projection queue (Redis)."""

    database: Literal["up"]
    queue: Literal["up", "down"]


class Readiness(msgspec.Struct):
    """Whether the process can serve: ``ready``, or ``degraded`` while the projection queue
    (Redis) is down (saves still commit, their projection waits)."""

    status: Literal["ready", "degraded"]
    dependencies: DependencyStatus


class WorkspaceStatus(msgspec.Struct):
    """Cards per family, how many have a current projection, open operations, dependencies."""

    workspace: str
    by_family: dict[str, int]
    cards: int
    current: int
    open_operations: int
    dependencies: DependencyStatus
