"""Physical schema-change cleanup (DESIGN §7): the request and result structs and SchemaChanges.

Permission ``memory.schema``, checked again here.

After a catalog synchronisation removes tables or columns, the caller sends the run id, database,
schema and the exact removed tables and columns. The cleanup runs in two steps, which a catalog
may ask for separately (:meth:`SchemaChanges.record_run` *before* it commits its own physical
change, :meth:`SchemaChanges.cleanup` after) or in one call (:meth:`SchemaChanges.apply`):

1. **record**: the run is stored with a pending cleanup phase (``cleanup_pending``, phase
   ``recorded``) and the removed objects as sent. A new run for a database/schema with an
   incomplete run is refused (409); the same run id with other removed objects is refused too
   (409).
2. **cleanup**: every card with a structured dependency on a removed object is deleted (a removed
   table takes its columns with it; database- and schema-level dependencies, workspace-wide cards
   and other databases/schemas never match), with its dependencies and every link into or out of
   it, its content erased from the session archive (:func:`shared.store.cards.delete`),
   and a point-deletion projection operation; the deleted ids and any errors are the deletion
   receipt. Operations are enqueued after commit.

A run is ``done`` only when its cards are deleted *and* their point deletions are done (phase
``index_pending`` until then; ``index_pending`` lists the cards whose point is not deleted yet).
So a failed index deletion keeps the run ``cleanup_pending``, and blocks a new run of that
database/schema; repeating the cleanup of the run re-queues its failed point deletions and
finishes it once they are done. A run whose point deletions completed meanwhile is marked done
whenever it is looked at (a repeat, or a new run of its database/schema). ``wait`` seconds (≤ 30)
let a call wait for the worker.

Repeating a run id returns the receipt of a completed run (nothing is deleted twice) and
completes a run that was only recorded (a crash between the phases) from what was recorded,
without a new diff.

The SQL is in :mod:`shared.store.schema_changes`. A rejected call is recorded by :func:`audited`.
"""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from shared.archive.activity import audited
from shared.archive.polling import poll
from shared.auth import Principal
from shared.errors import ArchiveError, Conflict, Forbidden, InvalidInput, NotFound
from shared.models import MAX_WAIT_SECONDS, Name, card_id_str, parse_card_id
from shared.projection.queue import ProjectionQueue
from shared.store import activity, outbox, workspaces
from shared.store import cards as card_store
from shared.store import schema_changes as store
from shared.store.database import Database, savepoint
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


class CleanupRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of ``POST .../schema-changes/cleanup``: the id of a recorded run."""

    run_id: Annotated[str, Meta(min_length=1, max_length=200)]


class SchemaChangeResult(msgspec.Struct):
    """A schema-change run and its deletion receipt.

    ``status``: ``done``, or ``cleanup_pending`` while the cleanup has not completed (repeat the
    run id to complete it). ``phase``: ``recorded`` (its cards are not deleted yet, or one could
    not be: ``errors``), ``index_pending`` (cards deleted, point deletions still open: the cards
    are in ``index_pending``), ``done``. ``deleted``: the card ids deleted by this run, in id
    order.
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
    phase: Literal["recorded", "index_pending", "done"] = "recorded"
    index_pending: list[str] = []


class SchemaChangeOutcome(msgspec.Struct):
    """What :meth:`SchemaChanges.apply` and :meth:`SchemaChanges.record_run` return: the run,
    and whether it was a replay (the run id was complete, or, for ``record_run``, recorded
    already: nothing done)."""

    result: SchemaChangeResult
    replayed: bool


class SchemaChangeRunPage(msgspec.Struct):
    """What :meth:`SchemaChanges.runs` returns: one page of the workspace's runs, newest first,
    and how many runs there are in all (of the token's database/schema when it is bound)."""

    runs: list[SchemaChangeResult]
    total: int


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


def _deleted_uuids(row: dict[str, Any]) -> list[uuid.UUID]:
    return [u for cid in row["deleted"] if (u := parse_card_id(cid)) is not None]


def _result(row: dict[str, Any], index_pending: list[uuid.UUID] | None = None,
            ) -> SchemaChangeResult:
    """The run's row as a result; ``index_pending``: its cards whose point deletion is open."""
    phase = ("done" if row["status"] == "done"
             else "index_pending" if row.get("cards_deleted_at") is not None else "recorded")
    return SchemaChangeResult(
        run_id=row["run_id"], database=row["database_name"], schema=row["schema_name"],
        removed_tables=list(row["removed_tables"]),
        removed_columns=msgspec.convert(row["removed_columns"], list[RemovedColumn]),
        status=row["status"], deleted=list(row["deleted"]),
        errors=msgspec.convert(row["errors"], list[DeletionError]),
        recorded_at=row["recorded_at"], completed_at=row["completed_at"], phase=phase,
        index_pending=[card_id_str(c) for c in index_pending or []])


async def _settle(conn: Any, row: dict[str, Any]) -> tuple[dict[str, Any], list[uuid.UUID]]:
    """A pending run whose cards are deleted is done once none of their point deletions is
    open; returns its row (updated when done) and the cards whose point deletion is open."""
    if row["status"] == "done" or row.get("cards_deleted_at") is None:
        return row, []
    open_ = await store.open_point_deletions(conn, _deleted_uuids(row))
    if open_:
        return row, open_
    return (await store.complete_run(conn, row["run_id"])) or row, []


def _check_binding(principal: Principal, database: str, schema: str) -> None:
    """A token bound to a database (and schema) acts on that one only (DESIGN §8).

    :raises Forbidden: ``database`` / ``schema`` outside the token's binding.
    """
    if principal.database is not None and database != principal.database:
        raise Forbidden(f"this token is bound to database {principal.database!r}")
    if principal.schema is not None and schema != principal.schema:
        raise Forbidden(f"this token is bound to schema {principal.schema!r}")


def _within_binding(principal: Principal, row: dict[str, Any]) -> bool:
    """Whether a run's database/schema is within the token's binding (DESIGN §8)."""
    try:
        _check_binding(principal, row["database_name"], row["schema_name"])
    except Forbidden:
        return False
    return True


class SchemaChanges:
    """Physical schema-change cleanup over one database and projection queue."""

    def __init__(self, db: Database, queue: ProjectionQueue) -> None:
        self.db = db
        self.queue = queue

    def _check(self, principal: Principal, workspace: str, req: SchemaChangeRequest) -> None:
        principal.require(workspace, "memory.schema")
        _check_binding(principal, req.database.strip(), req.schema.strip())

    async def runs(self, principal: Principal, workspace: str, limit: int = 100,
                   offset: int = 0) -> SchemaChangeRunPage:
        """The workspace's runs, newest first, each with its phase and deletion receipt (a
        pending run whose point deletions completed meanwhile is marked done, as when it is
        repeated). A token bound to a database (and schema) sees that one's runs only.

        :raises InvalidInput: ``limit`` outside 1..1000 or ``offset`` < 0.
        :raises Forbidden: no ``memory.schema``. :raises NotFound: another workspace.
        """
        principal.require(workspace, "memory.schema")
        if not 1 <= limit <= 1000 or offset < 0:
            raise InvalidInput("limit must be 1..1000 and offset ≥ 0", field="limit")
        async with self.db.transaction(workspace) as conn:
            await workspaces.get(conn, workspace)
            rows, total = await store.list_runs(conn, database=principal.database,
                                                schema=principal.schema, limit=limit,
                                                offset=offset)
            results = [_result(*await _settle(conn, row)) for row in rows]
        return SchemaChangeRunPage(runs=results, total=total)

    async def get_run(self, principal: Principal, workspace: str,
                      run_id: str) -> SchemaChangeResult:
        """One run with its phase, deletion receipt and the cards whose point deletion is
        still open (settled as :meth:`runs` does).

        :raises NotFound: no such run, or it is outside the token's database/schema binding
            (indistinguishable). :raises Forbidden: no ``memory.schema``.
        """
        principal.require(workspace, "memory.schema")
        async with self.db.transaction(workspace) as conn:
            row = await store.run(conn, run_id.strip(), for_update=True)
            if row is None or not _within_binding(principal, row):
                raise NotFound(f"no schema-change run {run_id!r}")
            return _result(*await _settle(conn, row))

    @audited("schema_change")
    async def apply(self, principal: Principal, workspace: str, req: SchemaChangeRequest,
                    wait: float = 0.0) -> SchemaChangeOutcome:
        """The one-call form: record the run, then delete the cards depending on the removed
        objects (:meth:`record`, then :meth:`cleanup` with ``wait``).

        :returns: the run with its deletion receipt; ``replayed`` when the run id was already
            complete (the stored receipt, nothing deleted again).
        :raises Conflict: another run of this database/schema is incomplete, or this run id was
            recorded with other removed objects (409).
        :raises InvalidInput: blank names. :raises Forbidden: permission or a token binding to
            another database/schema. :raises NotFound: principal of another workspace.
        """
        self._check(principal, workspace, req)
        row, _ = await self.record(principal, workspace, req)
        if row["status"] == "done":
            return SchemaChangeOutcome(result=_result(row), replayed=True)
        return SchemaChangeOutcome(
            result=await self.cleanup(principal, workspace, row["run_id"], wait), replayed=False)

    @audited("schema_change")
    async def record_run(self, principal: Principal, workspace: str,
                         req: SchemaChangeRequest) -> SchemaChangeOutcome:
        """Step 1 alone: record the run (phase ``recorded``) and delete nothing, so a catalog can
        record the pending cleanup before it commits its own physical change, and ask for
        :meth:`cleanup` after. ``replayed``: the run id was recorded already (the run as it is).

        :raises Conflict: as :meth:`apply`.
        """
        row, created = await self.record(principal, workspace, req)
        return SchemaChangeOutcome(result=_result(row), replayed=not created)

    async def record(self, principal: Principal, workspace: str,
                     req: SchemaChangeRequest) -> tuple[dict[str, Any], bool]:
        """Phase 1: record the run with a pending cleanup phase (or find it recorded). An
        incomplete run of the same database/schema whose point deletions have completed since is
        marked done first (it no longer blocks).

        :returns: the run's row (``status`` ``cleanup_pending`` or ``done``) and whether it was
            recorded now.
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
                return row, False
            open_run = await store.incomplete_run(conn, req.database, req.schema)
            if open_run is not None:
                settled, open_ = await _settle(conn, await store.run(conn, open_run,
                                                                     for_update=True))
                if settled["status"] != "done":
                    waiting = (f": the point deletions of {len(open_)} card(s) are not done "
                               "(is the worker running?)" if open_ else "")
                    raise Conflict(f"run {open_run!r} of {req.database}.{req.schema} is "
                                   f"incomplete{waiting}: repeat it to complete it before "
                                   "starting a new run", run_id=open_run,
                                   index_pending=[card_id_str(c) for c in open_])
            row = await store.insert_run(
                conn, workspace, run_id=req.run_id, database=req.database, schema=req.schema,
                tables=req.removed_tables,
                columns=[(c.table, c.column) for c in req.removed_columns],
                digest=request_digest, actor=principal.actor)
            await activity.record(
                conn, workspace, actor=principal.actor, verb="schema_change", outcome="recorded",
                detail={"run": req.run_id, "database": req.database, "schema": req.schema,
                        "tables": len(req.removed_tables), "columns": len(req.removed_columns)})
        return row, True

    @audited("schema_change")
    async def cleanup(self, principal: Principal, workspace: str, run_id: str,
                      wait: float = 0.0) -> SchemaChangeResult:
        """Phase 2: delete the cards matching a recorded run, then complete it once their point
        deletions are done (idempotent: a completed run is returned as it is).

        Each card is deleted in a savepoint: a card that cannot be deleted is reported in
        ``errors`` and leaves the run ``cleanup_pending`` (repeat the run id), the others are
        deleted. Once every card is deleted, a repeat re-queues the run's open point deletions
        (failed ones too) and never matches cards again. ``wait``: seconds (at most 30) to wait
        for the point deletions before answering.

        :raises NotFound: no such run. :raises InvalidInput: ``wait`` outside 0..30.
        :raises Forbidden: the run's database/schema is outside the token's binding (nothing
            is deleted).
        """
        principal.require(workspace, "memory.schema")
        run_id = run_id.strip()
        if not 0 <= wait <= MAX_WAIT_SECONDS:
            raise InvalidInput(f"wait must be 0..{MAX_WAIT_SECONDS:g} seconds", field="wait")
        op_ids: list[int] = []
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            row = await store.run(conn, run_id, for_update=True)
            if row is None:
                raise NotFound(f"no schema-change run {run_id!r}")
            # the run names its database/schema: a bound token cleans up its own runs only
            _check_binding(principal, row["database_name"], row["schema_name"])
            if row["status"] == "done":
                return _result(row)
            if row["cards_deleted_at"] is None:
                row, op_ids = await self._delete_cards(conn, principal, workspace, row)
            if row["cards_deleted_at"] is not None:  # the index part: re-queue what is open
                for cid in await store.open_point_deletions(conn, _deleted_uuids(row)):
                    op_ids += [i for i in await outbox.reset_for_retry(conn, cid)
                               if i not in op_ids]
            row, open_ = await _settle(conn, row)
            await activity.record(
                conn, workspace, actor=principal.actor, verb="schema_change",
                outcome=row["status"],
                detail={"run": run_id, "deleted": len(row["deleted"]),
                        "errors": len(row["errors"]), "index_pending": len(open_)})
        if op_ids:
            await self.queue.enqueue(workspace, op_ids)
        if open_ and wait > 0:
            row, open_ = await poll(lambda: self._settled(workspace, run_id),
                                    lambda settled: not settled[1], wait)
        return _result(row, open_)

    async def _delete_cards(self, conn: Any, principal: Principal, workspace: str,
                            row: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        """The card-deletion phase of a run, in the caller's transaction: returns the run's
        updated row and the point-deletion operations queued."""
        run_id = row["run_id"]
        columns = msgspec.convert(row["removed_columns"], list[RemovedColumn])
        matching = await store.cards_depending_on(
            conn, row["database_name"], row["schema_name"], list(row["removed_tables"]),
            [(c.table, c.column) for c in columns])
        deleted: list[str] = list(row["deleted"])
        errors: list[dict[str, str]] = []
        op_ids: list[int] = []
        for cid in matching:
            try:
                async with savepoint(conn):  # a savepoint per card
                    await card_store.delete(conn, cid)
                    op_id = await outbox.insert(conn, workspace, cid, "delete", None)
                    await activity.record(
                        conn, workspace, actor=principal.actor, verb="delete", card_uuid=cid,
                        outcome="ok", detail={"schema_change": run_id})
            except ArchiveError as exc:  # IntegrityViolation included
                errors.append({"card_id": card_id_str(cid), "error": exc.message[:500]})
                continue
            op_ids.append(op_id)
            deleted.append(card_id_str(cid))
        row = await store.finish_run(conn, run_id, status="cleanup_pending",
                                     deleted=sorted(deleted), errors=errors,
                                     cards_deleted=not errors)
        return row, op_ids

    async def _settled(self, workspace: str,
                       run_id: str) -> tuple[dict[str, Any], list[uuid.UUID]]:
        """The run settled (:func:`_settle`) in a transaction of its own, and its open point
        deletions."""
        async with self.db.transaction(workspace) as conn:  # the run's row lock suffices
            return await _settle(conn, await store.run(conn, run_id, for_update=True))
