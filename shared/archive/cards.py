"""The archive's use cases (:class:`Archive`): card administration, index lifecycle, recall.

The archive also holds the other use cases over the same database and queue: the session
workflow (``.workflow``), the schema-change cleanup (``.schema_changes``), the import and
export of cards files (``.transfer``, :mod:`shared.archive.transfer`) and the curation reports
(``.reports``, :mod:`shared.archive.reports`).

Every surface (writer API, CLI, explorer, importer) calls these, on the archive that
:meth:`shared.resources.Resources.archive` builds. Each method checks the principal again
(DESIGN §8), runs one PostgreSQL transaction under the workspace advisory lock through the store
(:mod:`shared.store`), records the activity, and enqueues projection operations only after the
commit. A write that committed is a success even when Redis, Qdrant or the embedder is down: it
reports ``index_status: pending``. A rejected or failed mutation leaves only its activity record,
written by :func:`~shared.archive.activity.audited` in a transaction of its own.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import msgspec

from shared import models
from shared.archive.activity import audited
from shared.archive.polling import poll
from shared.archive.recall_records import RecallRecorder
from shared.archive.responses import (ActivityEntry, ActivityPage, AuditReport, CardDetail,
                                      IndexState, index_state_view,
                                      CardPage, DeleteResult, DependencyStatus, OpenOperation,
                                      PendingOperation, PendingPage, QueuedRebuild, Readiness,
                                      RecallResponse, Rebuild, RetryResult, WorkspaceStatus,
                                      WriteResult)
from shared.auth import Principal
from shared.errors import (Conflict, NoPreviousIndex, DatabaseUnavailable, EmbedderUnavailable, IndexUnavailable,
                           InvalidInput, NotFound, PoolExhausted, SchemaOutdated)
from shared.index.embedding import Embedder
from shared.index.engine import IndexEngine
from shared.metrics import Metrics, QueueFigures
from shared.config import DEFAULT_DENSE_MODEL
from shared.models import (Card, CardWrite, SearchRequest, ShadowRequest, card_id_str, parse_card_id,
                           validate_card_write)
from shared.privacy import DEFAULT_FILTER, PrivacyFilter
from shared.projection.queue import OutageLog, ProjectionQueue
from shared.recall.verified import RecallTimings, recall
from shared.store import activity, cards, listing, outbox, rebuilds, workspaces
from shared.store.database import Database
from shared.store.listing import ListQuery
from shared.archive.sessions import Workflow
from shared.archive.schema_changes import SchemaChanges
from shared.archive.transfer import Transfer
from shared.archive.evaluations import Evaluations
from shared.archive.feedback import Feedback
from shared.archive.reports import Reports

log = logging.getLogger(__name__)

def _card_uuid(card_id: str) -> uuid.UUID:
    cid = parse_card_id(card_id)
    if cid is None:
        raise NotFound(f"no card {card_id!r} in this workspace")
    return cid


def metrics_outage_log() -> OutageLog:
    """The log of the database outages the metrics meet (:meth:`Archive.queue_figures`): one per
    process, which :class:`~shared.resources.Resources` holds."""
    return OutageLog(log, "metrics read the projection queue again")


class Archive:
    """The archive's services over one database, queue and (optionally) index and embedder.

    Built by :meth:`shared.resources.Resources.archive`. ``index`` and ``embedder`` may be None
    (a writer without an index): card administration works, recall raises
    :class:`IndexUnavailable` / :class:`EmbedderUnavailable`. ``privacy`` filters what recall
    sends to the embedder and the index. ``workflow``, ``schema_changes`` and ``transfer`` are
    the session workflow, the schema-change cleanup and the cards-file import and export over
    the same database and queue. ``metrics``: where recall observes its stages (default: a
    registry of this archive's own); ``metrics_outage``: where :meth:`queue_figures` logs a
    database outage once (default: a log of its own, :func:`metrics_outage_log`). It holds
    references only, so an archive is cheap to build and any number of them share the state
    of what they were given.
    """

    def __init__(self, db: Database, queue: ProjectionQueue,
                 index: IndexEngine | None = None, embedder: Embedder | None = None, *,
                 privacy: PrivacyFilter = DEFAULT_FILTER, metrics: Metrics | None = None,
                 metrics_outage: OutageLog | None = None, model_root: str | None = None,
                 dense_model: str | None = None,
                 recorder: RecallRecorder | None = None) -> None:
        self.db = db
        self.queue = queue
        self.index = index
        self.embedder = embedder
        self.privacy = privacy
        self.metrics = metrics or Metrics()
        self.metrics_outage = metrics_outage or metrics_outage_log()
        #: writes the record of each recall a caller asks (:meth:`search`)
        self.recorder = recorder or RecallRecorder(db, privacy, self.metrics)
        #: where a shadow rebuild may name a model folder, and the configured model id (the
        #: default of a shadow request that names a folder only)
        self.model_root = model_root
        self.dense_model = dense_model
        self.workflow = Workflow(db, queue, self.metrics)
        self.schema_changes = SchemaChanges(db, queue)
        self.transfer = Transfer(db, queue)
        self.evaluations = Evaluations(db, queue)
        self.feedback = Feedback(db, privacy, self.metrics)
        #: the curation reports (never recalled, unhelpful, conflicts)
        self.reports = Reports(db, index, embedder)

    # ---- helpers ----

    async def _projected(self, workspace: str, card_uuid: uuid.UUID, deleted: bool) -> bool:
        """Whether the card's projection is done: its point deleted (``deleted``), else its
        current revision projected in the current format."""
        async with self.db.transaction(workspace, read_only=True) as conn:
            if deleted:
                return not await outbox.open_for_card(conn, card_uuid)
            state = await outbox.projection_state(conn, card_uuid)
            return bool(state and state["projected_revision"] == state["revision"]
                        and state["projected_format"] == models.PROJECTION_FORMAT)

    async def _wait(self, workspace: str, card_uuid: uuid.UUID, seconds: float,
                    deleted: bool = False) -> str:
        """``current`` once the card's projection is done within ``seconds``, else ``pending``."""
        done = await poll(lambda: self._projected(workspace, card_uuid, deleted), bool, seconds)
        return "current" if done else "pending"

    async def _written(self, workspace: str, card: Card, op_id: int,
                       wait: float) -> WriteResult:
        """After a committed create or update (``card``: as its transaction wrote it):
        enqueue its projection and wait for it if asked. The write is committed, so it is
        answered as a success whatever happens here: a queue that is down leaves the operation
        for the sweep, and a database lost (or a pool exhausted) during the wait makes the
        status ``pending`` instead of a 503 that would invite a retry and a duplicate card."""
        await self.queue.enqueue(workspace, [op_id])
        status = "pending"
        if wait > 0:
            try:
                status = await self._wait(workspace, uuid.UUID(card.id[4:]), wait)
            except (DatabaseUnavailable, PoolExhausted) as exc:
                log.warning("card %s written; its projection state could not be read: %s",
                            card.id, exc.message)
            if status == "current":  # the card was read before its projection: say so there too
                card = msgspec.structs.replace(card, index_status="current")
        return WriteResult(card=card, index_status=status)  # type: ignore[arg-type]

    # ---- card administration (memory.manage) ----

    @audited("create")
    async def create_card(self, principal: Principal, workspace: str, body: CardWrite,
                          wait: float = 0.0) -> WriteResult:
        """Create a manual card; enqueue its projection after commit.

        :param wait: seconds (≤ 30) to wait for the projection to become current.
        :raises InvalidInput: invalid body or link. :raises Forbidden / NotFound: principal.
        """
        principal.require(workspace, "memory.manage")
        if body.revision is not None:
            raise InvalidInput("a new card has no revision", field="revision")
        validate_card_write(body)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            links = await cards.resolve_link_targets(conn, body.links)
            card_uuid, revision = await cards.insert(conn, workspace, body, origin="manual",
                                                     links=links)
            op_id = await outbox.insert(conn, workspace, card_uuid, "upsert", revision)
            await activity.record(conn, workspace, actor=principal.actor, verb="create",
                                      card_uuid=card_uuid, outcome="ok")
            card = await cards.get(conn, card_uuid)
        return await self._written(workspace, card, op_id, wait)

    @audited("update")
    async def update_card(self, principal: Principal, workspace: str, card_id: str,
                          body: CardWrite, wait: float = 0.0) -> WriteResult:
        """Replace a card's editable fields if ``body.revision`` is its current revision.

        :raises StaleRevision: another revision is current (409). :raises NotFound: no such card.
        :raises InvalidInput: invalid body or link.
        """
        principal.require(workspace, "memory.manage")
        card_uuid = _card_uuid(card_id)
        if body.revision is None:
            raise InvalidInput("an update must name the revision it edits", field="revision")
        validate_card_write(body)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            links = await cards.resolve_link_targets(conn, body.links, self_id=card_uuid)
            revision = await cards.update(conn, workspace, card_uuid, body, links)
            op_id = await outbox.insert(conn, workspace, card_uuid, "upsert", revision)
            await activity.record(conn, workspace, actor=principal.actor, verb="update",
                                      card_uuid=card_uuid, outcome="ok",
                                      detail={"revision": revision})
            card = await cards.get(conn, card_uuid)
        return await self._written(workspace, card, op_id, wait)

    @audited("delete")
    async def delete_card(self, principal: Principal, workspace: str, card_id: str,
                          wait: float = 0.0) -> DeleteResult:
        """Delete a card with its dependencies and every link into or out of it; queue the point
        deletion. Linking cards keep their revision (links are not projected).

        :raises NotFound: no such card.
        """
        principal.require(workspace, "memory.manage")
        card_uuid = _card_uuid(card_id)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await cards.delete(conn, card_uuid)
            op_id = await outbox.insert(conn, workspace, card_uuid, "delete", None)
            await activity.record(conn, workspace, actor=principal.actor, verb="delete",
                                      card_uuid=card_uuid, outcome="ok")
        await self.queue.enqueue(workspace, [op_id])
        status = await self._wait(workspace, card_uuid, wait, deleted=True) if wait > 0 else "pending"
        return DeleteResult(deleted=card_id_str(card_uuid), index_status=status)  # type: ignore[arg-type]

    async def get_card(self, principal: Principal, workspace: str, card_id: str) -> CardDetail:
        """One card with incoming links and its open projection operations.

        :raises NotFound: no such card in this workspace (another workspace's id included).
        """
        principal.require(workspace, "memory.manage")
        card_uuid = _card_uuid(card_id)
        async with self.db.transaction(workspace, read_only=True) as conn:
            card = await cards.get(conn, card_uuid)
            incoming = await cards.incoming_links(conn, card_uuid)
            ops = await outbox.pending_for_card(conn, card_uuid)
        return CardDetail(card=card, incoming_links=incoming,
                          open_operations=msgspec.convert(ops, list[OpenOperation]))

    async def list_cards(self, principal: Principal, workspace: str, query: ListQuery) -> CardPage:
        """A page of cards (``updated_at desc, id``) with the total count.

        :raises InvalidInput: bad page, per_page, family or origin.
        """
        principal.require(workspace, "memory.manage")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            page, total = await listing.list_cards(conn, query)
        return CardPage(cards=page, total=total, page=query.page, per_page=query.per_page)

    async def pending(self, principal: Principal, workspace: str, limit: int = 100,
                      offset: int = 0) -> PendingPage:
        """Incomplete projection operations, upserts and deletions, oldest first (for
        ``memory.manage``, and for ``memory.review``: a reviewer sees whether the cards a review
        applied are indexed yet; retrying needs ``memory.manage``)."""
        principal.require(workspace, "memory.manage", "memory.review")
        if not 1 <= limit <= 1000 or offset < 0:
            raise InvalidInput("limit must be 1..1000 and offset ≥ 0", field="limit")
        async with self.db.transaction(workspace, read_only=True) as conn:
            rows, total = await outbox.pending(conn, limit, offset)
        return PendingPage(operations=msgspec.convert(rows, list[PendingOperation]), total=total)

    @audited("retry")
    async def retry(self, principal: Principal, workspace: str, card_id: str) -> RetryResult:
        """Re-run a card's projection against its current state: re-queue its open operations
        (failed ones too), or queue a new upsert when the card has none. A retry for a deleted
        card completes the point deletion; it never brings content back.

        :raises NotFound: neither a card nor an open operation with that id.
        """
        principal.require(workspace, "memory.manage")
        card_uuid = _card_uuid(card_id)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            op_ids, _ = await outbox.requeue(conn, workspace, card_uuid)
            if not op_ids:
                raise NotFound(f"no card or open operation {card_id_str(card_uuid)}")
            await activity.record(conn, workspace, actor=principal.actor, verb="retry",
                                      card_uuid=card_uuid, outcome="ok",
                                      detail={"operations": op_ids})
        enqueued = await self.queue.enqueue(workspace, op_ids)
        return RetryResult(card_id=card_id_str(card_uuid), operations=op_ids, enqueued=enqueued)

    async def activity(self, principal: Principal, workspace: str, *, verb: str | None = None,
                       card_id: str | None = None, outcome: str | None = None, limit: int = 50,
                       offset: int = 0) -> ActivityPage:
        """Activity of the workspace, newest first: ``{activity: [...], total}``.

        :raises InvalidInput: limit outside 1..500, offset < 0, a card id that is not one.
        """
        principal.require(workspace, "memory.manage")
        if not 1 <= limit <= 500 or offset < 0:
            raise InvalidInput("limit must be 1..500 and offset ≥ 0", field="limit")
        card_uuid = None
        if card_id is not None:
            card_uuid = parse_card_id(card_id)
            if card_uuid is None:
                raise InvalidInput(f"{card_id!r} is not a card id", field="card_id")
        for name, value in (("verb", verb), ("outcome", outcome)):
            if value is not None and (len(value) > 100 or "\x00" in value):
                raise InvalidInput(f"{name} is not a valid filter", field=name)
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            rows, total = await activity.entries(conn, verb=verb, card_uuid=card_uuid,
                                                     outcome=outcome, limit=limit, offset=offset)
        return ActivityPage(activity=msgspec.convert(rows, list[ActivityEntry]), total=total)

    # ---- index lifecycle (memory.manage) ----

    def _shadow(self, req: ShadowRequest) -> dict[str, Any]:
        """A shadow request checked and resolved: ``{dense_model, dense_model_path, force,
        restore}``. A folder must be a directory under :attr:`model_root` (so an API token
        cannot make the server load files from anywhere); whether it holds a usable model the
        worker finds out when it loads it (the rebuild fails with the loader's message).

        :raises InvalidInput: neither a folder nor a model id; a folder outside the model root,
            missing, or not a directory; no model root configured."""
        if req.model_path is None and req.model is None:
            raise InvalidInput("a shadow rebuild names the model to build with: model_path "
                               "and/or model", field="shadow")
        path = None
        if req.model_path is not None:
            if not self.model_root:
                raise InvalidInput("no model root is configured (MEMARC_MODEL_ROOT): a shadow "
                                   "rebuild can name a fastembed model id only",
                                   field="shadow.model_path")
            root = Path(self.model_root).resolve()
            if "\x00" in req.model_path:
                raise InvalidInput("model_path contains a NUL character",
                                   field="shadow.model_path")
            try:
                folder = Path(req.model_path)
                folder = (folder if folder.is_absolute() else root / folder).resolve()
                if not folder.is_relative_to(root):
                    raise InvalidInput("model_path must be a folder under the model root "
                                       f"{str(root)!r}", field="shadow.model_path")
                is_dir = folder.is_dir()
            except OSError as exc:  # a name too long for the file system, a loop of links
                raise InvalidInput(f"model_path cannot be opened: {exc.strerror or exc}",
                                   field="shadow.model_path") from None
            if not is_dir:
                raise InvalidInput(f"no model folder {str(folder)!r}", field="shadow.model_path")
            path = str(folder)
        return {"dense_model": req.model or self.dense_model or DEFAULT_DENSE_MODEL,
                "dense_model_path": path, "force": req.force, "restore": False}

    @audited("index")
    async def start_rebuild(self, principal: Principal, workspace: str,
                            shadow: ShadowRequest | None = None, *,
                            restore: bool = False) -> QueuedRebuild:
        """Queue a tracked rebuild of the workspace's projection (see
        :mod:`shared.projection.rebuild`); with ``shadow``, a shadow rebuild with another
        model, switched in only when its evaluation is not worse (or forced); with
        ``restore``, a switch back to the previous index a shadow switch kept.

        :raises Conflict: a rebuild of this workspace is already queued or running; a switch
            back without a previous index (``no_previous_index``).
        :raises InvalidInput: a bad shadow request (:meth:`_shadow`).
        """
        principal.require(workspace, "memory.manage")
        spec = self._shadow(shadow) if shadow is not None else None
        rebuild_id = uuid.uuid4()
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            if restore:
                recorded = await workspaces.index_collection(conn)
                if not (recorded or {}).get("previous_collection"):
                    raise NoPreviousIndex("this workspace has no previous index to switch back "
                                          "to (only a shadow switch keeps one)")
                spec = {"dense_model": recorded["previous_dense_model"],
                        "dense_model_path": recorded["previous_dense_model_path"],
                        "force": True, "restore": True}
            row = await rebuilds.insert(conn, rebuild_id, workspace, principal.actor, spec)
            if row is None:
                active = await rebuilds.latest(conn)
                raise Conflict("a rebuild of this workspace is already queued or running",
                               rebuild=str(active["id"]) if active else None)
            await activity.record(conn, workspace, actor=principal.actor, verb="index",
                                      outcome="queued", detail={"rebuild": str(rebuild_id)})
        row["enqueued"] = await self.queue.enqueue_rebuild(workspace, rebuild_id)
        return msgspec.convert(row, QueuedRebuild)

    async def index_state(self, principal: Principal, workspace: str) -> IndexState:
        """The workspace's index as PostgreSQL records it: its collection and dense model, and
        the previous index a shadow switch kept (what a switch back restores)."""
        principal.require(workspace, "memory.manage")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            row = await workspaces.index_collection(conn)
        return index_state_view(row, self.dense_model)

    @audited("index")
    async def drop_previous_index(self, principal: Principal, workspace: str) -> IndexState:
        """Drop the previous index a shadow switch kept (no switch back after this).

        :raises Conflict: no previous index (``no_previous_index``) or a rebuild is open.
        :raises IndexUnavailable: the engine cannot drop it (nothing recorded changes)."""
        principal.require(workspace, "memory.manage")
        if self.index is None:
            raise IndexUnavailable("this process has no index")
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            row = await workspaces.index_collection(conn)
            previous = (row or {}).get("previous_collection")
            if not previous:
                raise NoPreviousIndex("this workspace has no previous index")
            latest = await rebuilds.latest(conn)
            if latest is not None and latest["status"] in ("queued", "running"):
                raise Conflict("a rebuild of this workspace is queued or running",
                               rebuild=str(latest["id"]))
            await self.index.drop_collection(previous)
            await workspaces.forget_previous_index(conn, workspace)
            await activity.record(conn, workspace, actor=principal.actor, verb="index",
                                  outcome="dropped", detail={"collection": previous})
            row = await workspaces.index_collection(conn)
        return index_state_view(row, self.dense_model)

    async def rebuild_status(self, principal: Principal, workspace: str,
                             rebuild_id: str | None = None) -> Rebuild:
        """A tracked rebuild (the latest one when no id is given).

        :raises NotFound: no such rebuild.
        """
        principal.require(workspace, "memory.manage")
        async with self.db.transaction(workspace, read_only=True) as conn:
            if rebuild_id:
                try:
                    rid = uuid.UUID(rebuild_id)
                except ValueError:
                    raise NotFound(f"no rebuild {rebuild_id!r}") from None
                row = await rebuilds.get(conn, rid)
            else:
                row = await rebuilds.latest(conn)
        if row is None:
            raise NotFound("no rebuild of this workspace")
        return msgspec.convert(row, Rebuild)

    async def audit(self, principal: Principal, workspace: str,
                    repair: bool = False) -> AuditReport:
        """Compare PostgreSQL and the index point by point; with ``repair``, queue the fixes.

        :raises IndexUnavailable: no index in this process, or it cannot be read.
        """
        from shared.projection.reconciliation import audit

        principal.require(workspace, "memory.manage")
        if self.index is None:
            raise IndexUnavailable("this process has no search index")
        report = await audit(self.db, self.index, workspace, repair=repair, actor=principal.actor)
        if report.queued:
            await self.queue.enqueue(workspace, report.queued)
        return report

    @audited("audit-repair")
    async def repair_index(self, principal: Principal, workspace: str) -> AuditReport:
        """:meth:`audit`, then queue the operations that fix what it found (an ``audit-repair``
        activity record).

        :raises IndexUnavailable: no index in this process, or it cannot be read.
        """
        return await self.audit(principal, workspace, repair=True)

    # ---- recall (memory.read) ----

    async def search(self, principal: Principal, workspace: str, req: SearchRequest, *,
                     role: Literal["runtime", "reader"] = "runtime",
                     record: bool = True) -> RecallResponse:
        """Verified recall through this process's privacy filter; see
        :func:`shared.recall.verified.recall` (``role``: the database role of its reads; the
        explorer passes ``reader``).

        A completed recall adds one observation per stage to
        ``memarc_recall_stage_duration_seconds`` (:meth:`shared.metrics.Metrics.observe_recall`),
        and, with ``record`` (a recall a caller asked), writes its record once the answer is
        computed (:meth:`shared.archive.recall_records.RecallRecorder.record`: its own short
        transaction as the runtime role, whatever ``role`` read, without the workspace lock):
        the answer's ``recall_id``, None when PostgreSQL refused the record (the recall answers
        all the same). ``record=False``: a recall the archive asks itself (the review page's
        neighbours).

        :raises IndexUnavailable / EmbedderUnavailable: this process has no index or model.
        :raises PrivacyFilterFailed: the privacy filter refused the query (nothing was sent).
        """
        principal.require(workspace, "memory.read")
        if self.index is None:
            raise IndexUnavailable("this process has no search index (start `memarc up`, or set "
                                   "MEMARC_QDRANT_URL)")
        if self.embedder is None:
            raise EmbedderUnavailable()
        timings = RecallTimings()
        started = time.perf_counter()
        response = await recall(self.db, self.index, self.embedder, principal, workspace, req,
                                role=role, privacy=self.privacy, timings=timings)
        seconds = time.perf_counter() - started
        self.metrics.observe_recall(timings.stages())
        if not record:
            return response
        self.metrics.observe_recall_outcome(workspace, req.mode, len(response.results))
        return await self.recorder.record(principal, workspace, req, response, timings.stages(),
                                          seconds)

    # ---- metrics ----

    async def queue_figures(self) -> QueueFigures | None:
        """The projection queue of every workspace as PostgreSQL holds it now
        (:func:`shared.store.outbox.queue_figures`), or None when PostgreSQL cannot be reached
        or is not migrated (the metrics then say ``memarc_database_up 0``; logged once per
        outage). No principal: the figures are counts and ages per workspace id, never card
        content."""
        try:
            figures = await outbox.queue_figures(self.db)
        except (DatabaseUnavailable, SchemaOutdated) as exc:
            self.metrics_outage.failed("metrics without the projection queue: %s", exc.message)
            return None
        self.metrics_outage.succeeded()
        return figures

    # ---- status ----

    async def status(self, principal: Principal, workspace: str) -> WorkspaceStatus:
        """Cards per family, how many are projected, open operations, and whether the
        dependencies answer (``dependencies``: ``database`` up, since it answered, and ``queue``
        up or down: Redis, which projects open operations)."""
        principal.require(workspace, "memory.read")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            families = await cards.family_counts(conn)
            counts = await outbox.projection_counts(conn)
            _, open_ops = await outbox.pending(conn, 1, 0)
        return WorkspaceStatus(workspace=workspace, by_family=families, cards=counts["cards"],
                               current=counts["current"], open_operations=open_ops,
                               dependencies=await self._dependencies())

    async def readiness(self) -> Readiness:
        """Whether this process can serve (``GET /readyz``): ``ready`` when PostgreSQL answers
        with the expected schema and Redis (the projection queue) answers, ``degraded`` while
        Redis is unreachable (saves still commit, their projection waits). No principal: it
        says nothing of any workspace.

        :raises DatabaseUnavailable / SchemaOutdated / PoolExhausted: PostgreSQL is down, not
            migrated, or no pooled connection came free in time.
        """
        await self.db.check_schema()
        dependencies = await self._dependencies()
        return Readiness(status="ready" if dependencies.queue == "up" else "degraded",
                         dependencies=dependencies)

    async def _dependencies(self) -> DependencyStatus:
        """PostgreSQL up (the caller has just read it) and whether Redis answers."""
        return DependencyStatus(database="up",
                                queue="up" if await self.queue.reachable() else "down")
