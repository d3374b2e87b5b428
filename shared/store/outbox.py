"""The projection outbox: projection operations, recorded projections, projection locks.

An operation (``projection_ops``) asks for a card's point to be upserted or deleted; a recorded
projection (``projections``) says which revision and format the index holds for a card (DESIGN
§3, §4). Functions run on a connection from :meth:`shared.store.database.Database.transaction`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from shared import models
from shared.errors import SchemaOutdated
from shared.store import evaluations
from shared.metrics import LAG_BUCKETS, QueueFigures, WorkspaceEvaluation, WorkspaceQueue
from shared.store.database import Database, Q

# ---- the code's projection format against the database's ----


async def check_projection_format(db: Database) -> None:
    """Refuse to run when this code's projection format is not recorded in the database.

    :raises SchemaOutdated: the migration recording ``models.PROJECTION_FORMAT`` was not applied.
    :raises DatabaseUnavailable: PostgreSQL cannot be reached.
    """
    async with db.transaction(None, read_only=True) as conn:
        row = await (await conn.execute(Q.outbox_projection_format_latest)).fetchone()
    recorded = row["format"] if row else None
    if recorded != models.PROJECTION_FORMAT:
        raise SchemaOutdated(
            f"this code projects format {models.PROJECTION_FORMAT} but the database records "
            f"format {recorded}: run `memarc migrate` (a format change ships with its migration)")


# ---- operations ----


async def insert(conn: AsyncConnection, workspace_id: str, card_uuid: uuid.UUID, op: str,
                 revision: int | None) -> int:
    """Queue a projection operation (``op``: ``upsert`` at ``revision``, or ``delete`` with
    ``revision`` None); returns its id."""
    cur = await conn.execute(Q.outbox_insert, {"workspace": workspace_id, "card_id": card_uuid,
                                           "op": op, "revision": revision})
    return (await cur.fetchone())["id"]


async def insert_upsert_coalesced(conn: AsyncConnection, workspace_id: str,
                                  card_uuid: uuid.UUID, revision: int) -> int:
    """Queue an upsert of a card at ``revision``, or give that revision to the card's pending
    upsert when it has one (a review that creates a clause and a solved question linking to it
    gets the clause queued once, by the link's trigger and by the review alike); returns the
    operation's id."""
    cur = await conn.execute(Q.outbox_upsert_coalesced, {"workspace": workspace_id,
                                                     "card_id": card_uuid, "revision": revision})
    return (await cur.fetchone())["id"]


async def insert_upserts(conn: AsyncConnection, workspace_id: str,
                         card_ids: list[uuid.UUID]) -> list[int]:
    """Queue one upsert per card at its current revision (a bulk import) unless the card has a
    pending one already; returns the ids of the cards' pending upserts, in id order."""
    cur = await conn.execute(Q.outbox_insert_bulk, {"workspace": workspace_id, "ids": card_ids})
    return [r["id"] for r in await cur.fetchall()]


async def lease(conn: AsyncConnection, workspace_id: str, op_id: int | None, *, batch: bool,
                limit: int, lease_seconds: int) -> list[dict[str, Any]]:
    """Lease claimable operations of a workspace (pending, or running with an expired lease):
    ``op_id`` first, and with ``batch`` others in lease order (solved-question upserts first,
    bounded: migration 023), up to ``limit`` in all, skipping rows another worker is claiming.
    Each is marked running for ``lease_seconds`` with one more attempt.

    :returns: ``[{id, card_id, op, revision, attempts}]``.
    """
    cur = await conn.execute(Q.outbox_claim, {
        "workspace": workspace_id, "op_id": op_id if op_id is not None else -1, "batch": batch,
        "limit": limit, "lease_seconds": lease_seconds})
    return await cur.fetchall()


async def renew(conn: AsyncConnection, ops: list[dict[str, Any]], lease_seconds: float) -> int:
    """Extend the leases of ``ops`` (rows :func:`lease` returned) to ``lease_seconds`` from now,
    each only while it is still running on the attempt it was leased with.

    :returns: how many leases were extended (fewer: another worker took some over after they
        expired, or they are done)."""
    cur = await conn.execute(Q.outbox_renew, {
        "ids": [o["id"] for o in ops], "attempts": [o["attempts"] for o in ops],
        "lease_seconds": lease_seconds})
    return len(await cur.fetchall())


async def fail(conn: AsyncConnection, op_ids: list[int], error: str, max_attempts: int) -> None:
    """Give leased operations back with ``error`` (its first 2,000 characters): ``pending``
    again, or ``failed`` once they have had ``max_attempts`` attempts."""
    await conn.execute(Q.outbox_fail, {"ids": op_ids, "error": error[:2000],
                                    "max_attempts": max_attempts})


async def complete(conn: AsyncConnection, op_ids: list[int]) -> None:
    """Mark operations done."""
    await conn.execute(Q.outbox_complete, {"ids": op_ids})


async def complete_for_deleted(conn: AsyncConnection, card_ids: Iterable[uuid.UUID]) -> None:
    """Complete every open operation of cards that are gone (their points were deleted)."""
    for cid in card_ids:
        await conn.execute(Q.outbox_supersede_deleted, {"card_id": cid})


async def complete_deletes(conn: AsyncConnection) -> None:
    """Complete every open deletion (a rebuilt collection holds current cards only)."""
    await conn.execute(Q.outbox_complete_deletes)


async def reset_for_retry(conn: AsyncConnection, card_uuid: uuid.UUID) -> list[int]:
    """Put a card's failed and pending operations back to ``pending``; returns their ids."""
    cur = await conn.execute(Q.outbox_reset_for_retry, {"card_id": card_uuid})
    return [r["id"] for r in await cur.fetchall()]


async def requeue(conn: AsyncConnection, workspace_id: str,
                  card_uuid: uuid.UUID) -> tuple[list[int], bool]:
    """Re-run a card's projection from its current state (a retry, a session's solved-index):
    its failed and pending operations go back to ``pending`` (:func:`reset_for_retry`), or, when
    it has none and still exists, an upsert at its current revision is queued. A card deleted
    since is never recreated: only its open point deletion is re-queued. Returns the
    operations' ids and whether the card exists."""
    op_ids = await reset_for_retry(conn, card_uuid)
    state = await projection_state(conn, card_uuid)
    if state is not None and not op_ids:
        op_ids = [await insert(conn, workspace_id, card_uuid, "upsert", state["revision"])]
    return op_ids, state is not None


async def open_for_card(conn: AsyncConnection, card_uuid: uuid.UUID) -> list[int]:
    """Ids of a card's operations that are not done, oldest first."""
    cur = await conn.execute(Q.outbox_open_for_card, {"card_id": card_uuid})
    return [r["id"] for r in await cur.fetchall()]


async def open_for_sweep(conn: AsyncConnection, workspace_id: str,
                         limit: int) -> list[tuple[int, int]]:
    """``[(id, attempts)]`` of at most ``limit`` claimable operations of a workspace (pending, or
    running with an expired lease), in lease order (:func:`lease`'s); ``attempts`` is how often
    each was leased."""
    cur = await conn.execute(Q.outbox_open_for_sweep, {"workspace": workspace_id, "limit": limit})
    return [(r["id"], r["attempts"]) for r in await cur.fetchall()]


async def workspaces_with_open_operations(conn: AsyncConnection) -> list[str]:
    """Workspaces with a claimable operation, across workspaces (a definer function)."""
    cur = await conn.execute(Q.outbox_sweep_workspaces)
    return [r["workspace_id"] for r in await cur.fetchall()]


async def pending(conn: AsyncConnection, limit: int = 100,
                  offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Incomplete operations (pending, running, failed) of the workspace, oldest first, with
    card title and age in seconds, and their total count."""
    cur = await conn.execute(Q.outbox_pending_list, {"limit": limit, "offset": offset})
    rows = await cur.fetchall()
    total = (await (await conn.execute(Q.outbox_pending_count)).fetchone())["n"]
    return rows, total


async def pending_for_card(conn: AsyncConnection, card_uuid: uuid.UUID) -> list[dict[str, Any]]:
    """A card's incomplete operations ``{id, op, revision, status, attempts, last_error,
    created_at, age_seconds}``, oldest first."""
    cur = await conn.execute(Q.outbox_pending_list_for_card, {"card_id": card_uuid})
    return await cur.fetchall()


async def open_deletions(conn: AsyncConnection) -> set[uuid.UUID]:
    """Card ids with a pending or running deletion."""
    cur = await conn.execute(Q.outbox_audit_open_deletes)
    return {r["card_id"] for r in await cur.fetchall()}


async def unindexed_count(conn: AsyncConnection) -> int:
    """How many cards of the transaction's workspace wait for their index update (an open
    upsert: pending, running or failed): a recall cannot return them yet."""
    return (await (await conn.execute(Q.outbox_unindexed_count)).fetchone())["n"]


async def queue_figures(db: Database, lag_bounds: tuple[float, ...] = LAG_BUCKETS) -> QueueFigures:
    """The projection queue of every workspace, for the metrics at scrape time: operations per
    status, the age of the oldest pending or running one, and the lag (queued to completed, in
    seconds) of the done ones over ``lag_bounds`` (ascending bucket upper bounds); and each
    workspace's latest finished recall evaluation. One read-only transaction and two statements
    whatever the number of workspaces (migration 022's definer function scans the operations
    once; 024's reads the newest finished run of each workspace).

    :raises DatabaseUnavailable: PostgreSQL cannot be reached. :raises SchemaOutdated.
    """
    params = {"n": len(lag_bounds), "neg_bounds": [-b for b in reversed(lag_bounds)]}
    async with db.transaction(None, read_only=True) as conn:
        rows = await (await conn.execute(Q.outbox_queue_summary, params)).fetchall()
        evaluated = await evaluations.latest(conn)
    figures = QueueFigures(workspaces=[], lag_buckets=[0] * (len(lag_bounds) + 1), lag_sum=0.0)
    queues: dict[str, WorkspaceQueue] = {}
    for row in rows:
        queue = queues.setdefault(row["workspace_id"], WorkspaceQueue(row["workspace_id"]))
        if row["status"] is None:
            continue
        queue.by_status[row["status"]] = queue.by_status.get(row["status"], 0) + row["n"]
        if row["status"] in ("pending", "running"):
            queue.oldest_pending_seconds = max(queue.oldest_pending_seconds or 0.0,
                                               row["oldest_seconds"])
        if row["bucket"] is not None:
            figures.lag_buckets[row["bucket"]] += row["n"]
            figures.lag_sum += row["lag_sum"]
    figures.workspaces = list(queues.values())
    figures.evaluations = [WorkspaceEvaluation(workspace=r["workspace_id"],
                                               figures=(r["figures"] or {}).get("figures", []),
                                               regressions=r["regressions"]) for r in evaluated]
    return figures


# ---- recorded projections ----


async def open_upserts(conn: AsyncConnection,
                       card_ids: list[uuid.UUID]) -> list[tuple[int, datetime]]:
    """The open (pending or failed) upserts of ``card_ids`` as ``(id, updated_at)``: a
    projection job reads them before it reads the cards, and completes only those still
    unchanged (:func:`record_projections` ``only``). A writer that lets a pending upsert carry
    its change stamps its ``updated_at`` (migration 017's trigger, :func:`insert_upsert_coalesced`,
    :func:`insert_upserts`), so a change committed after this read stays pending for the next
    job. Nothing is locked: writers never wait for a projection."""
    if not card_ids:
        return []
    rows = await (await conn.execute(Q.outbox_open_upserts, {"ids": card_ids})).fetchall()
    return [(r["id"], r["updated_at"]) for r in rows]


async def record_projections(conn: AsyncConnection, revisions: Mapping[uuid.UUID, int],
                             only: list[tuple[int, datetime]] | None = None) -> None:
    """Record the valid projection of each card at the revision written to the index (in the
    current format; skipped for a card whose revision has moved on since), and complete the
    card's open upserts at or below that revision: those of ``only`` still unchanged (the
    ``(id, updated_at)`` pairs :func:`open_upserts` read before the cards), or all of them when
    ``only`` is None (a caller that read the cards under the workspace lock, where no write can
    interleave)."""
    if not revisions:
        return
    ids = None if only is None else [i for i, _ in only]
    stamps = None if only is None else [t for _, t in only]
    async with conn.cursor() as cur:
        await cur.executemany(Q.outbox_projection_record, [
            {"card_id": cid, "revision": rev, "format": models.PROJECTION_FORMAT}
            for cid, rev in revisions.items()])
        await cur.executemany(Q.outbox_supersede, [
            {"card_id": cid, "revision": rev, "only_ids": ids, "only_stamps": stamps}
            for cid, rev in revisions.items()])


async def forget_projections(conn: AsyncConnection, card_ids: list[uuid.UUID]) -> None:
    """Drop the recorded projections of cards whose points were removed."""
    await conn.execute(Q.outbox_projection_forget, {"ids": card_ids})


async def forget_all_projections(conn: AsyncConnection) -> None:
    """Drop every recorded projection of the workspace (its collection was lost)."""
    await conn.execute(Q.outbox_projection_forget_all)


async def any_projection(conn: AsyncConnection) -> bool:
    """Whether the workspace has any recorded projection."""
    return (await (await conn.execute(Q.outbox_projection_any)).fetchone())["recorded"]


async def projection_state(conn: AsyncConnection, card_uuid: uuid.UUID) -> dict[str, Any] | None:
    """``{revision, projected_revision, projected_format}`` of a card, or None when it is gone."""
    return await (await conn.execute(Q.outbox_projection_state, {"card_id": card_uuid})).fetchone()


async def projection_counts(conn: AsyncConnection) -> dict[str, int]:
    """``{cards, current}``: how many cards the workspace has and how many are projected."""
    return await (await conn.execute(Q.outbox_projection_counts,
                                     {"format": models.PROJECTION_FORMAT})).fetchone()


async def card_projections(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every card ``{id, revision, projected_revision, projected_format, has_open_op}``: its
    recorded projection and whether a pending or running operation is open for it."""
    return await (await conn.execute(Q.outbox_audit_cards)).fetchall()


# ---- projection locks (transaction-scoped advisory locks) ----


async def lock_for_projection(conn: AsyncConnection, workspace_id: str,
                              card_ids: list[uuid.UUID]) -> None:
    """What a projection job holds while it projects ``card_ids``: the workspace's projection
    lock in shared mode (a rebuild's switch waits for it) and each card's lock, taken in the
    order given (pass them sorted: two jobs then never deadlock)."""
    await conn.execute(Q.outbox_projection_lock_shared, {"workspace": workspace_id})
    for cid in card_ids:
        await conn.execute(Q.outbox_card_projection_lock, {"card_id": cid})


async def lock_collection_creation(conn: AsyncConnection, workspace_id: str) -> None:
    """The workspace's collection-creation lock, until the transaction ends: taken by a
    projection job that finds no collection, before it creates one, so that concurrent first
    projections (several workers, ``worker_jobs`` > 1) create exactly one."""
    await conn.execute(Q.outbox_collection_creation_lock, {"workspace": workspace_id})


async def lock_projections_exclusive(conn: AsyncConnection, workspace_id: str) -> None:
    """The workspace's projection lock, exclusively: no projection job is in flight until the
    transaction ends (a rebuild's switch)."""
    await conn.execute(Q.outbox_projection_lock_exclusive, {"workspace": workspace_id})
