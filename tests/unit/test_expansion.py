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
from shared.recall.expansion import (HOP_DECAY, LINKS_PER_CARD, MAX_LINKS, MAX_LOOKUPS,
                                     expand_links)

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
        c = score[path[0]] * HOP_DECAY ** (len(path) - 1)
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
        assert result.contribution[cid] == seed_score[path[0]] * HOP_DECAY ** (len(path) - 1)
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
    assert all(v == (1 / 61) * 0.5 for v in result.contribution.values())
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
    assert result.contribution[c] == (1 / 61) * 0.5 and result.path[c] == (a, c)
    # b is itself a seed and also reached from a
    assert result.contribution[b] == (1 / 61) * 0.5
