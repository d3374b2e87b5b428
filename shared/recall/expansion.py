"""Link expansion from verified seeds along outgoing links (DESIGN §5 step 3).

At most ``MAX_HOPS`` hops, ``LINKS_PER_CARD`` links per card in target-id order, ``MAX_LOOKUPS``
card look-ups and ``MAX_LINKS`` links in total; every destination and intermediate card must
itself be eligible. A reached card's contribution is its strongest single path's
:func:`link_score`: the origin seed's place moved down by a third of a rank per hop (DESIGN §5.4 as
revised, ``docs/design.md``). Pure: the links and rows are read through the callables given.
The result says which budgets cut the expansion short (:data:`BUDGETS`), so that a recall can say
so (DESIGN §5 bounds it; issue 16); the hop limit is the expansion's depth, not a budget.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from shared.index.engine import IndexFilter
from shared.models import ExpansionBudget, card_id_str
from shared.recall.eligibility import CandidateRow, eligible

MAX_HOPS = 2
LINKS_PER_CARD = 20
MAX_LOOKUPS = 200
MAX_LINKS = 400
#: how far one hop moves a linked card below its origin seed, in seed ranks: ``1 / (MAX_HOPS +
#: 1)``, so that a card ``MAX_HOPS`` hops away still ranks above the next seed
HOP_STEP = 1.0 / (MAX_HOPS + 1)


def link_score(seed_score: float, hops: int) -> float:
    """The ranking score a card reached in ``hops`` (1..``MAX_HOPS``) links from a seed of score
    ``seed_score`` gets from that path: ``1 / (1/s + hops × HOP_STEP)``. For a seed at rank r
    (``s = 1/(60 + r)``) that is ``1/(60 + r + hops/3)``: the card ranks right behind its origin
    seed (and behind the cards of fewer hops from it), above the seed at rank r + 1. It replaces
    the seed's ``s × 0.5^hops`` added to a card's direct score, which let a weak direct hit that a
    good seed links to outrank the best direct hit (issue 42).

    :param seed_score: a seed's direct score, > 0. :returns: a score in ``(0, seed_score)``.
    """
    return 1.0 / (1.0 / seed_score + hops * HOP_STEP)

#: The budgets an expansion can hit: a card had more than ``links_per_card`` outgoing links
#: (only the first are followed), the ``max_links`` links in total were inspected with links
#: left unread, or the ``max_lookups`` card look-ups were spent with cards left unread.
LINKS_PER_CARD_BUDGET: ExpansionBudget = "links_per_card"
LINKS_BUDGET: ExpansionBudget = "links"
LOOKUPS_BUDGET: ExpansionBudget = "lookups"
BUDGETS: tuple[ExpansionBudget, ...] = (LINKS_PER_CARD_BUDGET, LINKS_BUDGET, LOOKUPS_BUDGET)


@dataclass
class Expansion:
    """Result of link expansion: best linked contribution and path per reached card, the
    budgets actually used, and the budgets that cut it short (``budgets_hit``, of
    :data:`BUDGETS`)."""

    contribution: dict[uuid.UUID, float] = field(default_factory=dict)
    path: dict[uuid.UUID, tuple[uuid.UUID, ...]] = field(default_factory=dict)
    links_inspected: int = 0
    lookups: int = 0
    budgets_hit: set[ExpansionBudget] = field(default_factory=set)

    @property
    def truncated(self) -> bool:
        """A budget left links or cards unread that the expansion would otherwise have
        followed."""
        return bool(self.budgets_hit)


LinkReader = Callable[[list[uuid.UUID]], Awaitable[dict[uuid.UUID, list[uuid.UUID]]]]
RowReader = Callable[[list[uuid.UUID]], Awaitable[dict[uuid.UUID, CandidateRow]]]


async def expand_links(seeds: list[tuple[uuid.UUID, float]], known: dict[uuid.UUID, CandidateRow],
                       flt: IndexFilter, read_links: LinkReader, read_rows: RowReader, *,
                       max_hops: int = MAX_HOPS, links_per_card: int = LINKS_PER_CARD,
                       max_lookups: int = MAX_LOOKUPS, max_links: int = MAX_LINKS
                       ) -> Expansion:
    """Expand from verified seeds along outgoing links (DESIGN §5 step 3).

    :param seeds: verified seeds as ``(id, direct score)`` in seed-rank order.
    :param known: rows already read (the seeds' own verification rows); not counted as look-ups.
    :param read_links: returns, per source, its outgoing targets in target-id order (at least
        ``links_per_card + 1`` of them when it has that many, so that a card with more links
        than are followed is seen as hitting the ``links_per_card`` budget).
    :param read_rows: returns verification rows for ids (missing cards absent).

    Links are read per source card in a stable order (seeds by rank, then hop-1 cards by their
    best contribution and id); every link read counts toward ``max_links`` whether or not its
    target is eligible; every card fetched that was not already known counts toward
    ``max_lookups``. A card is reached only along simple paths whose every card is eligible. A
    card's contribution is the strongest single path's :func:`link_score` (of its origin seed's
    score and its hops); equal contributions keep the lexicographically smallest path (by id
    text). Several paths never add up.

    ``budgets_hit`` names each budget that left something unread: ``links_per_card`` when a
    source within the link budget had more links than are followed, ``links`` when the total
    stopped the links of a source (its links are read to know it has any), ``lookups`` when a
    target that needed a look-up was not looked up.
    """
    out = Expansion()
    rows: dict[uuid.UUID, CandidateRow | None] = dict(known)
    # paths at the current hop: (path, contribution), in processing order
    frontier: list[tuple[tuple[uuid.UUID, ...], float]] = [((sid, ), score) for sid, score in seeds]
    seed_score = dict(seeds)
    for hop in range(1, max_hops + 1):
        sources: list[uuid.UUID] = []
        for path, _ in frontier:
            if path[-1] not in sources:
                sources.append(path[-1])
        if not sources:
            break
        links = await read_links(sources)
        # inspect links source by source, within the link budget
        inspected: dict[uuid.UUID, list[uuid.UUID]] = {}
        for src in sources:
            available = links.get(src, [])
            room = max_links - out.links_inspected
            if room <= 0:
                if available:
                    out.budgets_hit.add(LINKS_BUDGET)
                continue
            targets = available[:links_per_card]
            if len(available) > links_per_card:
                out.budgets_hit.add(LINKS_PER_CARD_BUDGET)
            take = targets[:room]
            if len(take) < len(targets):
                out.budgets_hit.add(LINKS_BUDGET)
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
        if skipped:
            out.budgets_hit.add(LOOKUPS_BUDGET)
        if fetch:
            found = await read_rows(fetch)
            out.lookups += len(fetch)
            for t in fetch:
                rows[t] = found.get(t)
        next_frontier: dict[tuple[uuid.UUID, ...], float] = {}
        for path, _ in frontier:
            src = path[-1]
            for t in inspected.get(src, []):
                if t in path or t in skipped or not eligible(rows.get(t), flt):
                    continue
                new_path = path + (t,)
                contribution = link_score(seed_score[path[0]], hop)
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


def rank(seeds: list[tuple[uuid.UUID, float]], expansion: Expansion, top: int
         ) -> tuple[list[tuple[uuid.UUID, float]], set[uuid.UUID]]:
    """Ranking (DESIGN §5.4 as revised): each card's score is the higher of its direct score
    (seeds) and its strongest linked contribution (:func:`link_score`), never their sum; best
    first, ties by the card id's text (as API ids), cut to ``top``.

    :param seeds: ``(id, direct score)`` of the verified seeds. :param expansion: what
        :func:`expand_links` reached from them. :returns: the ``top`` best ``(id, score)``, and
        the ids whose score came from their link path (their ``retrieval.path`` is that path).
    """
    scored: dict[uuid.UUID, float] = dict(seeds)
    by_link: set[uuid.UUID] = set()
    for cid, contribution in expansion.contribution.items():
        if contribution > scored.get(cid, 0.0):
            scored[cid] = contribution
            by_link.add(cid)
    ranked = sorted(scored.items(), key=lambda item: (-item[1], card_id_str(item[0])))[:top]
    return ranked, {cid for cid, _ in ranked if cid in by_link}
