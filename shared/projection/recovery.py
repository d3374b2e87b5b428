"""An index that knows it lost something (issue 25, DESIGN §4).

PostgreSQL records which physical collection holds a workspace's valid projections
(``index_collections``, migration 022). Physical names carry a random suffix
(``<prefix><workspace>__<8 hex>``), so an engine that lost its files never recreates the recorded
one by accident: a collection made afresh for one new card has another name.

What the recorded collection and the engine's say together (:func:`assess`):

- ``ok``: the engine's collection is the recorded one;
- ``fresh``: nothing recorded, no collection and no recorded projection (a new workspace): its
  first projection creates the collection and records it;
- ``adopt``: nothing recorded but the engine has a collection (made before migration 022): it is
  recorded as it is if it holds a point for every card recorded as projected, else it is lost;
- ``lost``: the recorded collection is missing or another one stands in its place (or, with
  nothing recorded, cards are recorded as projected and the engine has no collection);
- ``rebuilding``: a lost collection was noticed and a rebuild is queued or under way (recorded
  collection NULL).

:func:`verify` settles a workspace: it adopts, or, for a lost collection, in one transaction
holding the projection lock exclusively and then the workspace lock (the order of a rebuild's
switch), voids every recorded projection, queues an upsert of every card (they show as pending),
records the collection as NULL and queues a tracked rebuild (:mod:`shared.projection.rebuild`),
which writes every card into a new collection and records it at its switch. Until then recall
answers 503 ``index_unavailable`` (:func:`shared.recall.verified.recall`), never a partial result;
projection jobs leave their operations pending. The worker runs :func:`verify_all` at start-up
and periodically (:func:`shared.worker.sweep`), and every projection job runs :func:`verify`
before it leases anything.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from shared.errors import ArchiveError, DatabaseUnavailable
from shared.index.engine import IndexEngine
from shared.store import activity, outbox, rebuilds, workspaces
from shared.store.database import Connection, Database, lock_workspace

log = logging.getLogger(__name__)

OK, FRESH, ADOPT, LOST, REBUILDING = "ok", "fresh", "adopt", "lost", "rebuilding"
#: the actor of the records and rebuilds the recovery writes
RECOVERY_ACTOR = "index-recovery"
#: a rebuild the recovery queued that failed is queued again after this long, not at once (a
#: card the privacy filter refuses fails every rebuild: the error stays visible meanwhile)
RETRY_FAILED_SECONDS = 300.0


def assess(recorded: dict[str, Any] | None, found: str | None, projected: bool) -> str:
    """The state of a workspace's index (see the module docstring) from its recorded collection
    row (``{collection}`` or None), the engine's physical collection (None: none) and whether
    any card is recorded as projected."""
    if recorded is None:
        if found is not None:
            return ADOPT
        return LOST if projected else FRESH
    if recorded["collection"] is None:
        return REBUILDING
    return OK if found == recorded["collection"] else LOST


async def read_state(conn: Connection, index: IndexEngine,
                     workspace: str) -> tuple[str, dict[str, Any] | None, str | None]:
    """``(state, recorded row, engine's collection)`` of ``workspace``, read on ``conn``.

    :raises IndexUnavailable: the engine cannot be asked (that is not a lost collection).
    """
    recorded = await workspaces.index_collection(conn)
    projected = recorded is None and await outbox.any_projection(conn)
    found = await index.physical_collection(workspace)
    return assess(recorded, found, projected), recorded, found


async def verify(db: Database, index: IndexEngine, workspace: str) -> str:
    """Check ``workspace``'s collection against the recorded one and settle what is not
    ``ok``/``fresh`` (adopt, or void and queue the rebuild of a lost one); returns the state
    found (``adopt``, ``rebuilding`` or ``lost`` when a failed recovery waits to be retried).

    :raises IndexUnavailable: the engine cannot be asked. :raises DatabaseUnavailable.
    """
    async with db.transaction(workspace, read_only=True) as conn:
        state, _, _ = await read_state(conn, index, workspace)
        if state == REBUILDING and await _rebuild_open(conn):
            return state
    if state in (OK, FRESH):
        return state
    async with db.transaction(workspace) as conn:
        # no projection job in flight, no half-done switch, no write until this commits
        await outbox.lock_projections_exclusive(conn, workspace)
        await lock_workspace(conn, workspace)
        state, recorded, found = await read_state(conn, index, workspace)
        if state == ADOPT and not await _holds_every_projection(conn, index, workspace):
            state = LOST  # made afresh after a loss, before migration 022: not the valid one
        if state == ADOPT:
            await workspaces.record_index_collection(conn, workspace, found)
            log.info("recorded the existing index collection %s of workspace %s", found, workspace)
        elif state == LOST:
            await _void(conn, workspace, recorded, found)
            state = await _queue_rebuild(conn, workspace)
        elif state == REBUILDING:
            state = await _queue_rebuild(conn, workspace)
    return state


async def _holds_every_projection(conn: Connection, index: IndexEngine, workspace: str) -> bool:
    """Whether the engine's collection has a point for every card recorded as projected (what
    a collection made before migration 022 must show to be adopted)."""
    points = await index.scroll_ids(workspace)
    return all(r["id"] in points for r in await outbox.card_projections(conn)
               if r["projected_revision"] is not None)


async def _rebuild_open(conn: Connection) -> bool:
    latest = await rebuilds.latest(conn)
    return latest is not None and latest["status"] in ("queued", "running")


async def _void(conn: Connection, workspace: str, recorded: dict[str, Any] | None,
                found: str | None) -> None:
    """The recorded projections of a lost collection are void: forgotten, and an upsert of
    every card queued (they show as pending); the recorded collection becomes NULL."""
    ids = [r["id"] for r in await outbox.card_projections(conn)]
    await outbox.forget_all_projections(conn)
    if ids:
        await outbox.insert_upserts(conn, workspace, ids)
    await workspaces.record_index_collection(conn, workspace, None)
    lost = recorded["collection"] if recorded else None
    detail = {"recorded": lost, "found": found, "cards": len(ids)}
    await activity.record(conn, workspace, actor=RECOVERY_ACTOR, verb="index-lost",
                          outcome="pending", detail=detail)
    log.warning("the index collection of workspace %s is lost (recorded %s, the engine has %s): "
                "%d card(s) are pending until it is rebuilt", workspace, lost, found, len(ids))


async def _queue_rebuild(conn: Connection, workspace: str) -> str:
    """Queue the recovery's rebuild unless one is open, or the recovery's last one failed less
    than :data:`RETRY_FAILED_SECONDS` ago (then ``lost``: recall stays 503 with its error)."""
    latest = await rebuilds.latest(conn)
    if latest is not None and latest["status"] in ("queued", "running"):
        return REBUILDING
    if (latest is not None and latest["status"] == "failed"
            and latest["requested_by"] == RECOVERY_ACTOR and latest["finished_at"] is not None
            and latest["finished_at"] > datetime.now(timezone.utc)
            - timedelta(seconds=RETRY_FAILED_SECONDS)):
        return LOST
    rebuild_id = uuid.uuid4()
    await rebuilds.insert(conn, rebuild_id, workspace, RECOVERY_ACTOR)
    await activity.record(conn, workspace, actor=RECOVERY_ACTOR, verb="index", outcome="queued",
                          detail={"rebuild": str(rebuild_id)})
    return REBUILDING


async def verify_all(db: Database, index: IndexEngine) -> dict[str, str]:
    """:func:`verify` every workspace; returns ``{workspace: state}`` of those not ``ok`` or
    ``fresh``. A workspace whose check fails (the engine cannot be reached, a lock timeout) is
    logged and left for the next run.

    :raises DatabaseUnavailable: PostgreSQL cannot be reached.
    """
    async with db.transaction(None, read_only=True) as conn:
        ids = [row["id"] for row in await workspaces.list_all(conn)]
    out: dict[str, str] = {}
    for workspace in ids:
        try:
            state = await verify(db, index, workspace)
        except DatabaseUnavailable:
            raise
        except ArchiveError as exc:
            log.debug("index check of workspace %s skipped: %s", workspace, exc.message)
            continue
        if state not in (OK, FRESH):
            out[workspace] = state
    return out
