"""Link expansion and ranking (DESIGN §5 steps 3-4): property-based tests over random graphs.

The graphs, eligibility and seeds are generated; the expansion runs against in-memory readers
that count what they are asked for, and is checked against an independent brute-force reading of
the rules (all simple paths of at most two hops through eligible cards).
"""

from __future__ import annotations

import asyncio
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.index.engine import IndexFilter
from shared.models import PROJECTION_FORMAT
from shared.recall.eligibility import CandidateRow
from shared.recall.expansion import (LINKS_PER_CARD, MAX_HOPS, MAX_LINKS, MAX_LOOKUPS,
                                     expand_links, link_score, rank)

IDS = [uuid.UUID(int=i + 1) for i in range(400)]


def _row(cid: uuid.UUID, ok: bool) -> CandidateRow:
    return CandidateRow(cid, "sql_rule", None, (), 1, 1 if ok else None, PROJECTION_FORMAT, ())


@st.composite
def graphs(draw, max_cards=40, max_out=25):
    n = draw(st.integers(2, max_cards))
    cards = IDS[:n]
    eligible = {c: draw(st.booleans()) if draw(st.integers(0, 4)) else False for c in cards}
    links = {}
    for c in cards:
        targets = draw(st.lists(st.sampled_from(cards), max_size=max_out, unique=True))
        links[c] = sorted((t for t in targets if t != c), key=str)
    seed_pool = [c for c in cards if eligible[c]]
    seeds = draw(st.lists(st.sampled_from(seed_pool), unique=True, max_size=10)) if seed_pool else []
    return cards, eligible, links, seeds


class Readers:
    def __init__(self, links, eligible):
        self.links, self.eligible = links, eligible
        self.links_served = 0
        self.rows_asked: list[uuid.UUID] = []

    async def read_links(self, ids):
        out = {}
        for i in ids:
            out[i] = self.links.get(i, [])[:LINKS_PER_CARD + 1]  # as recall reads them
            self.links_served += len(out[i])
        return out

    async def read_rows(self, ids):
        self.rows_asked += ids
        return {i: _row(i, self.eligible[i]) for i in ids if i in self.eligible}


def _run(seeds, eligible, links, **kw):
    scored = [(s, 1.0 / (60 + r)) for r, s in enumerate(seeds, start=1)]
    known = {s: _row(s, True) for s in seeds}
    readers = Readers(links, eligible)
    result = asyncio.run(expand_links(scored, known, IndexFilter(), readers.read_links,
                                      readers.read_rows, **kw))
    return scored, readers, result


def _brute_force(seeds, eligible, links, per_card=LINKS_PER_CARD):
    """Best contribution and path per card over all simple eligible paths of 1-2 hops, along
    the first ``per_card`` links of each card (None: all of them)."""
    score = {s: 1.0 / (60 + r) for r, s in enumerate(seeds, start=1)}
    best: dict[uuid.UUID, tuple[float, tuple[str, ...]]] = {}

    def offer(path):
        c = link_score(score[path[0]], len(path) - 1)
        key = tuple(str(p) for p in path)
        cur = best.get(path[-1])
        if cur is None or c > cur[0] or (c == cur[0] and key < cur[1]):
            best[path[-1]] = (c, key)

    for s in seeds:
        for t in links.get(s, [])[:per_card]:
            if t == s or not eligible[t]:
                continue
            offer((s, t))
            for u in links.get(t, [])[:per_card]:
                if u in (s, t) or not eligible[u]:
                    continue
                offer((s, t, u))
    return best


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_expansion_matches_brute_force_when_budgets_are_not_reached(g):
    cards, eligible, links, seeds = g
    _, readers, result = _run(seeds, eligible, links, max_lookups=10_000, max_links=10_000)
    _same_as_brute_force(result, _brute_force(seeds, eligible, links))
    # with budgets this large only the links per card can cut the expansion short
    assert result.budgets_hit <= {"links_per_card"}


def _same_as_brute_force(result, expected):
    assert set(result.contribution) == set(expected)
    for cid, (contribution, path) in expected.items():
        assert result.contribution[cid] == contribution
        assert tuple(str(p) for p in result.path[cid]) == path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_cards=400, max_out=40))
def test_budgets_are_never_exceeded_and_every_path_is_valid(g):
    cards, eligible, links, seeds = g
    scored, readers, result = _run(seeds, eligible, links)
    assert result.links_inspected <= MAX_LINKS
    assert result.lookups <= MAX_LOOKUPS
    assert len(readers.rows_asked) == len(set(readers.rows_asked)) == result.lookups
    assert not set(readers.rows_asked) & set(seeds)  # seeds are never counted as look-ups
    seed_score = dict(scored)
    for cid, path in result.path.items():
        assert path[-1] == cid and path[0] in seed_score
        assert 2 <= len(path) <= 3 and len(set(path)) == len(path)  # simple, at most 2 hops
        for a, b in zip(path, path[1:]):
            assert b in links[a][:LINKS_PER_CARD]
        assert all(eligible[c] for c in path)  # no ineligible destination or bridge
        assert result.contribution[cid] == link_score(seed_score[path[0]], len(path) - 1)
    # deterministic
    _, _, again = _run(seeds, eligible, links)
    assert again.contribution == result.contribution and again.path == result.path
    assert again.budgets_hit == result.budgets_hit
    # an expansion that says it was not cut short is the unbounded one (every link followed)
    if not result.truncated:
        _same_as_brute_force(result, _brute_force(seeds, eligible, links, per_card=None))


def test_an_expansion_within_every_budget_is_not_truncated():
    a, b, c = IDS[:3]
    _, _, result = _run([a], {a: True, b: True, c: True}, {a: [b], b: [c]})
    assert not result.truncated and result.budgets_hit == set()
    assert (result.links_inspected, result.lookups) == (2, 2)
    # exactly as many links as are followed is not a cut either
    seed, targets = IDS[0], IDS[1:21]
    _, _, result = _run([seed], dict.fromkeys(IDS[:21], True), {seed: targets})
    assert result.links_inspected == LINKS_PER_CARD and not result.truncated


def test_counting_rules_on_a_star():
    """A seed with 30 links: only 20 are read; ineligible targets still count as read links."""
    seed = IDS[0]
    targets = IDS[1:31]
    links = {seed: targets}
    eligible = {c: i % 2 == 0 for i, c in enumerate(IDS[:31])}
    eligible[seed] = True
    _, readers, result = _run([seed], eligible, links)
    assert result.links_inspected == 20
    assert result.lookups == 20
    assert set(result.contribution) == {t for t in targets[:20] if eligible[t]}
    assert all(v == link_score(1 / 61, 1) for v in result.contribution.values())
    assert result.truncated and result.budgets_hit == {"links_per_card"}


def test_lookup_budget_stops_new_cards_but_not_known_ones():
    seeds = IDS[:15]
    links = {s: IDS[100 + 20 * i: 100 + 20 * (i + 1)] for i, s in enumerate(seeds)}
    eligible = {c: True for c in IDS}
    _, readers, result = _run(seeds, eligible, links)
    assert result.lookups == MAX_LOOKUPS == 200
    assert result.links_inspected == 300
    assert len(result.contribution) == 200
    assert result.truncated and result.budgets_hit == {"lookups"}


def test_the_link_budget_says_it_cut_the_expansion_short():
    """25 seeds of 20 links each: the 400 links are inspected (seeds by rank), the last five
    seeds' links are not, and the expansion says so; a lower budget cuts inside a card."""
    seeds = IDS[:25]
    links = {s: IDS[100 + (i % 10) * 20: 120 + (i % 10) * 20] for i, s in enumerate(seeds)}
    eligible = {c: True for c in IDS}
    _, _, result = _run(seeds, eligible, links, max_lookups=10_000)
    assert result.links_inspected == MAX_LINKS == 400
    assert result.truncated and result.budgets_hit == {"links"}
    _, _, result = _run(seeds[:1], eligible, links, max_links=5)
    assert result.links_inspected == 5 and result.budgets_hit == {"links"}
    # a budget met exactly, with nothing left to read, is not a cut
    _, _, result = _run(seeds[:1], eligible, links, max_links=20)
    assert result.links_inspected == 20 and not result.truncated


def test_several_paths_never_add_up_and_a_seed_gets_direct_plus_best_linked():
    a, b, c = IDS[:3]
    links = {a: [b, c], b: [c], c: []}
    eligible = {a: True, b: True, c: True}
    scored, _, result = _run([a, b], eligible, links)
    # c is reached from a (1 hop), from b (1 hop) and a->b->c (2 hops): strongest single path wins
    assert result.contribution[c] == link_score(1 / 61, 1) and result.path[c] == (a, c)
    # b is itself a seed and also reached from a
    assert result.contribution[b] == link_score(1 / 61, 1)


# --- ranking (DESIGN §5.4 as revised, issue 42): the four properties, over random graphs ---

def _ranked(seeds, eligible, links, top=100):
    scored, _, result = _run(seeds, eligible, links, max_lookups=10_000, max_links=10_000)
    ranked, by_link = rank(scored, result, top)
    return scored, result, ranked, by_link


def test_link_score_sits_between_its_seed_and_the_next():
    for r in range(1, 101):
        s, following = 1 / (60 + r), 1 / (61 + r)
        scores = [link_score(s, h) for h in range(1, MAX_HOPS + 1)]
        assert s > scores[0] > scores[-1] > following
        assert scores == sorted(scores, reverse=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_the_first_seed_is_first(g):
    """A card ranked first by every branch is the first seed: nothing a link reaches passes it."""
    cards, eligible, links, seeds = g
    if not seeds:
        return
    _, _, ranked, by_link = _ranked(seeds, eligible, links)
    assert ranked[0][0] == seeds[0] and seeds[0] not in by_link


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_a_link_never_lifts_a_card_above_the_card_it_was_reached_from(g):
    cards, eligible, links, seeds = g
    scored, result, ranked, by_link = _ranked(seeds, eligible, links)
    position = {cid: i for i, (cid, _) in enumerate(ranked)}
    score = dict(ranked)
    for cid in by_link:
        path = result.path[cid]
        for earlier in path[:-1]:  # the seed and any bridge come before it
            assert position[earlier] < position[cid]
            assert score[earlier] > score[cid]
    # a card that was a seed but ranks by its link scores no more than the link gives it
    for cid, s in ranked:
        assert s == max(dict(scored).get(cid, 0.0), result.contribution.get(cid, 0.0))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_repeated_paths_never_add_up(g):
    """A card's score is one of its evidences (direct, or its strongest single path), never
    more: it is at most the best of them, whatever the number of paths to it."""
    cards, eligible, links, seeds = g
    scored, result, ranked, _ = _ranked(seeds, eligible, links)
    direct = dict(scored)
    brute = _brute_force(seeds, eligible, links)
    for cid, s in ranked:
        best_path = brute[cid][0] if cid in brute else 0.0
        assert s == max(direct.get(cid, 0.0), best_path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_a_card_reached_only_by_a_link_comes_right_after_its_source(g):
    """Between a linked-only card and its origin seed there are only cards ranked there by a
    link too, from the same seed or one ranked above it (fewer hops, or as many with a smaller
    id): no card's own direct evidence comes in between, so the next seed follows it."""
    cards, eligible, links, seeds = g
    scored, result, ranked, by_link = _ranked(seeds, eligible, links)
    direct = dict(scored)
    position = {cid: i for i, (cid, _) in enumerate(ranked)}
    for cid in result.contribution:
        if cid in direct:
            continue
        assert cid in position  # still appears
        origin = result.path[cid][0]
        # the cards ranked between the origin's own (direct) place and this card; the origin
        # itself may rank higher, lifted by a link from a better seed
        mine = dict(ranked)[cid]
        between = [c for c, sc in ranked if mine < sc < direct[origin]]
        for c in between:
            assert c in by_link
            other = result.path[c][0]
            assert direct[other] >= direct[origin]
            if other == origin:
                assert len(result.path[c]) <= len(result.path[cid])
        # the seed right below the origin comes after the card
        below = [c for c, s in scored if s < direct[origin]]
        if below and below[0] in position and below[0] not in by_link:
            assert position[below[0]] > position[cid]


def test_the_issue_42_case_a_best_direct_hit_is_not_buried():
    """Seed 1 is the card asked for by its own title; seeds 2-30 are weak hits that a good seed
    links to. With the old formula (direct + 0.5 × source) the linked weak hits passed seed 1."""
    seeds = IDS[:30]
    links = {s: [seeds[(i + 1) % 30], seeds[(i + 2) % 30]] for i, s in enumerate(seeds)}
    links[seeds[0]] = []  # the asked card links to nothing
    eligible = dict.fromkeys(seeds, True)
    scored, result, ranked, _ = _ranked(seeds, eligible, links, top=10)
    assert ranked[0][0] == seeds[0]
    old = {c: s + result_old for c, s in scored
           for result_old in [max((dict(scored)[p] * 0.5 ** (h + 1)
                                   for p in seeds for h in range(2)
                                   if c in links.get(p, []) and h == 0), default=0.0)]}
    assert sorted(old, key=lambda c: -old[c]).index(seeds[0]) > 0  # the old formula buried it
