"""The archive's use cases (:class:`Archive`): card administration, index lifecycle, recall, import.

Every surface (writer API, CLI, explorer, importer) calls these, on the archive that
:meth:`shared.resources.Resources.archive` builds. Each method checks the principal again
(DESIGN §8), runs one PostgreSQL transaction under the workspace advisory lock through the store
(:mod:`shared.store`), records the activity, and enqueues projection operations only after the
commit. A write that committed is a success even when Redis, Qdrant or the embedder is down: it
reports ``index_status: pending``. A rejected or failed mutation leaves only its activity record,
written by :func:`~shared.archive.activity.audited` in a transaction of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from typing import Any, Literal

import msgspec

from shared import models
from shared.archive.activity import audited
from shared.auth import Principal
from shared.config import Settings
from shared.errors import (Conflict, DatabaseUnavailable, EmbedderUnavailable, IndexUnavailable,
                           InvalidInput, NotFound, PoolExhausted, SchemaOutdated)
from shared.index.embedding import Embedder
from shared.index.engine import IndexEngine
from shared.metrics import Metrics, QueueFigures
from shared.models import (MAX_WAIT_SECONDS, Card, CardWrite, ImportCard, IncomingLink,
                           SearchRequest, card_id_str, parse_card_id, validate_card_write)
from shared.privacy import DEFAULT_FILTER, PrivacyFilter
from shared.projection.project import BATCH_SIZE
from shared.projection.queue import OutageLog, ProjectionQueue
from shared.recall.verified import RecallTimings, recall
from shared.store import activity, cards, listing, outbox, rebuilds, workspaces
from shared.store.database import Database
from shared.store.listing import ListQuery
from shared.archive.sessions import Workflow
from shared.archive.schema_changes import SchemaChanges

log = logging.getLogger(__name__)

IndexStatus = Literal["current", "pending", "failed"]
MAX_IMPORT_CARDS = 20_000


class WriteResult(msgspec.Struct):
    """Response of a create or update: the card as committed and its index status."""

    card: Card
    index_status: IndexStatus


class DeleteResult(msgspec.Struct):
    """Response of a delete: the removed id and whether its point is gone yet."""

    deleted: str
    index_status: Literal["current", "pending"]


class CardDetail(msgspec.Struct):
    """A card with its incoming links and projection detail (show)."""

    card: Card
    incoming_links: list[IncomingLink]
    open_operations: list[dict[str, Any]]


class CardPage(msgspec.Struct):
    """One page of a listing."""

    cards: list[Card]
    total: int
    page: int
    per_page: int


class PendingPage(msgspec.Struct):
    """Incomplete projection operations."""

    operations: list[dict[str, Any]]
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


def _card_uuid(card_id: str) -> uuid.UUID:
    cid = parse_card_id(card_id)
    if cid is None:
        raise NotFound(f"no card {card_id!r} in this workspace")
    return cid


async def _import_refs(conn: Any, items: list[ImportCard], line_of: dict[str, int]
                       ) -> tuple[dict[str, uuid.UUID], set[str]]:
    """Resolve an import's keys and link targets in its transaction: ``(refs, existing)``, where
    ``refs`` maps every key of the file and every link target to its card (an existing card of
    the key, else a new id) and ``existing`` holds the file's keys that are cards already.

    :raises InvalidInput: a link target that is no key of the file and neither the key nor the
        id of a card of this workspace; a line that links to itself; a line with two links to
        one card (its key and its id, say).
    """
    outside = list(dict.fromkeys(link.target for c in items for link in c.links
                                 if link.target not in line_of))
    found = await cards.ids_by_key(conn, [*line_of, *outside])
    found.update(await _adopt_unkeyed(conn, [c for c in items if c.key not in found]))
    existing = {k for k in line_of if k in found}
    refs = {k: found.get(k) or uuid.uuid4() for k in line_of}
    unresolved = [t for t in outside if t not in found]
    by_id = {t: parse_card_id(t) for t in unresolved}
    for target, cid in by_id.items():
        if cid is None:
            raise InvalidInput(f"link target {target!r} is neither a key of this file nor the "
                               "key or id of a card of this workspace")
    present = await cards.existing_ids(conn, list(by_id.values())) if by_id else set()
    for target, cid in by_id.items():
        if cid not in present:
            raise InvalidInput(f"link target {target} is not a card of this workspace")
        refs[target] = cid  # type: ignore[assignment]
    refs.update({t: found[t] for t in outside if t in found})
    for c in items:
        if any(refs[link.target] == refs[c.key] for link in c.links):
            raise InvalidInput(f"line {line_of[c.key]}: key {c.key!r} links to itself")
        seen: dict[uuid.UUID, str] = {}
        for link in c.links:  # a key and an id (or two keys) can name the same card
            first = seen.setdefault(refs[link.target], link.target)
            if first != link.target:
                raise InvalidInput(f"line {line_of[c.key]}: links {first!r} and "
                                   f"{link.target!r} name the same card; link to it once")
    return refs, existing


def _signature(card: Card | ImportCard) -> tuple[Any, ...]:
    """What makes an import line the card it created: family, title, content, scope, concepts
    and dependencies (in order) and source; not the links (a line names them by key)."""
    return (card.family, card.title, tuple(sorted(card.content.items())), card.scope,
            tuple(card.concepts), tuple(d.key() for d in card.dependencies),
            msgspec.json.encode(card.source, order="sorted") if card.source else None)


async def _adopt_unkeyed(conn: Any, lines: list[ImportCard]) -> dict[str, uuid.UUID]:
    """Cards imported before migration 011 have no import key: each line (whose key is no card's
    key) that says exactly what such a card holds (:func:`_signature`) adopts it, the oldest
    first, and gives it its key; returns ``{key: card id}`` of the adoptions. So a file imported
    before import keys existed imports again without creating its cards twice."""
    candidates = await cards.unkeyed_imported(conn) if lines else []
    if not candidates:
        return {}
    waiting: dict[tuple[Any, ...], list[uuid.UUID]] = {}
    for card in candidates:
        waiting.setdefault(_signature(card), []).append(parse_card_id(card.id))  # type: ignore[arg-type]
    adopted = {}
    for line in lines:
        ids = waiting.get(_signature(line))
        if ids:
            adopted[line.key] = ids.pop(0)
    if adopted:
        await cards.set_import_keys(conn, adopted)
    return adopted


def _same_card(card: Card, line: ImportCard, links: set[tuple[uuid.UUID, str]]) -> bool:
    """Whether an import line (validated) says what the card holds: title, content, scope,
    concepts (in order), dependencies (in order) and outgoing links (as a set)."""
    return (card.title == line.title and card.content == line.content
            and card.scope == line.scope and card.concepts == line.concepts
            and card.dependencies == line.dependencies
            and {(parse_card_id(link.target), link.meaning) for link in card.links} == links)


async def _update_imported(conn: Any, workspace: str, items: list[ImportCard],
                           refs: dict[str, uuid.UUID], existing: set[str],
                           line_of: dict[str, int]) -> list[uuid.UUID]:
    """``on_conflict=update``: replace the editable fields of each existing card whose line
    differs from it (:func:`_same_card`), keeping its id, origin and source; returns the ids
    updated (each at revision + 1).

    :raises InvalidInput: a line's family is not its card's (a family cannot change).
    """
    current = await cards.get_many(conn, [refs[k] for k in existing])
    updated = []
    for line in items:
        if line.key not in existing:
            continue
        card = current[refs[line.key]]
        if card.family != line.family:
            raise InvalidInput(f"line {line_of[line.key]} (key {line.key!r}): its card "
                               f"{card.id} is a {card.family}; a card's family cannot change")
        links = [(refs[link.target], link.meaning.strip()) for link in line.links]
        if _same_card(card, line, set(links)):
            continue
        body = CardWrite(family=line.family, title=line.title, content=line.content,
                         scope=line.scope, concepts=line.concepts,
                         dependencies=line.dependencies, revision=card.revision)
        await cards.update(conn, workspace, refs[line.key], body, links)
        updated.append(refs[line.key])
    return updated


class Archive:
    """The archive's services over one database, queue and (optionally) index and embedder.

    Built by :meth:`shared.resources.Resources.archive`. ``index`` and ``embedder`` may be None
    (a writer without an index): card administration works, recall raises
    :class:`IndexUnavailable` / :class:`EmbedderUnavailable`. ``privacy`` filters what recall
    sends to the embedder and the index. ``workflow`` and ``schema_changes`` are the session
    workflow and the schema-change cleanup over the same database and queue. ``metrics``: where
    recall observes its stages (default: a registry of this archive's own).
    """

    def __init__(self, settings: Settings, db: Database, queue: ProjectionQueue,
                 index: IndexEngine | None = None, embedder: Embedder | None = None, *,
                 privacy: PrivacyFilter = DEFAULT_FILTER, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.db = db
        self.queue = queue
        self.index = index
        self.embedder = embedder
        self.privacy = privacy
        self.metrics = metrics or Metrics()
        self._metrics_outage = OutageLog(log, "metrics read the projection queue again")
        self.workflow = Workflow(db, queue)
        self.schema_changes = SchemaChanges(db, queue)

    # ---- helpers ----

    async def _wait(self, workspace: str, card_uuid: uuid.UUID, seconds: float,
                    deleted: bool = False) -> str:
        deadline = time.monotonic() + min(max(seconds, 0.0), MAX_WAIT_SECONDS)
        while True:
            async with self.db.transaction(workspace, read_only=True) as conn:
                if deleted:
                    done = not await outbox.open_for_card(conn, card_uuid)
                else:
                    state = await outbox.projection_state(conn, card_uuid)
                    done = bool(state and state["projected_revision"] == state["revision"]
                                and state["projected_format"] == models.PROJECTION_FORMAT)
            if done:
                return "current"
            if time.monotonic() >= deadline:
                return "pending"
            await asyncio.sleep(0.1)

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
        return CardDetail(card=card, incoming_links=incoming, open_operations=ops)

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
        """Incomplete projection operations, upserts and deletions, oldest first."""
        principal.require(workspace, "memory.manage")
        if not 1 <= limit <= 1000 or offset < 0:
            raise InvalidInput("limit must be 1..1000 and offset ≥ 0", field="limit")
        async with self.db.transaction(workspace, read_only=True) as conn:
            rows, total = await outbox.pending(conn, limit, offset)
        return PendingPage(operations=rows, total=total)

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
            op_ids = await outbox.reset_for_retry(conn, card_uuid)
            if not op_ids:
                state = await outbox.projection_state(conn, card_uuid)
                if state is None:
                    raise NotFound(f"no card or open operation {card_id_str(card_uuid)}")
                op_ids = [await outbox.insert(conn, workspace, card_uuid, "upsert",
                                              state["revision"])]
            await activity.record(conn, workspace, actor=principal.actor, verb="retry",
                                      card_uuid=card_uuid, outcome="ok",
                                      detail={"operations": op_ids})
        enqueued = await self.queue.enqueue(workspace, op_ids)
        return RetryResult(card_id=card_id_str(card_uuid), operations=op_ids, enqueued=enqueued)

    async def activity(self, principal: Principal, workspace: str, *, verb: str | None = None,
                       card_id: str | None = None, outcome: str | None = None, limit: int = 50,
                       offset: int = 0) -> dict[str, Any]:
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
        return {"activity": rows, "total": total}

    # ---- index lifecycle (memory.manage) ----

    @audited("index")
    async def start_rebuild(self, principal: Principal, workspace: str) -> dict[str, Any]:
        """Queue a tracked rebuild of the workspace's projection (see :mod:`shared.projection.rebuild`).

        :raises Conflict: a rebuild of this workspace is already queued or running.
        """
        principal.require(workspace, "memory.manage")
        rebuild_id = uuid.uuid4()
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            row = await rebuilds.insert(conn, rebuild_id, workspace, principal.actor)
            if row is None:
                active = await rebuilds.latest(conn)
                raise Conflict("a rebuild of this workspace is already queued or running",
                               rebuild=str(active["id"]) if active else None)
            await activity.record(conn, workspace, actor=principal.actor, verb="index",
                                      outcome="queued", detail={"rebuild": str(rebuild_id)})
        row["enqueued"] = await self.queue.enqueue_rebuild(workspace, rebuild_id)
        return row

    async def rebuild_status(self, principal: Principal, workspace: str,
                             rebuild_id: str | None = None) -> dict[str, Any]:
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
        return row

    async def audit(self, principal: Principal, workspace: str, repair: bool = False):
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
    async def repair_index(self, principal: Principal, workspace: str) -> Any:
        """:meth:`audit`, then queue the operations that fix what it found (an ``audit-repair``
        activity record).

        :raises IndexUnavailable: no index in this process, or it cannot be read.
        """
        return await self.audit(principal, workspace, repair=True)

    # ---- recall (memory.read) ----

    async def search(self, principal: Principal, workspace: str, req: SearchRequest, *,
                     role: Literal["runtime", "reader"] = "runtime"):
        """Verified recall through this process's privacy filter; see
        :func:`shared.recall.verified.recall` (``role``: the database role of its reads; the
        explorer passes ``reader``).

        A completed recall adds one observation per stage to
        ``memarc_recall_stage_duration_seconds`` (:meth:`shared.metrics.Metrics.observe_recall`).

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
        response = await recall(self.db, self.index, self.embedder, principal, workspace, req,
                                role=role, privacy=self.privacy, timings=timings)
        self.metrics.observe_recall(timings.stages())
        return response

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
            self._metrics_outage.failed("metrics without the projection queue: %s", exc.message)
            return None
        self._metrics_outage.succeeded()
        return figures

    # ---- bulk import and export ----

    @audited("import")
    async def import_cards(self, principal: Principal, workspace: str,
                           lines: Iterable[ImportCard],
                           on_conflict: models.OnConflict = "skip") -> ImportResult:
        """Import a cards file in one transaction (all or nothing), through the same validation
        as the API; idempotent by key.

        A line whose key is already a card's key in the workspace (its import key, or
        ``mem-<id>`` for a card without one: migration 011) is that card: with ``on_conflict``
        ``skip`` it is left alone, with ``update`` its title, content, scope, concepts,
        dependencies and links are replaced when one of them differs (same id, revision + 1,
        origin and source kept, a projection queued) and it is left alone otherwise. Any other
        line creates a card (origin: the line's, default ``import``) that remembers its key,
        unless it adopts a card imported before import keys existed (:func:`_adopt_unkeyed`). So
        importing one file twice changes nothing. A link target is a key of this file, else the
        key of a card of the workspace, else the id of one. A key that is a card id in another
        spelling is read as ``mem-<uuid>`` (as links are).

        :raises InvalidInput: no lines (``no cards``), a line is invalid (its number and key
            are named), a blank key (whitespace only) or one with leading or trailing
            whitespace (``field`` ``key``, ``line``: it is refused, never trimmed), duplicate keys,
            a link to no card of the file or the workspace, a link to itself, a line whose
            card is of another family (with either ``on_conflict``), more than 20,000 cards,
            another ``on_conflict``.
        """
        principal.require(workspace, "memory.manage")
        if on_conflict not in models.ON_CONFLICT:
            raise InvalidInput(f"on_conflict must be one of {', '.join(models.ON_CONFLICT)}, "
                               f"not {on_conflict!r}", field="on_conflict")
        items = list(lines)
        if not items:  # a 201 that created nothing would hide a truncated or wrong file
            raise InvalidInput("no cards: the import holds no card lines (a cards file has one "
                               "JSON object per line)")
        if len(items) > MAX_IMPORT_CARDS:
            raise InvalidInput(f"an import holds at most {MAX_IMPORT_CARDS} cards")
        line_of: dict[str, int] = {}
        for n, card in enumerate(items, start=1):
            try:
                validate_card_write(card)
            except InvalidInput as exc:
                raise InvalidInput(f"line {n} (key {card.key!r}): {exc.message}") from exc
            if not card.key.strip():  # it could be named by no link, nor told from another
                raise InvalidInput(f"line {n}: the key is blank (a key names its card in "
                                   "links and in later imports: give it visible characters)")
            if card.key != card.key.strip():  # " k1" and "k1" would be two keys that read alike
                raise InvalidInput(f"line {n}: key {card.key!r} has leading or trailing "
                                   "whitespace (a key is matched exactly: remove it)",
                                   field="key", line=n)
            card.key = models.normalize_card_ref(card.key)  # the spelling links use
            if card.key in line_of:
                raise InvalidInput(f"line {n}: duplicate key {card.key!r}")
            line_of[card.key] = n
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            refs, existing = await _import_refs(conn, items, line_of)
            family_of = await cards.families(conn, [refs[k] for k in existing])
            for line in items:  # whatever on_conflict says: a skipped line is no other card
                if line.key in existing and family_of[refs[line.key]] != line.family:
                    raise InvalidInput(
                        f"line {line_of[line.key]} (key {line.key!r}): its card "
                        f"{card_id_str(refs[line.key])} is a {family_of[refs[line.key]]}; a "
                        "card's family cannot change", line=line_of[line.key])
            new = [c for c in items if c.key not in existing]
            await cards.insert_imported(conn, workspace, new, refs)
            updated = (await _update_imported(conn, workspace, items, refs, existing, line_of)
                       if on_conflict == "update" else [])
            written = [refs[c.key] for c in new] + updated
            op_ids = await outbox.insert_upserts(conn, workspace, written) if written else []
            left = len(existing) - len(updated)
            result = ImportResult(
                created=len(new), by_family=dict(sorted(Counter(c.family for c in new).items())),
                enqueued=True, updated=len(updated),
                unchanged=left if on_conflict == "update" else 0,
                skipped=left if on_conflict == "skip" else 0)
            await activity.record(conn, workspace, actor=principal.actor, verb="import",
                                      outcome="ok", detail={
                                          "cards": len(items), "created": result.created,
                                          "updated": result.updated,
                                          "unchanged": result.unchanged,
                                          "skipped": result.skipped, "on_conflict": on_conflict})
        # One job per projection batch: each job leases a batch of open operations itself, and
        # the sweep re-offers any operation whose job was lost.
        result.enqueued = await self.queue.enqueue(workspace, op_ids[::BATCH_SIZE])
        return result

    async def export_cards(self, principal: Principal, workspace: str,
                           families: Iterable[str] = ()) -> AsyncIterator[ImportCard]:
        """The workspace's cards (of ``families``; none given: all four) as cards-file lines,
        which :meth:`import_cards` reads: each card under its key (its import key, else
        ``mem-<id>``) with title, content, scope, concepts, dependencies, outgoing links by
        their targets' keys, origin and source; no ids, revisions, vectors or index state. In
        key order (byte order), so two workspaces holding the same cards export the same lines.

        Checks the principal, the families and the workspace when awaited; the iterator then
        streams the cards from one read-only transaction through a server-side cursor (one
        snapshot, a page of cards in memory at a time), holding a pooled connection until it is
        exhausted or closed. A family-filtered export keeps the links to cards of other
        families: an import resolves them where those cards are in the workspace already.

        :raises InvalidInput: an unknown family. :raises Forbidden / NotFound: principal,
            workspace.
        """
        principal.require(workspace, "memory.manage")
        chosen = list(dict.fromkeys(families)) or list(models.FAMILIES)
        unknown = [f for f in chosen if f not in models.FAMILIES]
        if unknown:
            raise InvalidInput(f"unknown family {unknown[0]!r} (families: "
                               f"{', '.join(models.FAMILIES)})", field="family")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
        return self._export_stream(workspace, chosen)

    async def _export_stream(self, workspace: str, families: list[str]) -> AsyncIterator[ImportCard]:
        async with self.db.transaction(workspace, read_only=True) as conn:
            async for line in cards.export_lines(conn, families):
                yield line

    # ---- status ----

    async def status(self, principal: Principal, workspace: str) -> dict[str, Any]:
        """Cards per family, how many are projected, open operations, and whether the
        dependencies answer (``dependencies``: ``database`` up, since it answered, and ``queue``
        up or down: Redis, which projects open operations)."""
        principal.require(workspace, "memory.read")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            families = await cards.family_counts(conn)
            counts = await outbox.projection_counts(conn)
            _, open_ops = await outbox.pending(conn, 1, 0)
        queue = "up" if await self.queue.reachable() else "down"
        return {"workspace": workspace, "by_family": families, "cards": counts["cards"],
                "current": counts["current"], "open_operations": open_ops,
                "dependencies": {"database": "up", "queue": queue}}
