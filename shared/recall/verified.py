"""Verified recall (DESIGN §5): the flow of one request, from the query to the result cards.

Steps, for one request:

1. Embed the query (dense + BM25 in the workspace language) and ask the index for two rankings,
   each with every filter inside it (:func:`~shared.recall.eligibility.build_filter`),
   ``seeds = min(100, max(20, 3 × top))`` hits each. Fuse them by reciprocal rank fusion with
   ``k = 60`` (:mod:`shared.recall.fusion`).
2. Verify every fused hit in PostgreSQL: the card exists in the workspace, matches the filters,
   is not excluded by the caller, and has a recorded projection whose revision equals the card's
   (and the point's) revision in the current format (:func:`~shared.recall.eligibility.eligible`).
   Dropped hits are excluded from a new search (at most 3 rounds) so ghosts never take live
   cards' places.
3. Expand along outgoing links from the verified seeds (:mod:`shared.recall.expansion`: at most
   2 hops, 20 links per card in target-id order, 200 card look-ups and 400 links in total);
   every destination and intermediate card must itself be eligible.
4. Score: ``1/(60 + r)`` for the seed at rank r plus the strongest single linked contribution
   ``seed score × 0.5^hops``; ties by card id.
5. Rebuild every result card from PostgreSQL.

All PostgreSQL reads happen in one read-only transaction under the workspace lock in shared mode
(the query is embedded inside it), so a concurrent write cannot interleave. Per recall that is one
set-up statement, the workspace row, the candidate rows of each round (with their first outgoing
links, :func:`shared.store.verification.candidate_rows`), the rows of each expansion hop, and the
result cards.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Literal

from psycopg import AsyncConnection

from shared import models
from shared.auth import Principal
from shared.errors import IndexUnavailable
from shared.index.embedding import Embedder
from shared.index.engine import Hit, IndexEngine, IndexFilter
from shared.models import RecallResponse, RecallResult, Retrieval, SearchRequest, card_id_str
from shared.privacy import DEFAULT_FILTER, PrivacyFilter
from shared.recall.eligibility import CandidateRow, build_filter, eligible
from shared.recall.expansion import LINKS_PER_CARD, Expansion, expand_links
from shared.recall.fusion import RRF_K, rrf_fuse
from shared.store import cards, outbox, verification, workspaces
from shared.store.database import Database

MAX_ROUNDS = 3


def seed_count(top: int) -> int:
    """Seeds requested from each branch: ``min(100, max(20, 3 × top))``."""
    return min(100, max(20, 3 * top))


@dataclass
class RecallTimings:
    """Where a recall spent its time, in seconds."""

    embed: float = 0.0
    index: float = 0.0
    verify: float = 0.0
    expand: float = 0.0
    fetch: float = 0.0


async def _candidates(conn: AsyncConnection, ids: list[uuid.UUID]) -> dict[uuid.UUID, CandidateRow]:
    """Verification rows of ``ids`` (missing cards absent), with their first links."""
    rows = await verification.candidate_rows(conn, ids, LINKS_PER_CARD)
    return {r["id"]: CandidateRow.from_row(r) for r in rows}


async def recall(db: Database, index: IndexEngine, embedder: Embedder, principal: Principal,
                 workspace: str, req: SearchRequest, *, branch_weights: tuple[float, float] = (1.0, 1.0),
                 expand: bool = True, timings: RecallTimings | None = None,
                 role: Literal["runtime", "reader"] = "runtime",
                 privacy: PrivacyFilter = DEFAULT_FILTER) -> RecallResponse:
    """Verified hybrid recall for one request (see the module docstring).

    ``role``: the database role of the reads (the explorer passes ``reader``). The query text
    sent to the embedder and the filter values sent to the index go through ``privacy`` (the
    index holds redacted payload values, so a filter must be redacted the same way to match);
    verification compares the original values in PostgreSQL, and result cards are rebuilt from
    PostgreSQL with their original text.

    :raises NotFound: workspace mismatch. :raises Forbidden: missing ``memory.read`` or a filter
        outside the token's binding. :raises InvalidInput: bad families, filters or exclusions.
    :raises IndexUnavailable / IndexIncompatible / EmbedderUnavailable / DatabaseUnavailable:
        a dependency is down or mis-configured (never an empty success).
    :raises PrivacyFilterFailed: the privacy filter refused the query (nothing was sent).
    """
    principal.require(workspace, "memory.read")
    flt = build_filter(principal, req)
    query_text = privacy.redact(req.query)
    sent_scope = privacy.redact_optional(flt.scope)
    sent_concepts = tuple(privacy.redact(c) for c in flt.concepts)
    sent_physical = tuple(privacy.redact_optional(v) for v in flt.physical)
    t = timings or RecallTimings()
    clock = time.perf_counter
    n = seed_count(req.top)
    # One read-only transaction under the shared workspace lock for everything, the query's
    # embedding included (it needs the workspace language; a second transaction would cost more
    # round trips than the embedding holds the connection).
    async with db.transaction(workspace, role=role, lock="shared", read_only=True) as conn:
        ws = await workspaces.get(conn, workspace)
        t0 = clock()
        dense, sparse = await embedder.embed_query(query_text, ws["language"])
        t.embed += clock() - t0
        dimension = embedder.dense_dimension()
        t0 = clock()
        exists = await index.check_collection(workspace, embedder.dense_model_id, dimension)
        t.index += clock() - t0
        if not exists:
            counts = await outbox.projection_counts(conn)
            if counts["current"]:
                raise IndexUnavailable(
                    f"the index has no collection for workspace {workspace!r} although "
                    f"{counts['current']} cards are recorded as projected: run `memarc index`")
            return RecallResponse(results=[], excluded=0)

        rows: dict[uuid.UUID, CandidateRow | None] = {}
        dropped: set[uuid.UUID] = set()
        seeds: list[uuid.UUID] = []
        branch_rank: dict[uuid.UUID, tuple[int | None, int | None]] = {}
        for _round in range(MAX_ROUNDS):
            round_filter = IndexFilter(families=flt.families, scope=sent_scope,
                                       concepts=sent_concepts,
                                       physical=sent_physical,  # type: ignore[arg-type]
                                       exclude=tuple(sorted(set(flt.exclude) | dropped, key=str)))
            t0 = clock()
            dense_hits, bm25_hits = await index.hybrid_query(workspace, dense, sparse, round_filter, n)
            t.index += clock() - t0
            t0 = clock()
            hit_revision: dict[uuid.UUID, Hit] = {h.id: h for h in dense_hits + bm25_hits}
            fused = rrf_fuse([[h.id for h in dense_hits], [h.id for h in bm25_hits]],
                             list(branch_weights))
            unknown = [cid for cid, _ in fused if cid not in rows]
            if unknown:
                found = await _candidates(conn, unknown)
                for cid in unknown:
                    rows[cid] = found.get(cid)
            dense_rank = {h.id: i for i, h in enumerate(dense_hits, start=1)}
            bm25_rank = {h.id: i for i, h in enumerate(bm25_hits, start=1)}
            seeds = []
            new_drops = 0
            for cid, _score in fused:
                row = rows.get(cid)
                hit = hit_revision[cid]
                ok = (eligible(row, flt) and row is not None and hit.revision == row.revision
                      and hit.format == models.PROJECTION_FORMAT)
                if not ok:
                    if cid not in dropped:
                        dropped.add(cid)
                        new_drops += 1
                    continue
                if len(seeds) < n:
                    seeds.append(cid)
                    branch_rank[cid] = (dense_rank.get(cid), bm25_rank.get(cid))
            t.verify += clock() - t0
            more_available = len(dense_hits) >= n or len(bm25_hits) >= n
            if new_drops == 0 or len(seeds) >= n or not more_available:
                break

        seed_scores = [(cid, 1.0 / (RRF_K + r)) for r, cid in enumerate(seeds, start=1)]
        expansion = Expansion()
        if expand and seeds:
            t0 = clock()

            async def read_links(ids: list[uuid.UUID]) -> dict[uuid.UUID, list[uuid.UUID]]:
                # every source was read as a candidate row (seeds, then eligible targets), and
                # each row carries its first LINKS_PER_CARD targets: no query needed
                out: dict[uuid.UUID, list[uuid.UUID]] = {}
                for cid in ids:
                    row = rows.get(cid)
                    if row is not None and row.links:
                        out[cid] = list(row.links)
                return out

            async def read_rows(ids: list[uuid.UUID]) -> dict[uuid.UUID, CandidateRow]:
                found = await _candidates(conn, ids)
                rows.update(found)
                return found

            known = {cid: rows[cid] for cid in seeds if rows.get(cid) is not None}
            expansion = await expand_links(seed_scores, known, flt, read_links, read_rows)  # type: ignore[arg-type]
            t.expand += clock() - t0

        t0 = clock()
        scored: dict[uuid.UUID, float] = {cid: s for cid, s in seed_scores}
        for cid, contribution in expansion.contribution.items():
            scored[cid] = scored.get(cid, 0.0) + contribution
        ranked = sorted(scored.items(), key=lambda item: (-item[1], card_id_str(item[0])))[: req.top]
        result_cards = await cards.get_many(conn, [cid for cid, _ in ranked])
        seed_rank = {cid: r for r, cid in enumerate(seeds, start=1)}
        results: list[RecallResult] = []
        for cid, score in ranked:
            card = result_cards.get(cid)
            if card is None:  # cannot happen under the shared lock; never invent content
                continue
            if cid in expansion.path:
                path = [card_id_str(p) for p in expansion.path[cid]]
            else:
                path = [card_id_str(cid)]
            d_rank, b_rank = branch_rank.get(cid, (None, None))
            results.append(RecallResult(card=card, score=score, retrieval=Retrieval(
                path=path, seed_rank=seed_rank.get(cid), dense_rank=d_rank, bm25_rank=b_rank)))
        t.fetch += clock() - t0
    return RecallResponse(results=results, excluded=len(dropped))
