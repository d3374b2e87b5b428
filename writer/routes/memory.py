"""The writer's memory routes (DESIGN §3, §5, §8): the cards of one workspace, their
administration (``memory.manage``: list, show, create, update, delete, pending, retry, index,
audit, activity, import and export, the recall records and a card's feedback) and recall
(``memory.read``: search, status, feedback on a recall's cards).

Handlers parse, call :class:`shared.archive.cards.Archive` (import and export:
:class:`shared.archive.transfer.Transfer`), return; the workspace router
(:func:`writer.routes.workspace_router`) gives them their guards, security and dependencies.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from typing import Annotated

import msgspec
from litestar import Controller, Request, delete, get, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody, Parameter
from litestar.response import Stream

from shared import models
from shared.archive.cards import Archive
from shared.archive.responses import (ActivityPage, AuditReport, CardDetail, CardFeedback,
                                      CardPage, FeedbackResult, IndexState, RecallRecordDetail,
                                      RecallRecordPage,
                                      DeleteResult, ImportResult, PendingPage, QueuedRebuild,
                                      RecallResponse, Rebuild, RetryResult, WorkspaceStatus,
                                      WriteResult)
from shared.archive.transfer import Transfer
from shared.auth import Principal
from shared.cards_file import decode_cards_file
from shared.errors import BadRequest, UnsupportedEncoding
from shared.models import CardWrite, FeedbackRequest, ImportCard, SearchRequest
from shared.store.listing import ListQuery
from writer.problems import IMPORT_PROBLEM_RESPONSES, PROBLEM_RESPONSES
from writer.routes.params import CardId, Offset, RebuildId, RecallId, Wait, WorkspaceId

MAX_IMPORT_BYTES = 64_000_000
NDJSON = "application/x-ndjson"
#: Bytes of JSON Lines an export gathers before it sends a chunk.
EXPORT_CHUNK = 64 * 1024


def _decode_body(raw: bytes, encoding: str) -> bytes:
    """An import body without its content encoding (identity or gzip), decompressed in bounded
    steps so that a small gzip bomb cannot fill memory.

    :raises UnsupportedEncoding: another encoding. :raises BadRequest: invalid gzip, or more
        than ``4 × MAX_IMPORT_BYTES`` once decompressed.
    """
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "x-gzip"):
        raise UnsupportedEncoding(f"Content-Encoding {encoding!r} is not supported (gzip or none)")
    limit = MAX_IMPORT_BYTES * 4
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise BadRequest(f"body is not valid gzip: {exc}") from exc
    if len(out) > limit or inflater.unconsumed_tail:
        raise BadRequest(f"decompressed body is larger than {limit} bytes")
    if not inflater.eof:
        raise BadRequest("body is not valid gzip: truncated")
    return out


async def _ndjson(first: ImportCard | None, rest: AsyncIterator[ImportCard]) -> AsyncIterator[bytes]:
    """The lines of an export (``first``, then ``rest``) as JSON Lines, in chunks of about
    :data:`EXPORT_CHUNK` bytes; closes ``rest`` (its transaction) however the response ends."""
    encoder = msgspec.json.Encoder()
    buffer = bytearray()
    try:
        if first is None:
            return
        encoder.encode_into(first, buffer, len(buffer))
        buffer += b"\n"
        async for line in rest:
            encoder.encode_into(line, buffer, len(buffer))
            buffer += b"\n"
            if len(buffer) >= EXPORT_CHUNK:
                yield bytes(buffer)
                buffer.clear()
        if buffer:
            yield bytes(buffer)
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


class MemoryController(Controller):
    """Cards of one workspace: administration (memory.manage) and recall (memory.read)."""

    path = "/memory"
    tags = ["memory"]
    opt = {"permission": "memory.manage"}

    @get("", responses=PROBLEM_RESPONSES, summary="List cards")
    async def list_cards(
        self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId],
        q: FromQuery[Annotated[str | None, Parameter(max_length=models.MAX_QUERY)]] = None,
        family: FromQuery[list[models.Family] | None] = None,
        origin: FromQuery[list[models.Origin] | None] = None,
        concepts: FromQuery[Annotated[list[str] | None, Parameter(max_items=models.MAX_CONCEPTS)]] = None,
        database: FromQuery[Annotated[str | None, Parameter(max_length=models.MAX_NAME)]] = None,
        schema: FromQuery[Annotated[str | None, Parameter(max_length=models.MAX_NAME)]] = None,
        table: FromQuery[Annotated[str | None, Parameter(max_length=models.MAX_NAME)]] = None,
        column: FromQuery[Annotated[str | None, Parameter(max_length=models.MAX_NAME)]] = None,
        updated_after: FromQuery[Annotated[str | None, Parameter(
            max_length=40, description="date (YYYY-MM-DD, UTC) or ISO 8601 timestamp")]] = None,
        updated_before: FromQuery[Annotated[str | None, Parameter(
            max_length=40, description="date (YYYY-MM-DD, UTC) or ISO 8601 timestamp")]] = None,
        sort: FromQuery[models.Sort] = "updated",
        desc: FromQuery[bool | None] = None,
        page: FromQuery[Annotated[int, Parameter(ge=1, le=1_000_000)]] = 1,
        per_page: FromQuery[Annotated[int, Parameter(ge=1, le=models.MAX_PER_PAGE)]] = 20,
    ) -> CardPage:
        """A page of cards. ``q``: text (case-insensitive substring of the title, scope,
        concepts or a content value; content keys are not searched) or a card id; ``family``, ``origin`` (any of), ``concepts`` (all of) repeatable; ``database``,
        ``schema``, ``table``, ``column``: one dependency entry carries them all;
        ``updated_after`` / ``updated_before``: dates (UTC midnight) or ISO timestamps; ``sort`` = updated (default,
        newest first), created, title, family, ``desc`` reverses; ties by id. Errors: 401, 403,
        404 (workspace), 422."""
        query = ListQuery(q=q, family=list(family or []), origin=list(origin or []),
                          concepts=list(concepts or []), database=database, schema=schema,
                          table=table, column=column,
                          updated_after=models.parse_time_bound("updated_after", updated_after),
                          updated_before=models.parse_time_bound("updated_before", updated_before),
                          sort=sort, desc=desc, page=page,
                          per_page=per_page)
        return await archive.list_cards(principal, workspace_id, query)

    @post("", responses=PROBLEM_RESPONSES,
          summary="Create a card", status_code=201, opt={"activity": "create"})
    async def create_card(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                          workspace_id: FromPath[WorkspaceId], data: JSONBody[CardWrite],
                          wait: FromQuery[Wait] = None) -> WriteResult:
        """Create a manual card. 201 with ``index_status`` (``pending`` unless ``wait`` saw the
        projection complete). Errors: 400 malformed, 422 invalid (link to a missing card or another
        workspace's card included), 401, 403, 404, 503 ``database_unavailable``."""
        return await archive.create_card(principal, workspace_id, data, wait or 0.0)

    @get("/pending", responses=PROBLEM_RESPONSES, summary="Incomplete index operations",
         opt={"permission": ("memory.manage", "memory.review")})
    async def pending(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                      workspace_id: FromPath[WorkspaceId],
                      limit: FromQuery[Annotated[int, Parameter(ge=1, le=1000)]] = 100,
                      offset: FromQuery[Offset] = 0) -> PendingPage:
        """Every incomplete projection operation (upserts and deletions): card id, operation,
        status, attempts, last error, age in seconds. ``memory.manage`` or ``memory.review`` (a
        reviewer sees whether the cards a review applied are indexed; a retry needs
        ``memory.manage``)."""
        return await archive.pending(principal, workspace_id, limit, offset)

    @get("/activity", responses=PROBLEM_RESPONSES, summary="Activity log")
    async def activity(
        self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId],
        verb: FromQuery[Annotated[str | None, Parameter(max_length=100)]] = None,
        card_id: FromQuery[Annotated[str | None, Parameter(max_length=60)]] = None,
        outcome: FromQuery[Annotated[str | None, Parameter(max_length=100)]] = None,
        limit: FromQuery[Annotated[int, Parameter(ge=1, le=500)]] = 50,
        offset: FromQuery[Offset] = 0,
    ) -> ActivityPage:
        """Every state change and every rejected or failed attempt, newest first:
        ``{activity: [{id, at, actor, verb, card_id, outcome, detail}], total}``; filters
        ``verb``, ``card_id``, ``outcome`` (prefix, e.g. ``rejected``)."""
        return await archive.activity(principal, workspace_id, verb=verb, card_id=card_id,
                                      outcome=outcome, limit=limit, offset=offset)

    @get("/status", responses=PROBLEM_RESPONSES,
         summary="Card and projection counts", opt={"permission": "memory.read"})
    async def status(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                     workspace_id: FromPath[WorkspaceId]) -> WorkspaceStatus:
        """Cards per family, how many have a current projection, open operations, and
        ``dependencies``: ``{"database": "up", "queue": "up" | "down"}`` (Redis)."""
        return await archive.status(principal, workspace_id)

    @post("/index", responses=PROBLEM_RESPONSES,
          summary="Rebuild the workspace's index", status_code=202,
          opt={"activity": "index"})
    async def start_rebuild(self, archive: NamedDependency[Archive],
                            principal: NamedDependency[Principal],
                            workspace_id: FromPath[WorkspaceId],
                            data: JSONBody[models.IndexRequest | None] = None) -> QueuedRebuild:
        """Queue a tracked rebuild of the projection from authoritative cards into a new
        collection, switched in when complete (recall keeps working on the old one). 202 with
        the rebuild ``{id, status, ...}``; follow it with ``GET .../index/{id}``. An optional
        body ``{"shadow": {"model_path", "model", "force"}}`` makes it a shadow rebuild with
        another dense model: evaluated against the current index on the same cases and
        switched in only when not worse (else status ``declined``) or when forced; the
        current index is kept as the previous one (docs/evaluation.md). Errors: 409 a rebuild
        is already queued or running; 422 a model folder outside ``MEMARC_MODEL_ROOT``."""
        shadow = data.shadow if data is not None else None
        return await archive.start_rebuild(principal, workspace_id, shadow)

    @post("/index/switch-back", responses=PROBLEM_RESPONSES,
          summary="Switch back to the previous index", status_code=202,
          opt={"activity": "index"})
    async def switch_back(self, archive: NamedDependency[Archive],
                          principal: NamedDependency[Principal],
                          workspace_id: FromPath[WorkspaceId],
                          data: JSONBody[models.EmptyRequest | None] = None) -> QueuedRebuild:
        """Queue a switch back to the previous index a shadow switch kept, with its model: its
        points still current are kept, the rest written again, then it is switched in (the
        one it replaces becomes the previous). No body, or ``{}``. 202 with the rebuild.
        Errors: 400 a body with members; 409 ``no_previous_index``, or a rebuild is already
        queued or running."""
        return await archive.start_rebuild(principal, workspace_id, restore=True)

    @get("/index/collections", responses=PROBLEM_RESPONSES, summary="The recorded index")
    async def index_state(self, archive: NamedDependency[Archive],
                          principal: NamedDependency[Principal],
                          workspace_id: FromPath[WorkspaceId]) -> IndexState:
        """``{current: {collection, model, model_path}, previous: … | null, switched_at}``:
        the collection and dense model recall serves from, and the previous index a shadow
        switch kept."""
        return await archive.index_state(principal, workspace_id)

    @delete("/index/previous", responses=PROBLEM_RESPONSES, summary="Drop the previous index",
            status_code=200, opt={"activity": "index"})
    async def drop_previous_index(self, archive: NamedDependency[Archive],
                                  principal: NamedDependency[Principal],
                                  workspace_id: FromPath[WorkspaceId]) -> IndexState:
        """Drop the previous index a shadow switch kept (no switch back afterwards); answers
        the index state. Errors: 409 ``no_previous_index`` or a rebuild is open; 503
        ``index_unavailable``."""
        return await archive.drop_previous_index(principal, workspace_id)

    @get("/index", responses=PROBLEM_RESPONSES, summary="Latest index rebuild")
    async def latest_rebuild(self, archive: NamedDependency[Archive],
                             principal: NamedDependency[Principal],
                             workspace_id: FromPath[WorkspaceId]) -> Rebuild:
        """The latest rebuild: status (queued, running, done, failed), progress ``done/total``,
        summary or error. 404 when the workspace was never rebuilt."""
        return await archive.rebuild_status(principal, workspace_id)

    @get("/index/{rebuild_id:str}", responses=PROBLEM_RESPONSES, summary="One index rebuild")
    async def rebuild(self, archive: NamedDependency[Archive],
                      principal: NamedDependency[Principal],
                      workspace_id: FromPath[WorkspaceId],
                      rebuild_id: FromPath[RebuildId]) -> Rebuild:
        """One tracked rebuild by id. Errors: 404."""
        return await archive.rebuild_status(principal, workspace_id, rebuild_id)

    @get("/audit", responses=PROBLEM_RESPONSES, summary="Audit the index against PostgreSQL")
    async def audit(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                    workspace_id: FromPath[WorkspaceId]) -> AuditReport:
        """Point-by-point comparison: ``missing``, ``stale``, ``orphan`` and ``misplaced`` card
        ids, plus counts. Errors: 503 ``index_unavailable``."""
        return await archive.audit(principal, workspace_id)

    @post("/audit/repair", responses=PROBLEM_RESPONSES,
          summary="Audit and queue the fixes", status_code=202,
          opt={"activity": "audit-repair"})
    async def audit_repair(self, archive: NamedDependency[Archive],
                           principal: NamedDependency[Principal],
                           workspace_id: FromPath[WorkspaceId]) -> AuditReport:
        """As ``GET .../audit``, then queue upserts for missing and stale cards and deletions for
        orphan and misplaced points (``queued`` lists the operation ids)."""
        return await archive.repair_index(principal, workspace_id)

    @post("/search", responses=PROBLEM_RESPONSES, summary="Verified hybrid recall", status_code=200,
          opt={"permission": "memory.read", "activity": None})  # a read: nothing to record
    async def search(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                     workspace_id: FromPath[WorkspaceId], data: JSONBody[SearchRequest]) -> RecallResponse:
        """Hybrid search, verified against PostgreSQL: one ranking per named vector (dense and
        BM25 branches, every filter inside each) of the request's ``mode``, fused with that
        mode's profile (``shared/recall/profiles.py``) — solved: distribution-based score fusion (DBSF) of bm25 ×0.75, dense ×1, key ×1; search: distribution-based score fusion (DBSF) of bm25 ×4, dense ×4, key ×1, key_bm25 ×4 with a specificity prior (a card naming the filtered database or table scores up to ×2); rules: distribution-based score fusion (DBSF) of key ×0.5, key_bm25 ×0.5, own ×2, own_bm25 ×1 with a specificity prior (a card naming the filtered database or table scores up to ×2). A result's ``score`` is
        ``1/(60 + r)`` for a verified seed at fused rank r or, when higher, ``1/(60 + r' +
        hops/3)`` of the strongest path reaching the card along links from the seed at rank r'
        (never a sum): it orders this query's results and is not a similarity. Body ``{query, top (1..100), mode (search|rules|solved), family?, filters?,
        exclude?, session?}``; ``session``: the caller's workflow session, whose decided cards
        (``POST .../sessions/{id}/decisions``) are left out and never bridge. Errors: 400/422
        bad input, 403 (permission or binding), 503 ``index_unavailable`` / ``index_incompatible`` / ``embedder_unavailable`` /
        ``database_unavailable`` (never an empty success)."""
        return await archive.search(principal, workspace_id, data)

    @post("/import", responses=IMPORT_PROBLEM_RESPONSES,
          summary="Import a cards file (JSON Lines)", status_code=201,
          request_max_body_size=MAX_IMPORT_BYTES, opt={"activity": "import"})
    async def import_cards(self, transfer: NamedDependency[Transfer],
                           principal: NamedDependency[Principal], request: Request,
                           workspace_id: FromPath[WorkspaceId],
                           on_conflict: FromQuery[Annotated[models.OnConflict, Parameter(
                               description="a line whose key is already a card's: skip it, or "
                                           "update the card where it differs")]] = "skip",
                           mode: FromQuery[Annotated[models.ImportMode, Parameter(
                               description="import: lines may be import or manual cards (a "
                                           "line claiming a review is a 422); restore: keep "
                                           "each line's origin and source, for an export of "
                                           "this archive")]] = "import",
                           ) -> ImportResult:
        """Import a JSON Lines body (one card per line, ``key`` + card fields; links by key or
        card id), optionally ``Content-Encoding: gzip``. All or nothing, idempotent by key: a
        line whose key is already a card's key in the workspace is that card, skipped
        (``on_conflict=skip``, the default) or updated in place where it differs (``update``:
        same id, revision + 1); the others create cards that remember their keys. 201 with
        ``{created, by_family, updated, unchanged, skipped, enqueued}``. ``mode=import`` (the
        default) refuses a line claiming a review's provenance (origin ``workflow``, a source
        naming a session or decisions); ``mode=restore`` keeps them, for an export of this
        archive. Errors: 400 unreadable or another ``on_conflict`` or ``mode``, 422 invalid line
        (named; a key with surrounding whitespace, or a claimed review, too) or
        no card lines (``no cards``), 413 too large (also decompressed: at
        most 4 × the body limit), 415 another content encoding."""
        raw = _decode_body(await request.body(), request.headers.get("content-encoding", ""))
        cards, cases = decode_cards_file(raw.splitlines())
        return await transfer.import_cards(principal, workspace_id, cards, on_conflict, mode,
                                           cases=cases)

    @get("/export", responses=PROBLEM_RESPONSES, summary="Export the cards file (JSON Lines)",
         media_type=NDJSON)
    async def export_cards(
        self, transfer: NamedDependency[Transfer], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId],
        family: FromQuery[list[models.Family] | None] = None,
    ) -> Stream:
        """The workspace's cards as the cards file ``POST .../import`` reads, streamed (JSON
        Lines, ``application/x-ndjson``, chunked): one card per line under its key (its import
        key, else its id), with title, content, scope, concepts, dependencies, links by their
        targets' keys, origin and source; no ids, revisions, vectors or index state; in key order.
        ``family`` (repeatable) narrows it; links to cards of other families are kept. A stream
        cut short (PostgreSQL lost mid-way) ends without its last chunk, which HTTP clients
        report as an incomplete body. Errors (before the first byte): 400 an unknown family,
        401, 403, 404, 503 ``database_unavailable``."""
        lines = await transfer.export_cards(principal, workspace_id, family or ())
        first = await anext(lines, None)  # PostgreSQL errors become a problem, not a cut stream
        return Stream(_ndjson(first, lines), media_type=NDJSON)

    @post("/recalls/{recall_id:str}/feedback", responses=PROBLEM_RESPONSES,
          summary="Feedback on a recall's cards", status_code=200,
          opt={"permission": "memory.read", "activity": "feedback"})
    async def feedback(self, archive: NamedDependency[Archive],
                       principal: NamedDependency[Principal],
                       workspace_id: FromPath[WorkspaceId], recall_id: FromPath[RecallId],
                       data: JSONBody[FeedbackRequest]) -> FeedbackResult:
        """Judge cards a recall returned. Body ``{cards: [{card_id, verdict: helpful |
        not_helpful | wrong, note?}]}`` (1..100 cards, each once; ``note`` up to 2,000
        characters, through the privacy filter). One verdict per recall, card and principal:
        sending another replaces it. Answers the stored verdicts in the request's order, each
        with ``change`` (``created``, ``updated``, ``unchanged``). Errors: 400 malformed, 403
        without ``memory.read``, 404 ``not_found`` for a recall that is not this workspace's
        (never recorded, purged past the retention, or another workspace's: the same answer),
        422 ``invalid_input`` for a card the recall did not return or deleted since (``field``
        names it), 503 ``database_unavailable`` / ``privacy_filter_failed``."""
        return await archive.feedback.give(principal, workspace_id, recall_id, data)

    @get("/recalls", responses=PROBLEM_RESPONSES, summary="Recall records")
    async def recalls(
        self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
        workspace_id: FromPath[WorkspaceId],
        actor: FromQuery[Annotated[str | None, Parameter(max_length=300)]] = None,
        mode: FromQuery[models.Mode | None] = None,
        page: FromQuery[Annotated[int, Parameter(ge=1, le=1_000_000)]] = 1,
        per_page: FromQuery[Annotated[int, Parameter(ge=1, le=models.MAX_PER_PAGE)]] = 20,
    ) -> RecallRecordPage:
        """A page of the workspace's recall records, newest first: ``{recalls: [{recall_id,
        created_at, actor, session_id, mode, query_text, results, verdicts}], total, page,
        per_page}``; ``actor`` (``token:<id>``, ``datasette:<actor>``) and ``mode`` filter.
        Records older than ``MEMARC_RECALL_RETENTION_DAYS`` are purged."""
        return await archive.feedback.recalls(principal, workspace_id, actor=actor, mode=mode,
                                              page=page, per_page=per_page)

    @get("/recalls/{recall_id:str}", responses=PROBLEM_RESPONSES, summary="One recall record")
    async def recall_record(self, archive: NamedDependency[Archive],
                            principal: NamedDependency[Principal],
                            workspace_id: FromPath[WorkspaceId],
                            recall_id: FromPath[RecallId]) -> RecallRecordDetail:
        """A recall record: who asked what, in which session, mode and filters, the results in
        rank order (each card's family and title now, null when deleted since) with the
        verdicts on each, hits dropped by verification, stage timings (ms). 404 as for
        feedback."""
        return await archive.feedback.recall(principal, workspace_id, recall_id)

    @get("/{card_id:str}/feedback", responses=PROBLEM_RESPONSES, summary="A card's feedback")
    async def card_feedback(self, archive: NamedDependency[Archive],
                            principal: NamedDependency[Principal],
                            workspace_id: FromPath[WorkspaceId],
                            card_id: FromPath[CardId]) -> CardFeedback:
        """``{card_id, counts: {helpful, not_helpful, wrong}, recent: [{recall_id, mode,
        query_text, actor, verdict, note, via, updated_at}]}``: the verdicts on the card over
        the records' retention, and the 20 newest with their recall's question. Errors: 404."""
        return await archive.feedback.card(principal, workspace_id, card_id)

    @get("/{card_id:str}", responses=PROBLEM_RESPONSES, summary="Show a card")
    async def show(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                   workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId]) -> CardDetail:
        """The card, incoming links and open operations. 404 for a missing card and for a card
        of another workspace alike."""
        return await archive.get_card(principal, workspace_id, card_id)

    @put("/{card_id:str}", responses=PROBLEM_RESPONSES,
         summary="Update a card", opt={"activity": "update"})
    async def update(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                     workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId],
                     data: JSONBody[CardWrite], wait: FromQuery[Wait] = None) -> WriteResult:
        """Replace the card's editable fields; the body's ``revision`` is the one edited.
        Errors: 409 ``stale_revision`` (nothing changed), 404, 422."""
        return await archive.update_card(principal, workspace_id, card_id, data, wait or 0.0)

    @delete("/{card_id:str}", responses=PROBLEM_RESPONSES,
            summary="Delete a card", status_code=200, opt={"activity": "delete"})
    async def remove(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                     workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId],
                     wait: FromQuery[Wait] = None) -> DeleteResult:
        """Delete the card, its dependencies and every link into or out of it; its point is
        removed by the worker. Errors: 404."""
        return await archive.delete_card(principal, workspace_id, card_id, wait or 0.0)

    @post("/{card_id:str}/retry", responses=PROBLEM_RESPONSES,
          summary="Re-run a card's projection", status_code=202,
          opt={"activity": "retry"})
    async def retry(self, archive: NamedDependency[Archive], principal: NamedDependency[Principal],
                    workspace_id: FromPath[WorkspaceId], card_id: FromPath[CardId]) -> RetryResult:
        """Re-queue the card's open (or failed) operations against its current state; for a
        deleted card this completes the point deletion. Errors: 404."""
        return await archive.retry(principal, workspace_id, card_id)
