"""Index rebuild (``memarc index``, DESIGN §3-4): a workspace's projection rebuilt from its cards.

The projection is rebuilt from authoritative cards only, into a new collection, then switched in
atomically.

1. Claim the tracked rebuild (a lease renewed on progress and by a heartbeat every third of
   it, through the optimize step and the catch-up too; an expired lease is re-claimed by the
   sweep and the rebuild starts over).
2. Create a new collection; read every card of the workspace from PostgreSQL in id order, embed
   and write it. Recall keeps answering from the old collection meanwhile, and workers keep
   projecting into it. From ``OPTIMIZE_MIN_CARDS`` cards on, the new collection's HNSW graph is
   built before the catch-up (Qdrant Edge: in a child process, ``shared/index/edge_optimize.py``).
3. Catch up (at most 3 passes, no locks): cards changed, added or deleted since they were read,
   and clarifications or rules whose linked questions changed (a linking solved card's question
   or a link; their revision stays, their projection's text does not).
4. Switch, in one transaction holding the workspace's projection lock exclusively (so no
   projection job is in flight) and then the workspace's write lock (so no write commits until
   the switch has): a last catch-up, the alias switch (the old collection, with any orphan
   points, is dropped), the valid projections recorded for exactly the revisions written, and
   the operations those revisions satisfy completed (every open deletion among them: the new
   collection holds current cards only). A write that commits after the last catch-up's read
   would otherwise be lost to the switch: a card deleted then keeps its point in the new
   collection while its deletion is completed (an orphan only ``audit`` finds).

   Writes wait only for the switch itself: the wait for projection jobs in flight, and a
   catch-up of what was written meanwhile, come before the write lock is taken, so the catch-up
   under it covers what was written during that one pass (a few operations). Lock order: the
   projection lock, then the workspace lock. Writes take the workspace lock only and projection
   jobs the projection lock (and card locks) only, so no transaction holds the workspace lock
   while it waits for the projection lock: no deadlock (a path that ever needs both must take
   them in this order).

It never imports files, old payloads or another collection: everything written comes from the
cards table. It is also the recovery for a collection whose vector configuration is incompatible
(Qdrant cannot add a named vector to an existing collection).

A **shadow** rebuild (``index_rebuilds.shadow``, migration 025; docs/evaluation.md) builds with
another dense model than the workspace's, the same way, while recall keeps serving the old
collection with the old model. Before its switch, the ``gate`` (the worker passes
:func:`shared.evaluation.run.gate`) evaluates the serving collection and the new one on the
same cases; a new one that is worse (the evaluation's paired test) is dropped and the rebuild
ends ``declined``, unless the request forced the switch. After a shadow switch the old
collection is kept, with its model, as the workspace's previous index. A **restore** (``memarc
index --switch-back``) is a shadow rebuild into that previous collection: the kept points whose
revision, format and texts (the payload's ``texts`` digest) are still current stay, the others
are written again with the previous model, and then it switches the same way (the newer
collection becomes the previous one). Neither drops the collection it started from.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from shared.errors import DatabaseUnavailable
from shared import models
from shared.index.embedding import Embedder, ModelKey
from shared.index.engine import IndexEngine
from shared.models import Card
from shared.projection import offload
from shared.privacy import DEFAULT_FILTER, PrivacyFilter
from shared.projection.lease import renew_periodically
from shared.projection.project import build_points
from shared.store import activity, cards, outbox, rebuilds, workspaces
from shared.store.database import Connection, Database, lock_workspace

log = logging.getLogger(__name__)

BATCH = 128
CATCH_UP_PASSES = 3
#: a rebuild of at least this many cards builds the new collection's HNSW graph before the
#: switch (in-process engines only; below it exact search is as fast, see bench/README.md)
OPTIMIZE_MIN_CARDS = 10_000


class RebuildSummary(msgspec.Struct):
    """What a rebuild did."""

    cards: int
    written: int
    caught_up: int
    removed_points: int
    collection: str
    replaced: str | None
    seconds: float
    optimized: bool = False
    #: the dense model the new collection was built with (a shadow rebuild's; None: the
    #: configured one) and, for a shadow switch, the collection kept as the previous index
    model: str | None = None
    kept: str | None = None
    #: a shadow rebuild's gate: the two evaluation runs and whether the new one regressed
    evaluation: dict[str, Any] | None = None
    #: a restore: kept points that were still current (not written again)
    reused: int = 0


#: What decides a shadow switch: called with the new collection and its model, it evaluates
#: both and returns ``{"switch": bool, "baseline": run id, "candidate": run id, "regressed":
#: [...]}`` (:func:`shared.evaluation.run.gate`).
Gate = Callable[[str, "ModelKey | None"], Awaitable[dict[str, Any]]]


class ShadowRefused(Exception):
    """A shadow rebuild or restore that cannot run (no previous index, its collection is gone);
    the rebuild fails with this message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


#: what a card's point was built from: its revision and a digest of its linked questions
Inputs = tuple[int, str]


def _inputs(revision: int, questions: list[str]) -> Inputs:
    return revision, hashlib.sha256("\0".join(questions).encode()).hexdigest()


async def _current(db: Database, workspace: str,
                   conn: Connection | None = None) -> dict[uuid.UUID, Inputs]:
    """Every card's :data:`Inputs` now (read on ``conn`` when given, else in a transaction of
    its own)."""
    if conn is None:
        async with db.transaction(workspace, read_only=True) as own:
            return await _current(db, workspace, own)
    return {cid: _inputs(rev, qs) for cid, (rev, qs) in (await cards.projection_inputs(conn)).items()}


async def _write(db: Database, index: IndexEngine, embedder: Embedder, workspace: str,
                 language: str, target: str, ids: list[uuid.UUID],
                 written: dict[uuid.UUID, Inputs], privacy: PrivacyFilter,
                 conn: Connection | None = None, model: ModelKey | None = None) -> int:
    """Read ``ids`` now (on ``conn`` when given: the switch's locked transaction, which must
    not wait for a second pooled connection), write them into ``target``; returns how many
    existed."""
    if conn is None:
        async with db.transaction(workspace, read_only=True) as own:
            found, linked = await _read(own, ids)
    else:
        found, linked = await _read(conn, ids)
    live = [found[i] for i in ids if i in found]
    if live:
        await index.upsert(workspace, await build_points(embedder, live, language, privacy,
                                                         linked, model), collection=target)
        for card in live:
            cid = uuid.UUID(card.id[4:])
            written[cid] = _inputs(card.revision, linked.get(cid, []))
    gone = [i for i in ids if i not in found and i in written]
    if gone:
        await index.delete(workspace, gone, collection=target)
        for i in gone:
            written.pop(i, None)
    return len(live)


async def _read(conn: Connection,
                ids: list[uuid.UUID]) -> tuple[dict[uuid.UUID, Card], dict[uuid.UUID, list[str]]]:
    found: dict[uuid.UUID, Card] = await cards.get_many(conn, ids)
    return found, await cards.linked_questions(conn, list(found))


async def _reconcile(db: Database, index: IndexEngine, embedder: Embedder, workspace: str,
                     language: str, target: str, written: dict[uuid.UUID, Inputs],
                     privacy: PrivacyFilter, model: ModelKey | None) -> tuple[int, int]:
    """A restore's first pass: ``target``'s kept points compared with the cards now (revision,
    projection format and the payload's ``texts`` digest of the filtered vector texts); the
    current ones are kept (recorded in ``written``), the others written again with ``model``,
    points of deleted cards removed. Returns (kept, written again).

    :raises PrivacyFilterFailed: the filter refused a card (the restore fails closed)."""
    points = await index.scroll_ids(workspace, collection=target)
    current = await _current(db, workspace)
    ids = sorted(current, key=str)
    stale: list[uuid.UUID] = []
    for start in range(0, len(ids), BATCH):
        async with db.transaction(workspace, read_only=True) as conn:
            found, linked = await _read(conn, ids[start:start + BATCH])
        batch = [found[i] for i in ids[start:start + BATCH] if i in found]
        for card, doc in zip(batch, await offload.documents(batch, privacy, linked)):
            cid = uuid.UUID(card.id[4:])
            point = points.get(cid)
            if (isinstance(doc, str) or point is None or point.get("revision") != card.revision
                    or point.get("format") != models.PROJECTION_FORMAT
                    or point.get("texts") != doc[1]["texts"]):
                stale.append(cid)
            else:
                written[cid] = _inputs(card.revision, linked.get(cid, []))
    gone = sorted((i for i in points if i not in current), key=str)
    if gone:
        await index.delete(workspace, gone, collection=target)
    for start in range(0, len(stale), BATCH):
        await _write(db, index, embedder, workspace, language, target,
                     stale[start:start + BATCH], written, privacy, model=model)
    return len(ids) - len(stale), len(stale)


def _diff(current: dict[uuid.UUID, Inputs], written: dict[uuid.UUID, Inputs]) -> list[uuid.UUID]:
    changed = [i for i, inputs in current.items() if written.get(i) != inputs]
    gone = [i for i in written if i not in current]
    return sorted(changed + gone, key=str)


#: how long a rebuild interrupted by a PostgreSQL outage keeps trying to put itself back in the
#: queue (then its lease expiring is the way back)
RELEASE_RETRY_SECONDS = 60.0


async def _release_when_back(db: Database, index: IndexEngine, workspace: str,
                             rebuild_id: uuid.UUID, target: str | None) -> dict[str, Any] | None:
    """:func:`_release` retried once a second for up to :data:`RELEASE_RETRY_SECONDS` while
    PostgreSQL is unavailable; returns the rebuild's row once released, None if the database
    never answered (the lease then expires and the sweep re-claims it)."""
    deadline = time.monotonic() + RELEASE_RETRY_SECONDS
    while True:
        try:
            await _release(db, index, workspace, rebuild_id, target)
            async with db.transaction(workspace, read_only=True) as conn:
                return await rebuilds.get(conn, rebuild_id)
        except DatabaseUnavailable:
            if time.monotonic() >= deadline:
                log.warning("index rebuild %s could not be queued again; its lease will expire",
                            rebuild_id)
                return None
            target = None  # dropped (or left for the next switch) by the first try
            await asyncio.sleep(1.0)


async def _release(db: Database, index: IndexEngine, workspace: str, rebuild_id: uuid.UUID,
                   target: str | None) -> None:
    """Put an interrupted rebuild back in the queue and drop its unfinished collection."""
    if target is not None:
        try:
            await index.drop_collection(target)
        except Exception:  # left for the next rebuild's switch to replace; never fatal here
            log.warning("could not drop the interrupted rebuild's collection %s", target)
    async with db.transaction(workspace) as conn:
        await rebuilds.release(conn, rebuild_id)


async def rebuild_index(db: Database, index: IndexEngine, embedder: Embedder, workspace: str,
                        rebuild_id: uuid.UUID, *, lease_seconds: int = 300,
                        privacy: PrivacyFilter = DEFAULT_FILTER,
                        optimize_min_cards: int = OPTIMIZE_MIN_CARDS,
                        on_batch_written: Callable[[str], Awaitable[None]] | None = None,
                        before_switch: Callable[[str], Awaitable[None]] | None = None,
                        gate: Gate | None = None,
                        ) -> dict[str, Any] | None:
    """Run a claimed rebuild to completion; returns the tracked row, or None when the rebuild
    is not claimable (done, or running under a live lease elsewhere).

    Every card goes through the privacy filter before it is embedded. Failures, a card the
    filter refuses included (fail closed), are recorded on the rebuild (status ``failed``,
    error) and the new collection is dropped; the workspace keeps its old collection. A
    PostgreSQL outage is not a failure of the rebuild: it is put back in the queue once the
    database answers (:func:`_release_when_back`; the returned row then says ``queued``), and
    the sweep starts it over.

    ``on_batch_written`` (None in production) is awaited with the new collection's name after
    each batch of the first pass is written and its progress recorded, before the catch-up and
    the switch: the moment at which tests write cards (which the catch-up must take in) or
    interrupt the rebuild.

    ``before_switch`` (None in production) is awaited with the new collection's name in the
    switch's transaction, after the last catch-up and before the alias switch, with the
    projection and workspace locks held: the moment at which tests issue writes that must wait
    for the switch (and that the switch would lose if they did not).

    ``gate``: what decides a shadow rebuild's switch (see the module docstring); a shadow
    rebuild that is not forced fails without one.
    """
    async with db.transaction(workspace) as conn:
        row = await rebuilds.claim(conn, rebuild_id, lease_seconds)
        if row is None:
            return None
        ws = await workspaces.get(conn, workspace)
    started = time.perf_counter()
    target: str | None = None
    owned = True  # whether a failure drops target (never the kept index a restore writes into)
    switched = False
    shadow: dict[str, Any] | None = row.get("shadow")
    restore = bool(shadow and shadow.get("restore"))
    verdict: dict[str, Any] | None = None
    reused = 0
    heartbeat = asyncio.create_task(renew_periodically(
        db, workspace, lambda conn: rebuilds.renew(conn, rebuild_id, lease_seconds), lease_seconds,
        f"index rebuild {rebuild_id}"))
    try:
        async with db.transaction(workspace, read_only=True) as conn:
            recorded = await workspaces.index_collection(conn)
        model: ModelKey | None
        if restore:
            model = workspaces.model_of(recorded, previous=True)
        elif shadow:
            model = (shadow["dense_model"], shadow.get("dense_model_path"))
        else:  # a plain rebuild keeps the model recorded with the workspace's collection
            model = workspaces.model_of(recorded)
        layout = embedder.layout(ws["language"], model=model)
        written: dict[uuid.UUID, Inputs] = {}
        if restore:
            owned = False
            target = (recorded or {}).get("previous_collection")
            if not target:
                raise ShadowRefused("this workspace has no previous index to switch back to")
            if await index.check_collection(workspace, layout, collection=target) is None:
                async with db.transaction(workspace) as conn:
                    await workspaces.forget_previous_index(conn, workspace)
                raise ShadowRefused(f"the previous index {target!r} is gone from the engine")
            reused, _ = await _reconcile(db, index, embedder, workspace, ws["language"], target,
                                         written, privacy, model)
            ids = sorted(await _current(db, workspace), key=str)
            async with db.transaction(workspace) as conn:
                await rebuilds.progress(conn, rebuild_id, done=len(ids), total=len(ids),
                                        collection=target, lease_seconds=lease_seconds)
        else:
            target = await index.create_rebuild_collection(workspace, layout)
            current = await _current(db, workspace)
            ids = sorted(current, key=str)
            for start in range(0, len(ids), BATCH):
                await _write(db, index, embedder, workspace, ws["language"], target,
                             ids[start:start + BATCH], written, privacy, model=model)
                async with db.transaction(workspace) as conn:
                    await rebuilds.progress(conn, rebuild_id, done=min(start + BATCH, len(ids)),
                                            total=len(ids), collection=target,
                                            lease_seconds=lease_seconds)
                if on_batch_written is not None:
                    await on_batch_written(target)

        async def catch_up(conn: Connection | None) -> tuple[int, dict[uuid.UUID, Inputs]]:
            """Write what changed since ``written`` (read on ``conn`` when given); returns how
            many cards that was and the current revisions."""
            current = await _current(db, workspace, conn)
            pending = _diff(current, written)
            for start in range(0, len(pending), BATCH):
                await _write(db, index, embedder, workspace, ws["language"], target,
                             pending[start:start + BATCH], written, privacy, conn, model)
            return len(pending), current

        async def catch_up_unlocked() -> int:
            done = 0
            for _ in range(CATCH_UP_PASSES):
                n = (await catch_up(None))[0]
                done += n
                if not n:
                    break
            return done

        optimized = False
        if len(ids) >= optimize_min_cards and owned:
            optimized = await index.optimize_collection(target)
        caught_up = 0
        if shadow and not restore and not shadow.get("force"):
            if gate is None:
                raise ShadowRefused("a shadow rebuild that is not forced needs an evaluation")
            caught_up += await catch_up_unlocked()
            verdict = await gate(target, model)
            if not verdict["switch"]:
                return await _declined(db, index, workspace, rebuild_id, target, verdict,
                                       row["requested_by"], len(ids), started)
        # the old collection's points (for the summary), read before the catch-up so that the
        # last unlocked pass runs just before the locks are taken
        old_ids = set((await index.scroll_ids(workspace)).keys())
        caught_up += await catch_up_unlocked()

        async with db.transaction(workspace) as conn:
            # projection jobs in flight finish first, and what was written meanwhile is caught
            # up, while writes go on; then no write commits until this transaction does (see
            # the module docstring: lock order) and the last catch-up takes in the few written
            # during the previous one
            await outbox.lock_projections_exclusive(conn, workspace)
            caught_up += (await catch_up(conn))[0]
            await lock_workspace(conn, workspace)
            n, current = await catch_up(conn)
            caught_up += n
            if before_switch is not None:
                await before_switch(target)
            replaced = await index.switch_collection(workspace, target, keep=bool(shadow))
            switched = True  # target is the workspace's collection now: never dropped below
            # the collection that holds the valid projections from now on (migration 022), and
            # for a shadow switch its model, the one it replaced kept (migration 025)
            if shadow:
                await workspaces.switch_index_collection(conn, workspace, target, model)
            else:
                await workspaces.record_index_collection(conn, workspace, target)
            await outbox.record_projections(conn, {cid: rev for cid, (rev, _) in written.items()})
            await outbox.complete_deletes(conn)
            summary = RebuildSummary(
                cards=len(current), written=len(written), caught_up=caught_up,
                removed_points=len(old_ids - set(current)), collection=target, replaced=replaced,
                seconds=round(time.perf_counter() - started, 2), optimized=optimized,
                model=(model[1] or model[0]) if model else None,
                kept=replaced if shadow else None, evaluation=verdict, reused=reused)
            row = await rebuilds.finish(conn, rebuild_id, status="done",
                                        summary=msgspec.to_builtins(summary))
            await activity.record(conn, workspace, actor=row["requested_by"], verb="index",
                                      outcome="ok", detail=msgspec.to_builtins(summary))
        return row
    except asyncio.CancelledError:
        # a graceful stop (or a job timeout): give the rebuild back to the queue at once instead
        # of leaving it "running" until its lease expires, and drop the half-built collection
        log.warning("index rebuild of %s interrupted; it is queued again", workspace)
        await asyncio.shield(_release(db, index, workspace, rebuild_id,
                                      None if switched or not owned else target))
        raise
    except DatabaseUnavailable as exc:
        # PostgreSQL went away under the rebuild, which did nothing wrong: it goes back to the
        # queue as soon as the database answers again (the sweep then starts it over), instead
        # of staying "running" and refusing every new rebuild until its lease expires
        log.warning("index rebuild of %s interrupted: %s; it is queued again once PostgreSQL "
                    "answers", workspace, exc.message)
        heartbeat.cancel()
        # shielded: a graceful stop during these retries must not leave it "running" either
        return await asyncio.shield(_release_when_back(
            db, index, workspace, rebuild_id, None if switched or not owned else target))
    except Exception as exc:
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        log.warning("index rebuild of %s failed: %s", workspace, message)
        if target is not None and not switched and owned:
            try:
                await index.drop_collection(target)
            except Exception:  # the engine may be the thing that failed; the rebuild is failed anyway
                log.warning("could not drop abandoned collection %s", target)
        async with db.transaction(workspace) as conn:
            row = await rebuilds.finish(conn, rebuild_id, status="failed", error=message[:2000])
            await activity.record(conn, workspace, actor=row["requested_by"], verb="index",
                                      outcome="failed", detail={"error": message[:500]})
        return row
    finally:
        heartbeat.cancel()  # it renews running rebuilds only: done, failed or queued stay so


async def _declined(db: Database, index: IndexEngine, workspace: str, rebuild_id: uuid.UUID,
                    target: str, verdict: dict[str, Any], actor: str, cards: int,
                    started: float) -> dict[str, Any]:
    """A shadow rebuild whose new collection evaluated worse: the collection is dropped, the
    workspace keeps its index, and the rebuild ends ``declined`` with the evaluation (an
    activity ``index`` / ``declined``)."""
    try:
        await index.drop_collection(target)
    except Exception:  # left behind; never fatal for the decision itself
        log.warning("could not drop the declined shadow collection %s", target)
    detail = {"collection": target, "cards": cards, "evaluation": verdict,
              "seconds": round(time.perf_counter() - started, 2)}
    async with db.transaction(workspace) as conn:
        row = await rebuilds.finish(conn, rebuild_id, status="declined", summary=detail)
        await activity.record(conn, workspace, actor=actor, verb="index", outcome="declined",
                              detail=detail)
    return row
