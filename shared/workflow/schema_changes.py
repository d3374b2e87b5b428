"""Physical schema-change cleanup (DESIGN §7): the request and result structs and SchemaChanges.

Permission ``memory.schema``, checked again here.

After a catalog synchronisation removes tables or columns, the caller sends the run id, database,
schema and the exact removed tables and columns. The cleanup runs in two phases, each its own
transaction under the workspace lock:

1. **record**: the run is stored with a pending cleanup phase (``cleanup_pending``) and the
   removed objects as sent. A new run for a database/schema with an incomplete run is refused
   (409); the same run id with other removed objects is refused too (409).
2. **cleanup**: every card with a structured dependency on a removed object is deleted (a removed
   table takes its columns with it; database- and schema-level dependencies, workspace-wide cards
   and other databases/schemas never match), with its dependencies and every link into or out of
   it, and a point-deletion projection operation; the run becomes ``done`` with the deleted ids
   and any errors (the deletion receipt). Operations are enqueued after commit.

Repeating a run id returns the receipt of a completed run (nothing is deleted twice) and
completes a run that was only recorded (a crash between the phases) from what was recorded,
without a new diff.

The SQL is in :mod:`shared.store.schema_changes`. A rejected call is recorded by :func:`audited`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
import psycopg
from msgspec import Meta

from shared.archive.activity import audited
from shared.auth import Principal
from shared.errors import ArchiveError, Conflict, Forbidden, InvalidInput, NotFound
from shared.models import Name, card_id_str
from shared.projection.queue import ProjectionQueue
from shared.store import activity_log, outbox, workspaces
from shared.store import cards as card_store
from shared.store import schema_changes as store
from shared.store.database import Database
from shared.workflow.requests import digest

MAX_REMOVED = 10_000


class RemovedColumn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A removed column of a table of the run's database/schema."""

    table: Name
    column: Name


class SchemaChangeRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST .../schema-changes``: ``{run_id, database, schema, removed_tables,
    removed_columns}``. Names are matched exactly (use schema ``public`` for sources without
    schemas)."""

    run_id: Annotated[str, Meta(min_length=1, max_length=200)]
    database: Name
    schema: Name
    removed_tables: Annotated[list[Name], Meta(max_length=MAX_REMOVED)] = []
    removed_columns: Annotated[list[RemovedColumn], Meta(max_length=MAX_REMOVED)] = []


class DeletionError(msgspec.Struct):
    """A card the cleanup could not delete, and why."""

    card_id: str
    error: str


class SchemaChangeResult(msgspec.Struct):
    """A schema-change run and its deletion receipt.

    ``status``: ``done``, or ``cleanup_pending`` when the cleanup has not completed (repeat the
    run id to complete it). ``deleted``: the card ids deleted by this run, in id order.
    """

    run_id: str
    database: str
    schema: str
    removed_tables: list[str]
    removed_columns: list[RemovedColumn]
    status: Literal["cleanup_pending", "done"]
    deleted: list[str]
    errors: list[DeletionError]
    recorded_at: datetime
    completed_at: datetime | None


class SchemaChangeOutcome(msgspec.Struct):
    """What :meth:`SchemaChanges.apply` returns: the run, and whether it was a replay of a
    completed run (nothing done)."""

    result: SchemaChangeResult
    replayed: bool


def _normalise(req: SchemaChangeRequest) -> SchemaChangeRequest:
    """Trimmed names, duplicates removed, sorted (so the same change always has one digest).

    :raises InvalidInput: a blank name or a NUL character.
    """
    def name(value: str, field: str) -> str:
        value = value.strip()
        if not value:
            raise InvalidInput(f"{field} must not be blank", field=field)
        if "\x00" in value:
            raise InvalidInput(f"{field} must not contain NUL characters", field=field)
        return value

    tables = sorted({name(t, f"removed_tables[{i}]") for i, t in enumerate(req.removed_tables)})
    columns = sorted({(name(c.table, f"removed_columns[{i}].table"),
                       name(c.column, f"removed_columns[{i}].column"))
                      for i, c in enumerate(req.removed_columns)})
    return SchemaChangeRequest(
        run_id=name(req.run_id, "run_id"), database=name(req.database, "database"),
        schema=name(req.schema, "schema"), removed_tables=tables,
        removed_columns=[RemovedColumn(table=t, column=c) for t, c in columns])


def _result(row: dict[str, Any]) -> SchemaChangeResult:
    return SchemaChangeResult(
        run_id=row["run_id"], database=row["database_name"], schema=row["schema_name"],
        removed_tables=list(row["removed_tables"]),
        removed_columns=msgspec.convert(row["removed_columns"], list[RemovedColumn]),
        status=row["status"], deleted=list(row["deleted"]),
        errors=msgspec.convert(row["errors"], list[DeletionError]),
        recorded_at=row["recorded_at"], completed_at=row["completed_at"])


class SchemaChanges:
    """Physical schema-change cleanup over one database and projection queue."""

    def __init__(self, db: Database, queue: ProjectionQueue) -> None:
        self.db = db
        self.queue = queue

    def _check(self, principal: Principal, workspace: str, req: SchemaChangeRequest) -> None:
        principal.require(workspace, "memory.schema")
        if principal.database is not None and req.database.strip() != principal.database:
            raise Forbidden(f"this token is bound to database {principal.database!r}")
        if principal.schema is not None and req.schema.strip() != principal.schema:
            raise Forbidden(f"this token is bound to schema {principal.schema!r}")

    @audited("schema_change")
    async def apply(self, principal: Principal, workspace: str,
                    req: SchemaChangeRequest) -> SchemaChangeOutcome:
        """Record the run, then delete the cards depending on the removed objects.

        :returns: the run with its deletion receipt; ``replayed`` when the run id was already
            complete (the stored receipt, nothing deleted again).
        :raises Conflict: another run of this database/schema is incomplete, or this run id was
            recorded with other removed objects (409).
        :raises InvalidInput: blank names. :raises Forbidden: permission or a token binding to
            another database/schema. :raises NotFound: principal of another workspace.
        """
        self._check(principal, workspace, req)
        row = await self.record(principal, workspace, req)
        if row["status"] == "done":
            return SchemaChangeOutcome(result=_result(row), replayed=True)
        return SchemaChangeOutcome(result=await self.cleanup(principal, workspace, row["run_id"]),
                                   replayed=False)

    async def record(self, principal: Principal, workspace: str,
                     req: SchemaChangeRequest) -> dict[str, Any]:
        """Phase 1: record the run with a pending cleanup phase (or find it recorded).

        :returns: the run's row (``status`` ``cleanup_pending`` or ``done``).
        :raises Conflict: as :meth:`apply`.
        """
        self._check(principal, workspace, req)
        req = _normalise(req)
        request_digest = digest(req)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            row = await store.run(conn, req.run_id)
            if row is not None:
                if row["request_digest"] != request_digest:
                    raise Conflict(f"run {req.run_id!r} was recorded with other removed objects; "
                                   "a new diff needs a new run id", run_id=req.run_id)
                return row
            open_run = await store.incomplete_run(conn, req.database, req.schema)
            if open_run is not None:
                raise Conflict(f"run {open_run!r} of {req.database}.{req.schema} is "
                               "incomplete: repeat it to complete it before starting a new run",
                               run_id=open_run)
            row = await store.insert_run(
                conn, workspace, run_id=req.run_id, database=req.database, schema=req.schema,
                tables=req.removed_tables,
                columns=[(c.table, c.column) for c in req.removed_columns],
                digest=request_digest, actor=principal.actor)
            await activity_log.record(
                conn, workspace, actor=principal.actor, verb="schema_change", outcome="recorded",
                detail={"run": req.run_id, "database": req.database, "schema": req.schema,
                        "tables": len(req.removed_tables), "columns": len(req.removed_columns)})
        return row

    async def cleanup(self, principal: Principal, workspace: str, run_id: str) -> SchemaChangeResult:
        """Phase 2: delete the cards matching a recorded run and complete it (idempotent: a
        completed run is returned as it is).

        Each card is deleted in a savepoint: a card that cannot be deleted is reported in
        ``errors`` and leaves the run ``cleanup_pending`` (repeat the run id), the others are
        deleted.

        :raises NotFound: no such run.
        """
        principal.require(workspace, "memory.schema")
        op_ids: list[int] = []
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            row = await store.run(conn, run_id, for_update=True)
            if row is None:
                raise NotFound(f"no schema-change run {run_id!r}")
            if row["status"] == "done":
                return _result(row)
            columns = msgspec.convert(row["removed_columns"], list[RemovedColumn])
            matching = await store.cards_depending_on(
                conn, row["database_name"], row["schema_name"], list(row["removed_tables"]),
                [(c.table, c.column) for c in columns])
            deleted: list[str] = list(row["deleted"])
            errors: list[dict[str, str]] = []
            for cid in matching:
                try:
                    async with conn.transaction():  # a savepoint per card
                        await card_store.delete(conn, cid)
                        op_id = await outbox.insert(conn, workspace, cid, "delete", None)
                        await activity_log.record(
                            conn, workspace, actor=principal.actor, verb="delete", card_uuid=cid,
                            outcome="ok", detail={"schema_change": run_id})
                except (ArchiveError, psycopg.errors.IntegrityError) as exc:
                    message = exc.message if isinstance(exc, ArchiveError) else str(exc)
                    errors.append({"card_id": card_id_str(cid), "error": message[:500]})
                    continue
                op_ids.append(op_id)
                deleted.append(card_id_str(cid))
            status = "cleanup_pending" if errors else "done"
            row = await store.finish_run(conn, run_id, status=status, deleted=sorted(deleted),
                                         errors=errors)
            await activity_log.record(
                conn, workspace, actor=principal.actor, verb="schema_change", outcome=status,
                detail={"run": run_id, "deleted": len(deleted), "errors": len(errors)})
        if op_ids:
            await self.queue.enqueue(workspace, op_ids)
        return _result(row)
