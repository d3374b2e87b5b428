"""Link expansion through the API: linked cards gain the strongest linked contribution, paths are
reported, and ineligible cards never bridge."""

from __future__ import annotations

import pytest

from shared.recall.expansion import link_score

pytestmark = pytest.mark.both_engines

BASE = "/api/workspaces/acme/memory"


def _rule(title, text, **kw):
    return {"family": "sql_rule", "title": title, "content": {"rule": text}, **kw}


async def _create(env, h, body) -> dict:
    r = await env.client.post(BASE, json=body, headers=h)
    assert r.status_code == 201, r.text
    return r.json()["card"]


async def _chain(env):
    """Workspace acme: A (monthly churn rate) -> B (penguins) -> C (zebras), plus three churn
    variants, all projected. Returns (headers, A, B, C)."""
    env.workspace("acme")
    h = env.token("acme")

    async def create(body):
        return await _create(env, h, body)

    c = await create(_rule("Zebra stripes", "Zebras migrate across the savanna in herds."))
    b = await create(_rule("Penguin colonies", "Penguins huddle together on the ice shelf.",
                           links=[{"target": c["id"], "meaning": "see also"}]))
    a = await create(_rule("Monthly churn rate", "Monthly churn rate = customers lost in the "
                           "month / customers at the start of the month.",
                           links=[{"target": b["id"], "meaning": "related"}]))
    for i in range(3):
        await create(_rule(f"Churn variant {i}", f"Churn rate variant {i}: customers lost "
                                                 f"divided by customers at month start."))
    await env.drain()
    return h, a, b, c


async def _ask(env, h, **extra) -> list[dict]:
    """The results of the churn rate question (rules, top 10)."""
    r = await env.client.post(f"{BASE}/search", headers=h, json={
        "query": "monthly churn rate customers lost", "mode": "rules", "top": 10, **extra})
    assert r.status_code == 200
    return r.json()["results"]


async def test_linked_cards_gain_the_strongest_linked_contribution_with_its_path(make_env):
    async with make_env() as env:
        h, a, b, c = await _chain(env)
        results = await _ask(env, h)
        by_id = {x["card"]["id"]: x for x in results}
        direct = {cid: 1 / (60 + x["retrieval"]["seed_rank"]) for cid, x in by_id.items()}
        assert len(direct) == 6  # a small workspace: every card is a seed
        assert by_id[a["id"]]["retrieval"]["path"] == [a["id"]]
        assert by_id[a["id"]]["score"] == direct[a["id"]]
        # the score is the higher of the direct and the strongest linked one, never their sum
        via_a = link_score(direct[a["id"]], 1)
        assert by_id[b["id"]]["score"] == max(direct[b["id"]], via_a)
        assert by_id[b["id"]]["retrieval"]["path"] == (
            [a["id"], b["id"]] if via_a > direct[b["id"]] else [b["id"]])
        via_b, via_a2 = link_score(direct[b["id"]], 1), link_score(direct[a["id"]], 2)
        assert by_id[c["id"]]["score"] == max(direct[c["id"]], via_a2, via_b)
        if max(via_a2, via_b) > direct[c["id"]]:
            assert by_id[c["id"]]["retrieval"]["path"] == (
                [b["id"], c["id"]] if via_b > via_a2 else [a["id"], b["id"], c["id"]])
        # a is the first seed: first; b and c, reached from it, right behind it
        assert [x["card"]["id"] for x in results[:3]] == [a["id"], b["id"], c["id"]]
        scores = [x["score"] for x in results]
        assert scores == sorted(scores, reverse=True)


async def test_an_ordinary_recall_says_its_expansion_was_not_cut_short(make_env):
    """Issue 16: the response says how link expansion went. Six seeds, a -> b -> c: the links of
    the seeds (a -> b, b -> c), then of the hop-1 cards b and c (b -> c), no look-up (every
    card was a seed)."""
    async with make_env() as env:
        h, a, b, c = await _chain(env)
        r = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "monthly churn rate customers lost", "mode": "rules", "top": 10})
        assert r.status_code == 200
        assert r.json()["expansion"] == {"truncated": False, "lookups": 0, "links_inspected": 3,
                                         "budgets": []}


async def test_a_recall_whose_expansion_hit_the_links_per_card_budget_says_so(make_env):
    """Issue 16: a hub card with 21 outgoing links (the API allows 50); expansion follows the
    first 20 in target-id order (DESIGN §5), so the response says ``truncated`` with the
    ``links_per_card`` budget and its counts, and the 21st target is reached by no link path."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        targets = [(await _create(env, h, _rule(
            f"Warehouse note {i}", f"Warehouse shelf {i} holds spare parts of kind {i}.")))["id"]
            for i in range(21)]
        hub = await _create(env, h, _rule(
            "Monthly churn rate", "Monthly churn rate = customers lost / customers at start.",
            links=[{"target": t, "meaning": "related"} for t in targets]))
        await env.drain()
        r = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "monthly churn rate customers lost", "mode": "rules", "top": 30})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["expansion"] == {"truncated": True, "lookups": 0, "links_inspected": 20,
                                     "budgets": ["links_per_card"]}
        by_id = {x["card"]["id"]: x for x in body["results"]}
        assert by_id[hub["id"]]["retrieval"]["path"] == [hub["id"]]
        followed = sorted(targets, key=lambda t: t[4:])
        assert all(by_id[t]["retrieval"]["path"] == [hub["id"], t] for t in followed[:20])
        assert by_id[followed[20]]["retrieval"]["path"] == [followed[20]]
        # the same recall without the hub among its candidates follows no link at all
        r = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "monthly churn rate customers lost", "mode": "rules", "top": 30,
            "exclude": [hub["id"]]})
        assert r.json()["expansion"] == {"truncated": False, "lookups": 0, "links_inspected": 0,
                                         "budgets": []}


async def test_a_card_edited_and_not_yet_projected_is_no_result_and_no_bridge(make_env):
    async with make_env() as env:
        h, _, b, c = await _chain(env)
        r = await env.client.put(f"{BASE}/{b['id']}", headers=h, json=_rule(
            "Penguin colonies", "Emperor penguins huddle on the ice.", revision=1,
            links=[{"target": c["id"], "meaning": "see also"}]))
        assert r.status_code == 200
        by_id = {x["card"]["id"]: x for x in await _ask(env, h)}
        assert b["id"] not in by_id
        assert by_id[c["id"]]["retrieval"]["path"] == [c["id"]]
        assert by_id[c["id"]]["score"] == 1 / (60 + by_id[c["id"]]["retrieval"]["seed_rank"])


async def test_a_card_excluded_by_the_caller_is_no_result_and_no_bridge(make_env):
    async with make_env() as env:
        h, _, b, c = await _chain(env)
        by_id = {x["card"]["id"]: x for x in await _ask(env, h, exclude=[b["id"]])}
        assert b["id"] not in by_id and by_id[c["id"]]["retrieval"]["path"] == [c["id"]]


# made-up words: a card's title is a phrase no other card shares (the issue 42 reproduction)
_SYLLABLES = ["ter", "fin", "zel", "kat", "ov", "mur", "bla", "qui", "dro", "pes", "lun", "gor",
              "vim", "sab", "tel", "nor", "cav", "rix", "hul", "mep"]


def _made_up(i: int) -> str:
    a, b, c = _SYLLABLES[i % 20], _SYLLABLES[(i * 7 + 3) % 20], _SYLLABLES[(i * 13 + 5) % 20]
    d, e = _SYLLABLES[(i * 3 + 1) % 20], _SYLLABLES[(i // 20 * 11 + i) % 20]
    return f"{a}{b}{c} {d}{e}{c} booking"


async def test_each_card_of_a_linked_workspace_is_first_for_its_own_title(make_env):
    """Issue 42 section 1: 40 clarifications with one to three dependencies and zero to three
    links to other cards each; asked by its own made-up title (search, top 100), every card is
    rank 1 in every branch, so it must be first. With DESIGN's original formula (direct +
    0.5 × the linking seed's score) weak direct hits that a good seed links to passed it."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        made: list[dict] = []
        for i in range(40):
            targets = [made[(i * 5 + k * 3) % len(made)]["id"] for k in range(i % 4)] if made else []
            body = {"family": "domain_clarification", "title": _made_up(i),
                    "content": {"definition": f"The {_made_up(i)} is counted per booking of "
                                              f"region {i % 5} and channel {i % 3}."},
                    "dependencies": [{"database": "shop", "schema": "public",
                                      "table": f"t{(i + k) % 9}"}
                                     for k in range(1 + i % 3)],
                    "links": [{"target": t, "meaning": "related"} for t in dict.fromkeys(targets)]}
            made.append(await _create(env, h, body))
        await env.drain()
        missed = []
        for card in made:
            r = await env.client.post(f"{BASE}/search", headers=h, json={
                "query": card["title"], "mode": "search", "top": 100})
            assert r.status_code == 200, r.text
            first = r.json()["results"][0]
            if first["card"]["id"] != card["id"]:
                missed.append((card["title"], first["card"]["title"], first["retrieval"]))
        assert missed == []
