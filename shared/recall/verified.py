"""Verified recall (DESIGN §5): the flow of one request, from the query to the result cards.

Steps, for one request:

1. Embed the query (dense + BM25 in the workspace language) and ask the index for one ranking per
   named vector of the mode's profile (:mod:`shared.recall.profiles`), each with every filter
   inside it (:func:`~shared.recall.eligibility.build_filter`), ``seeds = min(100, max(20, 3 ×
   top))`` hits each. Fuse them as the profile says (:mod:`shared.recall.fusion`).
2. Verify every fused hit in PostgreSQL: the card exists in the workspace, matches the filters,
   is not excluded by the caller (``exclude``, and the cards decided in the caller's ``session``),
   and has a recorded projection whose revision equals the card's (and the point's) revision in
   the current format (:func:`~shared.recall.eligibility.eligible`). Dropped hits are excluded
   from a new search (at most 3 rounds) so ghosts never take live cards' places.
3. Expand along outgoing links from the verified seeds (:mod:`shared.recall.expansion`: at most
   2 hops, 20 links per card in target-id order, 200 card look-ups and 400 links in total);
   every destination and intermediate card must itself be eligible. The response's
   ``expansion`` says whether one of these budgets cut it short, and how much it read.
4. Score: the higher of a card's direct score, ``1/(60 + r)`` for the seed at rank r, and its
   strongest single linked score (:func:`~shared.recall.expansion.link_score`: ``1/(60 + r' +
   hops/3)`` for a path from the seed at rank r'), never their sum; ties by card id. A card ranked
   first is never passed by a linked card, and a linked card ranks right behind its source.
5. Rebuild every result card from PostgreSQL.

The query is embedded and the index searched before any pooled connection or lock is taken
(only the workspace's language, and the cards decided in the request's session, are read first,
in a transaction of its own: the decided cards go to the index as exclusions, so that they take
no seed's place). Each round then
verifies its candidates in one read-only transaction under the workspace lock in shared mode,
and the last round's transaction also expands the links and reads the result cards, so a
concurrent write cannot interleave with what is returned. The session's decided cards are read
again in that transaction, under the lock (DESIGN §5): they are what verification and expansion
exclude (a card decided since the first read is dropped there and searched around, uncounted in
``excluded`` like any caller exclusion). Per round that is one set-up
statement and the candidate rows (with their first outgoing links,
:func:`shared.store.verification.candidate_rows`); then the rows of each expansion hop and the
result cards.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import msgspec
import numpy as np

from shared import models
from shared.auth import Principal
from shared.errors import IndexUnavailable
from shared.index.embedding import Embedder
from shared.index.engine import (BM25, DENSE, KEY, KEY_BM25, OWN, OWN_BM25, Hit, IndexEngine,
                                 IndexFilter, IndexTarget, VectorLayout)
from shared.models import (ExpansionSummary, RecallResponse, RecallResult, Retrieval,
                           SearchRequest, card_id_str)
from shared.recall import floor as similarity_floor
from shared.recall.adapter import QueryAdapter
from shared.privacy import DEFAULT_FILTER, PrivacyFilter
from shared.recall.eligibility import CandidateRow, build_filter, eligible, specificity
from shared.recall.expansion import BUDGETS, LINKS_PER_CARD, Expansion, expand_links, rank
from shared.recall.fusion import RRF_K, FusionProfile, fuse
from shared.recall.profiles import profile_for
from shared.store import cards, evaluations, outbox, rebuilds, verification, workspaces
from shared.store import sessions as session_rows
from shared.store.database import Connection, Database

MAX_ROUNDS = 3


def seed_count(top: int) -> int:
    """Seeds requested from each branch: ``min(100, max(20, 3 × top))``."""
    return min(100, max(20, 3 * top))


@dataclass
class RecallTimings:
    """Where a recall spent its time, in seconds (a few ``perf_counter`` calls per recall): the
    query embedding, the index searches of every round (``index``), verification, link
    expansion, and scoring plus the reading of the result cards (``fetch``)."""

    embed: float = 0.0
    index: float = 0.0
    verify: float = 0.0
    expand: float = 0.0
    fetch: float = 0.0

    def stages(self) -> dict[str, float]:
        """``{stage: seconds}`` by the metrics' stage names
        (:data:`shared.metrics.RECALL_STAGES`: ``index`` is ``search``)."""
        return {"embed": self.embed, "search": self.index, "verify": self.verify,
                "expand": self.expand, "fetch": self.fetch}


async def _candidates(conn: Connection, ids: list[uuid.UUID]) -> dict[uuid.UUID, CandidateRow]:
    """Verification rows of ``ids`` (missing cards absent), with their first links: one more
    than expansion follows, so that a card with more links than that is seen."""
    rows = await verification.candidate_rows(conn, ids, LINKS_PER_CARD + 1)
    return {r["id"]: CandidateRow.from_row(r) for r in rows}


async def recall(db: Database, index: IndexEngine, embedder: Embedder, principal: Principal,
                 workspace: str, req: SearchRequest, *, profile: FusionProfile | None = None,
                 layout: VectorLayout | None = None, expand: bool = True,
                 timings: RecallTimings | None = None,
                 role: Literal["runtime", "reader"] = "runtime",
                 privacy: PrivacyFilter = DEFAULT_FILTER,
                 stand_in: Mapping[uuid.UUID, Mapping[str, str]] | None = None,
                 target: IndexTarget | None = None,
                 adapter: QueryAdapter | None = None
                 ) -> RecallResponse:
    """Verified hybrid recall for one request (see the module docstring).

    ``profile``: the branches and their fusion (default: the mode's,
    :data:`shared.recall.profiles.MODE_PROFILES`); ``layout``: the collection's expected vector
    layout (default: the embedder's for the workspace language). Benchmarks pass both to run the
    peer configurations through this same path. ``role``: the database role of the reads (the
    explorer passes ``reader``). The query text sent to the embedder and the filter values sent
    to the index go through ``privacy`` (the index holds redacted payload values, so a filter
    must be redacted the same way to match); verification compares the original values in
    PostgreSQL, and result cards are rebuilt from PostgreSQL with their original text.

    The query is embedded and the index searched holding no pooled connection and no lock; each
    round's verification, and the final round's link expansion and card reads, run in one
    read-only transaction under the workspace lock in shared mode.

    ``stand_in``: ``{card: {branch: other branch}}``: in each named branch, that card's hit is
    replaced by its hit in the other branch (same query, same scale: cosine for dense vectors,
    BM25 for sparse ones), placed by its score, or left out when the other branch did not find
    it; the other branches are searched too but not fused. It is the recall evaluation's
    leave-one-out (:mod:`shared.evaluation.cases`: a vector that contains the case's own
    question is replaced by one that does not); requests from people and applications pass none.

    The collection searched is the one PostgreSQL records as the workspace's (migration 022),
    with the dense model recorded with it (migration 025), read in one row: a recall that read
    them before a shadow switch searches the collection it read with that collection's model
    (the switch keeps it). When that collection is gone (a plain rebuild dropped it after its
    switch), the workspace's current one is checked as before (:func:`_searchable`).
    ``target``: search this collection with this model instead (the evaluation of a shadow
    rebuild's collection before its switch); requests from people and applications pass none.

    ``adapter``: a query adapter (issue 42, :mod:`shared.recall.adapter`) applied to the dense
    query vector before the index is searched (every dense branch, and the similarities, see the
    adapted query); card vectors are untouched.

    ``req.session``: the caller's workflow session; the cards decided in it (migration 012) are
    excluded like ``exclude`` and are never a bridge of link expansion. A session without
    decisions excludes nothing.

    :raises NotFound: workspace mismatch. :raises Forbidden: missing ``memory.read`` or a filter
        outside the token's binding. :raises InvalidInput: bad families, filters, exclusions or
        session id.
    :raises IndexUnavailable / IndexIncompatible / EmbedderUnavailable / DatabaseUnavailable:
        a dependency is down or mis-configured (never an empty success).
    :raises PrivacyFilterFailed: the privacy filter refused the query (nothing was sent).
    """
    principal.require(workspace, "memory.read")
    flt = build_filter(principal, req)
    profile = profile or profile_for(req.mode)
    query_text = privacy.redact(req.query)
    sent_scope = privacy.redact_optional(flt.scope)
    sent_concepts = tuple(privacy.redact(c) for c in flt.concepts)
    sent_physical = tuple(privacy.redact_optional(v) for v in flt.physical)
    t = timings or RecallTimings()
    clock = time.perf_counter
    n = seed_count(req.top)
    session = models.clean_session_id(req.session, "session") if req.session is not None else None
    decided: set[uuid.UUID] = set()
    async with db.transaction(workspace, role=role, read_only=True) as conn:
        language = (await workspaces.get(conn, workspace))["language"]
        recorded = await workspaces.index_collection(conn)
        floors = await evaluations.floors(conn, models.PROJECTION_FORMAT)
        if session is not None:
            decided = await session_rows.decided_card_ids(conn, session)
    model = target.model if target is not None else workspaces.model_of(recorded)
    t0 = clock()
    dense, sparse = await embedder.embed_query(query_text, language, model)
    if adapter is not None:
        dense = adapter.apply(np.asarray(dense, dtype=np.float32)).tolist()
    layout = layout or embedder.layout(language, model=model)
    floor = (similarity_floor.for_mode(floors, embedder.fingerprint(language, model), req.mode)
             if target is None else None)
    t.embed += clock() - t0
    t0 = clock()
    read = target.collection if target is not None else (recorded or {}).get("collection")
    serving = await index.check_collection(workspace, layout, collection=read) if read else None
    if serving is None and target is not None:
        raise IndexUnavailable(f"no collection {target.collection!r} to evaluate")
    if serving is None:
        serving = await index.check_collection(workspace, layout)
    t.index += clock() - t0
    if target is None and not (recorded is not None and serving is not None
                               and recorded["collection"] == serving):
        if not await _searchable(db, workspace, role, serving):
            async with db.transaction(workspace, role=role, read_only=True) as conn:
                waiting = await outbox.unindexed_count(conn)
            return RecallResponse(results=[], excluded=0, expansion=ExpansionSummary.none(),
                                  not_indexed=waiting)
    branches = profile.branches()
    searched = tuple(sorted(set(branches) | {b for m in (stand_in or {}).values()
                                             for b in m.values()}))
    dense_names = tuple(b for b in searched if b in layout.dense)
    sparse_names = tuple(b for b in searched if b in layout.sparse)

    dropped: set[uuid.UUID] = set()
    for round_no in range(MAX_ROUNDS):
        round_filter = IndexFilter(families=flt.families, scope=sent_scope,
                                   concepts=sent_concepts,
                                   physical=sent_physical,  # type: ignore[arg-type]
                                   exclude=tuple(sorted(set(flt.exclude) | dropped | decided,
                                                        key=str)))
        t0 = clock()
        hits = await index.hybrid_query(workspace, dense, sparse, round_filter, n,
                                        dense_names=dense_names, sparse_names=sparse_names,
                                        collection=serving)
        t.index += clock() - t0
        if stand_in:
            hits = _stood_in(hits, stand_in, branches)
        fused = fuse({name: [(h.id, h.score) for h in branch] for name, branch in hits.items()},
                     profile)
        point = {h.id: h for branch in hits.values() for h in branch}
        ranks = {name: {h.id: i for i, h in enumerate(branch, start=1)}
                 for name, branch in hits.items()}
        more_available = any(len(branch) >= n for branch in hits.values())
        async with db.transaction(workspace, role=role, lock="shared", read_only=True) as conn:
            t0 = clock()
            # every round reads its candidates afresh: eligibility is what this transaction sees
            if session is not None:
                # the session's decided cards as this transaction sees them, under the lock
                decided = await session_rows.decided_card_ids(conn, session)
            round_flt = _excluding(flt, decided)
            found = await _candidates(conn, [cid for cid, _ in fused])
            rows = {cid: found.get(cid) for cid, _ in fused}
            seeds: list[uuid.UUID] = []
            new_drops = 0
            for cid, _score in fused:
                row = rows.get(cid)
                hit = point[cid]
                if cid in decided:  # decided since the first read: a caller exclusion
                    new_drops += 1
                    continue
                ok = (eligible(row, round_flt) and row is not None
                      and hit.revision == row.revision and hit.format == models.PROJECTION_FORMAT)
                if not ok:
                    if cid not in dropped:
                        dropped.add(cid)
                        new_drops += 1
                    continue
                seeds.append(cid)
            if profile.specificity and any(v is not None for v in flt.physical):
                seeds = _by_specificity(seeds, dict(fused), rows, flt.physical,
                                        profile.specificity)
            seeds = seeds[:n]
            t.verify += clock() - t0
            last = (new_drops == 0 or len(seeds) >= n or not more_available
                    or round_no == MAX_ROUNDS - 1)
            if not last:
                continue  # search again, outside the lock, without the dropped hits
            results, expansion = await _rank_and_read(conn, seeds, rows, round_flt, ranks,
                                                      req.top, expand, t)
            summary = ExpansionSummary(
                truncated=expansion.truncated, lookups=expansion.lookups,
                links_inspected=expansion.links_inspected,
                budgets=[b for b in BUDGETS if b in expansion.budgets_hit])
            not_indexed = await outbox.unindexed_count(conn)
        break
    else:  # pragma: no cover
        raise AssertionError("unreachable: the last round returns")
    # similarities, outside the lock: the fused dense branches' scores, and one look-up by id
    # for the results (and the seeds they were reached from) that no dense branch ranked
    fused_dense = tuple(b for b in branches if b in layout.dense)
    known: dict[uuid.UUID, float] = {}
    for name in fused_dense:
        for h in hits.get(name, []):
            known[h.id] = max(known.get(h.id, -2.0), h.score)
    wanted = {models.parse_card_id(cid) for r in results for cid in r.retrieval.path} - {None}
    missing = sorted((c for c in wanted if c is not None and c not in known), key=str)
    if missing and fused_dense:
        t0 = clock()
        looked_up = await index.dense_scores(workspace, dense, missing, fused_dense,
                                             collection=serving)
        t.index += clock() - t0
        for name, scores in looked_up.items():
            for cid, score in scores.items():
                if name not in (stand_in or {}).get(cid, {}):  # a left-out vector stays out
                    known[cid] = max(known.get(cid, -2.0), score)
    results = _with_similarity(results, known, floor, req.min_score)
    return RecallResponse(results=results, excluded=len(dropped), expansion=summary,
                          not_indexed=not_indexed, floor=floor)


def _with_similarity(results: list[RecallResult], known: Mapping[uuid.UUID, float],
                     floor: float | None,
                     min_score: float | Literal["floor"] | None) -> list[RecallResult]:
    """``results`` with their ``similarity`` (the card's own, or that of the card its path
    starts from when higher) and ``below_floor``; without those under ``min_score``
    (``"floor"``: under ``floor``, when there is one)."""
    limit = floor if min_score == "floor" else min_score
    out = []
    for r in results:
        ids = [models.parse_card_id(r.card.id)]
        if r.retrieval.path:
            ids.append(models.parse_card_id(r.retrieval.path[0]))
        values = [known[c] for c in ids if c is not None and c in known]
        sim = round(max(values), 4) if values else None
        if sim is not None and limit is not None and sim < limit:
            continue
        out.append(msgspec.structs.replace(
            r, similarity=sim, below_floor=floor is not None and sim is not None and sim < floor))
    return out


async def _searchable(db: Database, workspace: str, role: Literal["runtime", "reader"],
                      found: str | None) -> bool:
    """Whether recall may search ``found``, the engine's collection, when it is not the one
    read as recorded before the search (migration 022, :mod:`shared.projection.recovery`).
    Read again: a rebuild may have switched in between (the collection its running switch
    writes is searchable too). False: the workspace has no collection and no card is projected
    (an empty result is the truth).

    :raises IndexUnavailable: the recorded collection is missing or replaced, or is being
        rebuilt, or cards are recorded as projected and there is no collection: a search now
        would miss cards, so recall answers 503 until the worker has rebuilt it.
    """
    async with db.transaction(workspace, role=role, read_only=True) as conn:
        recorded = await workspaces.index_collection(conn)
        latest = await rebuilds.latest(conn)
        counts = await outbox.projection_counts(conn) if recorded is None else None
    if recorded is None:  # a workspace never projected, or one made before migration 022
        if found is not None:
            return True
        if counts["current"]:
            raise IndexUnavailable(
                f"the index has no collection for workspace {workspace!r} although "
                f"{counts['current']} cards are recorded as projected; the worker rebuilds it")
        return False
    switching = (latest is not None and latest["status"] == "running"
                 and latest["collection"] is not None and latest["collection"] == found)
    if found is not None and (recorded["collection"] == found or switching):
        return True
    if recorded["collection"] is None:
        raise IndexUnavailable(f"the index collection of workspace {workspace!r} was lost and "
                               "is being rebuilt from PostgreSQL; recall answers once every "
                               "card is back")
    raise IndexUnavailable(
        f"the index collection {recorded['collection']!r} of workspace {workspace!r} is "
        + ("missing" if found is None else f"replaced by {found!r}")
        + "; the worker rebuilds it from PostgreSQL, recall answers once every card is back")


def _stood_in(hits: dict[str, list[Hit]], stand_in: Mapping[uuid.UUID, Mapping[str, str]],
              branches: tuple[str, ...]) -> dict[str, list[Hit]]:
    """The fused ``branches``' rankings with each ``stand_in`` card's hit replaced by its hit
    in the named other branch, re-sorted by score (stable, so ties keep the engine's order);
    the other branches, if not fused, are dropped."""
    out: dict[str, list[Hit]] = {}
    for name in branches:
        ranking = [h for h in hits.get(name, []) if name not in stand_in.get(h.id, {})]
        for cid, swaps in stand_in.items():
            other = swaps.get(name)
            if other is None:
                continue
            found = next((h for h in hits.get(other, []) if h.id == cid), None)
            if found is not None:
                ranking.append(found)
        ranking.sort(key=lambda h: -h.score)
        out[name] = ranking
    return out


def _by_specificity(seeds: list[uuid.UUID], fused: Mapping[uuid.UUID, float],
                    rows: Mapping[uuid.UUID, CandidateRow | None],
                    physical: tuple[str | None, ...], weight: float) -> list[uuid.UUID]:
    """The verified seeds re-ordered by the specificity prior (issue 42,
    :attr:`~shared.recall.fusion.FusionProfile.specificity`): each positive fused score times
    ``1 + weight × specificity`` (:func:`~shared.recall.eligibility.specificity`), a stable sort,
    so cards of equal standing keep their fused order."""
    def adjusted(cid: uuid.UUID) -> float:
        score, row = fused[cid], rows.get(cid)
        if score <= 0 or row is None:
            return score
        return score * (1.0 + weight * specificity(row, physical))
    return sorted(seeds, key=lambda cid: -adjusted(cid))


def _excluding(flt: IndexFilter, decided: set[uuid.UUID]) -> IndexFilter:
    """``flt`` with the session's decided cards among its exclusions: what verification and
    link expansion check (:func:`~shared.recall.eligibility.eligible`), so that a decided card is
    neither a result nor a bridge."""
    if not decided:
        return flt
    extra = tuple(sorted(decided - set(flt.exclude), key=str))
    return msgspec.structs.replace(flt, exclude=flt.exclude + extra)


async def _rank_and_read(conn: Connection, seeds: list[uuid.UUID],
                         rows: dict[uuid.UUID, CandidateRow | None], flt: IndexFilter,
                         ranks: dict[str, dict[uuid.UUID, int]], top: int, expand: bool,
                         t: RecallTimings) -> tuple[list[RecallResult], Expansion]:
    """Steps 3-5 on the verified seeds, inside the final round's transaction: link expansion,
    scores, and the result cards rebuilt from PostgreSQL with their retrieval explanation; and
    the expansion (its budgets used and hit)."""
    clock = time.perf_counter
    seed_scores = [(cid, 1.0 / (RRF_K + r)) for r, cid in enumerate(seeds, start=1)]
    expansion = Expansion()
    if expand and seeds:
        t0 = clock()

        async def read_links(ids: list[uuid.UUID]) -> dict[uuid.UUID, list[uuid.UUID]]:
            # every source was read as a candidate row (seeds, then eligible targets), and
            # each row carries its first LINKS_PER_CARD + 1 targets: no query needed
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
    ranked, by_link = rank(seed_scores, expansion, top)
    result_cards = await cards.get_many(conn, [cid for cid, _ in ranked])
    seed_rank = {cid: r for r, cid in enumerate(seeds, start=1)}
    results: list[RecallResult] = []
    for cid, score in ranked:
        card = result_cards.get(cid)
        if card is None:  # cannot happen under the shared lock; never invent content
            continue
        if cid in by_link:
            path = [card_id_str(p) for p in expansion.path[cid]]
        else:
            path = [card_id_str(cid)]
        is_seed = cid in seed_rank
        branch = {name: r.get(cid) if is_seed else None for name, r in ranks.items()}
        results.append(RecallResult(card=card, score=score, retrieval=Retrieval(
            path=path, seed_rank=seed_rank.get(cid), dense_rank=branch.get(DENSE),
            bm25_rank=branch.get(BM25), key_rank=branch.get(KEY),
            key_bm25_rank=branch.get(KEY_BM25), own_rank=branch.get(OWN),
            own_bm25_rank=branch.get(OWN_BM25))))
    t.fetch += clock() - t0
    return results, expansion
