"""Reuse only what is really the same card (DESIGN §6, issue 16): through the API, an addition
reuses an existing card only when it is the same card (family, content up to whitespace, scope,
concepts, dependencies); otherwise it is an addition, and an existing card with loosely matching
content is shown to the reviewer as a possible duplicate. Real PostgreSQL, Redis and models."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

MEM = "/api/workspaces/acme/memory"
SESSION = "/api/workspaces/acme/sessions"
APPROVED = [{"id": "d-1", "status": "approved"}]

#: the existing card every case is compared with (created by hand, revision 1)
ACTIVE_BY_COUNTRY = {
    "family": "solved_question", "title": "Active customers per country",
    "content": {"question": "How many active customers are there per country?",
                "sql": "SELECT country, count(*) FROM customers "
                       "WHERE status IN ('Active', 'On hold') GROUP BY country"},
    "scope": "retail", "concepts": ["active customer", "country"],
    "dependencies": [{"database": "shop", "schema": "public", "table": "customers"}]}


def proposal(key: str = "p", content: dict[str, str] | None = None, **fields: Any):
    """A proposal of the existing card, with ``content`` fields and other fields replaced."""
    return {"key": key, **ACTIVE_BY_COUNTRY, **fields, "decisions": APPROVED,
            "content": {**ACTIVE_BY_COUNTRY["content"], **(content or {})}}


SQL = ACTIVE_BY_COUNTRY["content"]["sql"]

#: a proposal's difference from the existing card -> (reused?, the fields the possible duplicate
#: differs in, or None when it is reused)
CASES = {
    "identical": ({}, None),
    "runs of spaces in prose": (
        {"content": {"question": "  How many  active customers\n are there   per country? "}},
        None),
    "whitespace between SQL tokens": ({"content": {"sql": SQL.replace(" FROM", "\n  FROM")}},
                                      None),
    "concepts in another order, another title": (
        {"concepts": ["country", "active customer"], "title": "Active per country"}, None),
    "another scope": ({"scope": "wholesale"}, ["scope"]),
    "no scope": ({"scope": None}, ["scope"]),
    "another dependency": ({"dependencies": [{"database": "shop", "schema": "public",
                                              "table": "orders"}]}, ["dependencies"]),
    "a concept less": ({"concepts": ["country"]}, ["concepts"]),
    "SQL literal case 'Active' vs 'active'": (
        {"content": {"sql": SQL.replace("'Active'", "'active'")}}, ["content"]),
    "spaces inside a SQL string literal": (
        {"content": {"sql": SQL.replace("'On hold'", "'On  hold'")}}, ["content"]),
    "case in prose": ({"content": {"question": "How many ACTIVE customers are there per "
                                               "country?"}}, ["content"]),
    "another scope and SQL case": ({"scope": "eu", "content": {"sql": SQL.lower()}},
                                   ["content", "scope"]),
}


async def _existing(env) -> tuple[dict[str, str], dict[str, str], dict[str, str],
                                  dict[str, Any]]:
    """Workspace acme with the existing card; returns (manage headers, the proposing agent's
    headers, the reviewer's headers, card): the reviewer gate keeps proposer and reviewer apart."""
    env.workspace("acme")
    hm, hp, hr = (env.token("acme", "memory.manage"), env.token("acme", "memory.propose"),
                  env.token("acme", "memory.review"))
    r = await env.client.post(MEM, json=ACTIVE_BY_COUNTRY, headers=hm)
    assert r.status_code == 201, r.text
    return hm, hp, hr, r.json()["card"]


@pytest.mark.parametrize("change, differs", CASES.values(), ids=CASES.keys())
async def test_only_the_same_card_is_reused_anything_else_shows_a_possible_duplicate(
        make_env, change, differs):
    async with make_env() as env:
        hm, hp, hr, card = await _existing(env)
        fields = dict(change)
        r = await env.client.post(f"{SESSION}/s/proposals", headers=hp,
                                  json={"proposals": [proposal(**fields)]})
        assert r.status_code == 201, r.text
        proposed = r.json()["proposals"][0]
        summary = (await env.client.get(f"{SESSION}/s/summary", headers=hr)).json()
        item = summary["proposals"][0]
        if differs is None:
            for shown in (proposed, item):
                assert shown["action"] == "reuse" and shown["card_id"] == card["id"]
                assert shown["possible_duplicate"] is None
            assert summary["counts"]["possible_duplicates"] == 0
        else:
            duplicate = {"card_id": card["id"], "revision": 1, "title": card["title"],
                         "differs": differs}
            for shown in (proposed, item):
                assert shown["action"] == "create" and shown["card_id"] is None
                assert shown["possible_duplicate"] == duplicate
            assert summary["counts"]["possible_duplicates"] == 1
        # the reviewer adds it: a reuse writes nothing, an addition keeps its approved fields
        r = await env.client.post(f"{SESSION}/s/review", headers=hr, json={
            "review_id": "rv", "selected": [{"key": "p"}]})
        assert r.status_code == 200, r.text
        done = r.json()["items"][0]
        cards = (await env.client.get(MEM, headers=hm)).json()
        if differs is None:
            assert done["action"] == "reused" and done["card_id"] == card["id"]
            assert cards["total"] == 1
        else:
            assert done["action"] == "created" and done["card_id"] != card["id"]
            assert cards["total"] == 2
            new = (await env.client.get(f"{MEM}/{done['card_id']}", headers=hm)).json()["card"]
            want = proposal(**fields)
            assert (new["scope"], new["concepts"], new["content"]) == (
                want["scope"], want["concepts"], want["content"])
            assert [d["table"] for d in new["dependencies"]] == [
                d["table"] for d in want["dependencies"]]


async def test_a_second_proposal_of_the_same_card_in_a_session_is_refused_naming_the_first(
        make_env):
    async with make_env() as env:
        _, hp, _, _ = await _existing(env)
        new_card = proposal("a", scope="wholesale")
        r = await env.client.post(f"{SESSION}/s/proposals", headers=hp,
                                  json={"proposals": [new_card]})
        assert r.status_code == 201, r.text
        again = {**new_card, "key": "b", "content": {
            **new_card["content"], "question": "How many active customers are  there per country?"}}
        r = await env.client.post(f"{SESSION}/s/proposals", headers=hp,
                                  json={"proposals": [again]})
        assert r.status_code == 422, r.text
        assert r.json()["item"] == "b" and "the same card as stored proposal 'a'" in r.json()[
            "detail"]
        # another scope again is another card: both can be proposed, and both created
        r = await env.client.post(f"{SESSION}/s/proposals", headers=hp,
                                  json={"proposals": [{**again, "scope": "eu"}]})
        assert r.status_code == 201, r.text
        assert r.json()["proposals"][0]["possible_duplicate"]["differs"] == ["scope"]


async def test_concurrent_proposals_of_the_same_card_in_one_session_give_one_card_and_one_receipt(
        make_env):
    async with make_env() as env:
        hm, hp, hr, card = await _existing(env)
        new_card = proposal(scope="wholesale")
        # four agents propose the same new card at once, each under a key of its own ...
        responses = await asyncio.gather(*(
            env.client.post(f"{SESSION}/s/proposals", headers=hp,
                            json={"proposals": [{**new_card, "key": f"k{n}"}]})
            for n in range(4)))
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [201, 422, 422, 422], [r.text for r in responses]
        kept = next(r for r in responses if r.status_code == 201).json()["proposals"][0]["key"]
        for r in responses:
            if r.status_code == 422:
                assert f"the same card as stored proposal {kept!r}" in r.json()["detail"]
        # ... and twice more under the stored key: an identical re-send stores nothing
        responses = await asyncio.gather(*(
            env.client.post(f"{SESSION}/s/proposals", headers=hp,
                            json={"proposals": [{**new_card, "key": kept}]}) for _ in range(2)))
        assert [r.status_code for r in responses] == [201, 201]
        assert [r.json()["proposals"][0]["stored"] for r in responses] == ["unchanged"] * 2
        assert env.scalar("SELECT count(*) FROM memory.session_proposals") == 1
        # two reviewers apply the session at once, under review ids of their own
        responses = await asyncio.gather(*(
            env.client.post(f"{SESSION}/s/review", headers=hr, json={
                "review_id": f"rv-{n}", "selected": [{"key": kept}]}) for n in range(2)))
        assert sorted(r.status_code for r in responses) == [200, 409], [r.text for r in responses]
        refused = next(r for r in responses if r.status_code == 409)
        assert "already reviewed" in refused.json()["detail"]
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 1
        assert env.scalar("SELECT count(*) FROM memory.cards") == 2  # the existing one + one
        assert env.scalar("SELECT count(*) FROM memory.cards WHERE scope = 'wholesale'") == 1


async def test_the_reviewer_can_apply_a_possible_duplicate_as_an_update_of_that_card(make_env):
    async with make_env() as env:
        hm, hp, hr, card = await _existing(env)
        other = (await env.client.post(MEM, headers=hm, json={
            "family": "sql_rule", "title": "Active", "content": {"rule": "status = 'Active'"}}
        )).json()["card"]
        wider = proposal(scope="retail and wholesale")
        wider.pop("concepts")  # left out: the card's concepts stay
        r = await env.client.post(f"{SESSION}/s/proposals", headers=hp, json={"proposals": [
            wider, {"key": "u", "kind": "update", "card_id": other["id"], "revision": 1,
                    "title": "Active status", "decisions": APPROVED}]})
        assert r.status_code == 201, r.text
        duplicate = r.json()["proposals"][0]["possible_duplicate"]
        assert duplicate["card_id"] == card["id"]
        assert duplicate["differs"] == ["scope", "concepts"]
        # refused, writing nothing: a stale revision, an unknown card, a card of another family,
        # an update proposal (it names its card already)
        target = {"card_id": card["id"], "revision": duplicate["revision"]}
        nowhere = "mem-00000000-0000-4000-8000-000000000000"
        for n, (status, key, target_card, words) in enumerate([
                (409, "p", {**target, "revision": 2}, "at revision 1"),
                (422, "p", {**target, "card_id": nowhere}, "not a card of this workspace"),
                (422, "p", {**target, "card_id": other["id"]}, "family cannot change"),
                (422, "u", target, "names its card already")]):
            r = await env.client.post(f"{SESSION}/s/review", headers=hr, json={
                "review_id": f"rv-bad-{n}", "selected": [{"key": key,
                                                         "as_update_of": target_card}]})
            assert r.status_code == status, r.text
            assert r.json()["item"] == key and words in r.json()["detail"], r.text
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 0
        # the reviewer answers the possible duplicate: update that card (with an edit), on
        # the summary that shows both proposals (so the unselected one is declined)
        version = (await env.client.get(f"{SESSION}/s/summary", headers=hr)).json()["version"]
        r = await env.client.post(f"{SESSION}/s/review", headers=hr, json={
            "review_id": "rv", "version": version, "selected": [{"key": "p", "as_update_of": target,
                                             "edits": {"title": "Active customers by country"}}]})
        assert r.status_code == 200, r.text
        receipt = r.json()
        assert receipt["items"] == [{
            "key": "p", "kind": "addition", "action": "updated", "card_id": card["id"],
            "revision": 2, "family": "solved_question", "title": "Active customers by country"}]
        assert receipt["declined"] == ["u"] and len(receipt["projection"]) == 1
        updated = (await env.client.get(f"{MEM}/{card['id']}", headers=hm)).json()["card"]
        assert (updated["scope"], updated["concepts"], updated["origin"]) == (
            "retail and wholesale", card["concepts"], "manual")
        assert (await env.client.get(MEM, headers=hm)).json()["total"] == 2
        summary = (await env.client.get(f"{SESSION}/s/summary", headers=hr)).json()
        assert {i["key"]: (i["reviewed"], i["action"], i["card_id"]) for i in
                summary["proposals"]} == {"p": ("updated", "update", card["id"]),
                                          "u": ("declined", "update", other["id"])}
