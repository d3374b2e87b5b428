"""Link expansion through the API: linked cards gain the strongest linked contribution, paths are
reported, and ineligible cards never bridge."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.both_engines

BASE = "/api/workspaces/acme/memory"


def _rule(title, text, **kw):
    return {"family": "sql_rule", "title": title, "content": {"rule": text}, **kw}


async def _chain(env):
    """Workspace acme: A (monthly churn rate) -> B (penguins) -> C (zebras), plus three churn
    variants, all projected. Returns (headers, A, B, C)."""
    env.workspace("acme")
    h = env.token("acme")

    async def create(body):
        r = await env.client.post(BASE, json=body, headers=h)
        assert r.status_code == 201, r.text
        return r.json()["card"]

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
        assert by_id[b["id"]]["retrieval"]["path"] == [a["id"], b["id"]]
        assert by_id[b["id"]]["score"] == direct[b["id"]] + direct[a["id"]] * 0.5
        via_b, via_a = direct[b["id"]] * 0.5, direct[a["id"]] * 0.25
        assert by_id[c["id"]]["score"] == direct[c["id"]] + max(via_a, via_b)
        assert by_id[c["id"]]["retrieval"]["path"] == (
            [b["id"], c["id"]] if via_b > via_a else [a["id"], b["id"], c["id"]])
        scores = [x["score"] for x in results]
        assert scores == sorted(scores, reverse=True)


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
