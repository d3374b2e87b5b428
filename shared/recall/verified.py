"""Verified recall (DESIGN §5): hybrid search, verification in PostgreSQL, link expansion, ranking.

Steps, for one request:

1. Embed the query (dense + BM25 in the workspace language) and ask the index for two rankings,
   each with every filter inside it, ``seeds = min(100, max(20, 3 × top))`` hits each.
   Fuse them by reciprocal rank fusion, ``Σ w_b / (k + rank_b)`` with ``k = 60`` set here
   (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and individual rank
   learning methods", SIGIR 2009), not by the engine's default constant.
2. Verify every fused hit in PostgreSQL: the card exists in the workspace, matches the filters,
   is not excluded by the caller, and has a recorded projection whose revision equals the card's
   (and the point's) revision in the current format. Dropped hits are excluded from a new search
   (at most 3 rounds) so ghosts never take live cards' places.
3. Expand along outgoing links from the verified seeds (at most 2 hops, 20 links per card in
   target-id order, 200 card look-ups and 400 links in total); every destination and intermediate
   card must itself be eligible.
4. Score: ``1/(60 + r)`` for the seed at rank r plus the strongest single linked contribution
   ``seed score × 0.5^hops``; ties by card id.
5. Rebuild every result card from PostgreSQL.

All PostgreSQL reads happen in one read-only transaction under the workspace lock in shared mode
(the query is embedded inside it), so a concurrent write cannot interleave. Per recall that is one
set-up statement, the workspace row, the candidate rows of each round (with their first outgoing
links), the rows of each expansion hop, and the result cards.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.auth import Principal
from shared.errors import Forbidden, IndexUnavailable, InvalidInput
from shared.index.embedding import Embedder
from shared.index.engine import Hit, IndexEngine, IndexFilter
from shared.models import (MODE_FAMILIES, Filters, RecallResponse, RecallResult, Retrieval,
                           SearchRequest, card_id_str, parse_card_id, reject_nul)
from shared.privacy import DEFAULT_FILTER, PrivacyFilter
from shared.store import repository
from shared.store.database import Database, Q

RRF_K = 60
MAX_ROUNDS = 3
MAX_HOPS = 2
LINKS_PER_CARD = 20
MAX_LOOKUPS = 200
MAX_LINKS = 400
HOP_DECAY = 0.5


def seed_count(top: int) -> int:
    """Seeds requested from each branch: ``min(100, max(20, 3 × top))``."""
    return min(100, max(20, 3 * top))


def rrf_fuse(rankings: list[list[uuid.UUID]], weights: list[float] | None = None,
             k: int = RRF_K) -> list[tuple[uuid.UUID, float]]:
    """Reciprocal rank fusion of best-first rankings: ``score(d) = Σ_b w_b / (k + rank_b(d))``
    with 1-based ranks (Cormack et al., SIGIR 2009). A branch of weight 0 is left out entirely
    (single-branch baselines). Ties break by id. Returns (id, score) best first."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[uuid.UUID, float] = {}
    for ranking, w in zip(rankings, weights):
        if w == 0:  # a branch switched off contributes no candidates at all
            continue
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], str(item[0])))


@dataclass(frozen=True)
class CandidateRow:
    """What verification needs of a card, read from PostgreSQL."""

    id: uuid.UUID
    family: str
    scope: str | None
    concepts: tuple[str, ...]
    revision: int
    projected_revision: int | None
    projected_format: int | None
    dependencies: tuple[tuple[str | None, ...], ...]
    #: the first ``LINKS_PER_CARD`` outgoing link targets in target-id order (DESIGN §5.3), read
    #: with the row so that expansion needs no separate link query for a card already read
    links: tuple[uuid.UUID, ...] = ()

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "CandidateRow":
        return cls(row["id"], row["family"], row["scope"], tuple(row["concepts"]), row["revision"],
                   row["projected_revision"], row["projected_format"],
                   tuple(tuple(d) for d in row["dependencies"]), tuple(row.get("links") or ()))

    def is_current(self) -> bool:
        """A valid projection of this revision in the current format is recorded."""
        return (self.projected_revision == self.revision
                and self.projected_format == repository.PROJECTION_FORMAT)


def dependency_matches(physical: tuple[str | None, ...], dep: tuple[str | None, ...]) -> bool:
    """One dependency entry satisfies a physical context: every requested level is equal, or the
    entry stops above it (None)."""
    return all(want is None or have is None or have == want for want, have in zip(physical, dep))


def matches_filters(row: CandidateRow, flt: IndexFilter) -> bool:
    """The PostgreSQL-side twin of the index filter (DESIGN §5): family, exact scope, all
    concepts, physical context by a single dependency entry (no dependencies = workspace-wide),
    and the caller's exclusions."""
    if flt.families and row.family not in flt.families:
        return False
    if flt.scope is not None and row.scope != flt.scope:
        return False
    if any(c not in row.concepts for c in flt.concepts):
        return False
    if any(v is not None for v in flt.physical) and row.dependencies:
        if not any(dependency_matches(flt.physical, dep) for dep in row.dependencies):
            return False
    return row.id not in flt.exclude


def eligible(row: CandidateRow | None, flt: IndexFilter) -> bool:
    """Existing, current, inside the filters and mode, not excluded."""
    return row is not None and row.is_current() and matches_filters(row, flt)


@dataclass
class Expansion:
    """Result of link expansion: best linked contribution and path per reached card, and the
    budgets actually used."""

    contribution: dict[uuid.UUID, float] = field(default_factory=dict)
    path: dict[uuid.UUID, tuple[uuid.UUID, ...]] = field(default_factory=dict)
    links_inspected: int = 0
    lookups: int = 0


LinkReader = Callable[[list[uuid.UUID]], Awaitable[dict[uuid.UUID, list[uuid.UUID]]]]
RowReader = Callable[[list[uuid.UUID]], Awaitable[dict[uuid.UUID, CandidateRow]]]


async def expand_links(seeds: list[tuple[uuid.UUID, float]], known: dict[uuid.UUID, CandidateRow],
                       flt: IndexFilter, read_links: LinkReader, read_rows: RowReader, *,
                       max_hops: int = MAX_HOPS, links_per_card: int = LINKS_PER_CARD,
                       max_lookups: int = MAX_LOOKUPS, max_links: int = MAX_LINKS,
                       decay: float = HOP_DECAY) -> Expansion:
    """Expand from verified seeds along outgoing links (DESIGN §5 step 3).

    :param seeds: verified seeds as ``(id, direct score)`` in seed-rank order.
    :param known: rows already read (the seeds' own verification rows); not counted as look-ups.
    :param read_links: returns, per source, its outgoing targets in target-id order (at least
        ``links_per_card`` of them when it has that many).
    :param read_rows: returns verification rows for ids (missing cards absent).

    Links are read per source card in a stable order (seeds by rank, then hop-1 cards by their
    best contribution and id); every link read counts toward ``max_links`` whether or not its
    target is eligible; every card fetched that was not already known counts toward
    ``max_lookups``. A card is reached only along simple paths whose every card is eligible. A
    card's contribution is the strongest single path's ``seed score × decay^hops``; equal
    contributions keep the lexicographically smallest path (by id text).
    """
    out = Expansion()
    rows: dict[uuid.UUID, CandidateRow | None] = dict(known)
    # paths at the current hop: (path, contribution), in processing order
    frontier: list[tuple[tuple[uuid.UUID, ...], float]] = [((sid, ), score) for sid, score in seeds]
    for hop in range(1, max_hops + 1):
        sources: list[uuid.UUID] = []
        for path, _ in frontier:
            if path[-1] not in sources:
                sources.append(path[-1])
        if not sources or out.links_inspected >= max_links:
            break
        links = await read_links(sources)
        # inspect links source by source, within the link budget
        inspected: dict[uuid.UUID, list[uuid.UUID]] = {}
        for src in sources:
            targets = links.get(src, [])[:links_per_card]
            room = max_links - out.links_inspected
            if room <= 0:
                break
            take = targets[:room]
            out.links_inspected += len(take)
            inspected[src] = take
        # look up unknown targets in order, within the look-up budget
        wanted: list[uuid.UUID] = []
        for src in inspected:
            for t in inspected[src]:
                if t not in rows and t not in wanted:
                    wanted.append(t)
        room = max(0, max_lookups - out.lookups)
        fetch, skipped = wanted[:room], set(wanted[room:])
        if fetch:
            found = await read_rows(fetch)
            out.lookups += len(fetch)
            for t in fetch:
                rows[t] = found.get(t)
        next_frontier: dict[tuple[uuid.UUID, ...], float] = {}
        for path, score in frontier:
            src = path[-1]
            for t in inspected.get(src, []):
                if t in path or t in skipped or not eligible(rows.get(t), flt):
                    continue
                new_path = path + (t,)
                contribution = score * decay  # score already carries decay^(hop-1)
                next_frontier[new_path] = contribution
                best = out.contribution.get(t)
                if (best is None or contribution > best
                        or (contribution == best and _path_key(new_path) < _path_key(out.path[t]))):
                    out.contribution[t] = contribution
                    out.path[t] = new_path
        frontier = sorted(next_frontier.items(), key=lambda item: (-item[1], _path_key(item[0])))
    return out


def _path_key(path: Iterable[uuid.UUID]) -> tuple[str, ...]:
    return tuple(str(p) for p in path)


@dataclass
class RecallTimings:
    """Where a recall spent its time, in seconds."""

    embed: float = 0.0
    index: float = 0.0
    verify: float = 0.0
    expand: float = 0.0
    fetch: float = 0.0


def build_filter(principal: Principal, req: SearchRequest) -> IndexFilter:
    """The effective filter of a request: mode families (narrowed by ``family``), filters, the
    principal's database/schema binding, and exclusions.

    :raises InvalidInput: a family outside the mode, an exclusion that is not a card id, a
        physical filter with a gap. :raises Forbidden: a filter outside the token's binding.
    """
    if not req.query.strip():
        raise InvalidInput("query must not be blank", field="query")
    reject_nul(req.query, "query")
    allowed = MODE_FAMILIES[req.mode]
    families = allowed
    if req.family:
        outside = [f for f in req.family if f not in allowed]
        if outside:
            raise InvalidInput(f"mode {req.mode!r} does not return {', '.join(outside)} "
                               f"(allowed: {', '.join(allowed)})", field="family")
        families = tuple(f for f in allowed if f in req.family)
    flt = req.filters or Filters()
    database, schema = flt.database, flt.schema
    if principal.database is not None:
        if database is not None and database != principal.database:
            raise Forbidden(f"this token is bound to database {principal.database!r}")
        database = principal.database
        if principal.schema is not None:
            if schema is not None and schema != principal.schema:
                raise Forbidden(f"this token is bound to schema {principal.schema!r}")
            schema = principal.schema
    physical = (database, schema, flt.table, flt.column)
    if flt.column is not None and flt.table is None:
        raise InvalidInput("filters.column needs filters.table", field="filters.column")
    if any(v is not None for v in physical[1:]) and database is None:
        raise InvalidInput("a schema, table or column filter needs filters.database",
                           field="filters.database")
    exclude: list[uuid.UUID] = []
    for i, ref in enumerate(req.exclude):
        cid = parse_card_id(ref)
        if cid is None:
            raise InvalidInput(f"exclude[{i}] {ref!r} is not a card id", field=f"exclude[{i}]")
        exclude.append(cid)
    concepts = tuple(dict.fromkeys(c.strip() for c in flt.concepts if c.strip()))
    return IndexFilter(families=families, scope=flt.scope, concepts=concepts, physical=physical,
                       exclude=tuple(exclude))


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
        ws = await repository.workspace(conn, workspace)
        t0 = clock()
        dense, sparse = await embedder.embed_query(query_text, ws["language"])
        t.embed += clock() - t0
        dimension = embedder.dense_dimension()
        t0 = clock()
        exists = await index.check_collection(workspace, embedder.dense_model_id, dimension)
        t.index += clock() - t0
        if not exists:
            counts = await repository.projection_counts(conn)
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
                cur = await conn.execute(Q.recall_candidates,
                                         {"ids": unknown, "per_card": LINKS_PER_CARD})
                found = {r["id"]: CandidateRow.from_row(r) for r in await cur.fetchall()}
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
                      and hit.format == repository.PROJECTION_FORMAT)
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
                cur = await conn.execute(Q.recall_candidates,
                                         {"ids": ids, "per_card": LINKS_PER_CARD})
                found = {r["id"]: CandidateRow.from_row(r) for r in await cur.fetchall()}
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
        cards = await repository.get_cards(conn, [cid for cid, _ in ranked])
        seed_rank = {cid: r for r, cid in enumerate(seeds, start=1)}
        results: list[RecallResult] = []
        for cid, score in ranked:
            card = cards.get(cid)
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
