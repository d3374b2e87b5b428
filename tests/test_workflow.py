"""Workflow (DESIGN §6): session proposals, summary, reviewed promotion with durable receipts,
solved-index. Real PostgreSQL, Redis, index and models; no mocks."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from helpers import live_writer, run_cli

MEM = "/api/workspaces/acme/memory"
SESSION = "/api/workspaces/acme/sessions"

CHURN = {"family": "domain_clarification", "title": "Churned customer",
         "content": {"definition": "A customer with no purchase in the last 90 days."},
         "concepts": ["churn"]}
REVENUE = {"family": "sql_rule", "title": "Net revenue excludes cancelled orders",
           "content": {"rule": "Filter orders with status <> 'cancelled' before summing amount."},
           "dependencies": [{"database": "shop", "schema": "public", "table": "orders"}]}
APPROVED = [{"id": "d-1", "status": "approved"}]


def active_def(**kw):
    return {"key": "active", "family": "domain_clarification", "title": "Active customer",
            "content": {"definition": "A customer with a purchase in the last 30 days."},
            "decisions": APPROVED, "rationale": "The analyst defined it in the session.", **kw}


def solved(**kw):
    return {"key": "q1", "family": "solved_question", "title": "Active customers per country",
            "content": {"question": "How many active customers per country?",
                        "sql": "SELECT country, count(*) FROM customers GROUP BY country"},
            "dependencies": [{"database": "shop", "schema": "public", "table": "customers"}],
            "links": [{"target": "active", "meaning": "uses the definition"}],
            "decisions": [{"id": "d-2", "status": "approved"}, {"id": "d-3", "status": "rejected"}],
            **kw}


Headers = dict[str, str]


def _tokens(env, ws: str = "acme") -> tuple[Headers, Headers, Headers]:
    """Headers of three tokens of ``ws``: an administrator's (``memory.manage``), the proposing
    agent's (``memory.propose``) and the reviewer's (``memory.review``), as the reviewer gate
    wants them: separate."""
    return (env.token(ws, "memory.manage"), env.token(ws, "memory.propose"),
            env.token(ws, "memory.review"))


async def _card(env, h, body, ws="acme"):
    r = await env.client.post(f"/api/workspaces/{ws}/memory", json=body, headers=h)
    assert r.status_code == 201, r.text
    return r.json()["card"]


async def _propose(env, h, session, proposals, status=201):
    r = await env.client.post(f"{SESSION}/{session}/proposals", json={"proposals": proposals},
                              headers=h)
    assert r.status_code == status, r.text
    return r.json()


async def _review(env, h, session, body, status=200):
    r = await env.client.post(f"{SESSION}/{session}/review", json=body, headers=h)
    assert r.status_code == status, r.text
    return r


# ---- one session from proposals to the solved index, stage by stage ----

REVIEW_S1 = {"review_id": "rv-1", "selected": [
    {"key": "active"},
    {"key": "q1", "edits": {"content": {"question": "Active customers by country?",
                                        "context": "Active = last 30 days."}}},
    {"key": "churn-again"}, {"key": "rev-upd"}]}


@dataclass
class Session1:
    """Session s-1 of workspace acme: the manage, propose (the agent's) and review (the
    reviewer's) headers, two manual cards (churn, revenue; projected), four proposals (two
    additions, a reuse of churn, an update of revenue linking to a new one), and as the stages
    go on the first proposal response and the review's response and receipt."""

    hm: dict[str, str]
    hp: dict[str, str]
    hr: dict[str, str]
    churn: dict[str, Any]
    revenue: dict[str, Any]
    proposals: list[dict[str, Any]]
    proposed: dict[str, Any] | None = None
    review: Any = None

    @property
    def receipt(self) -> dict[str, Any]:
        return self.review.json()

    @property
    def got(self) -> dict[str, dict[str, Any]]:
        """The receipt's items by key."""
        return {i["key"]: i for i in self.receipt["items"]}


async def _session_1(env, *, propose: bool = True, review: bool = False) -> Session1:
    """Session s-1 up to its proposals (``propose``) or its review (``review``)."""
    env.workspace("acme")
    hm, hp, hr = _tokens(env)
    churn = await _card(env, hm, CHURN)
    revenue = await _card(env, hm, REVENUE)
    await env.drain()
    proposals = [
        active_def(),
        solved(),
        # the churn card again up to whitespace (and its title): a reuse, not a duplicate
        {"key": "churn-again", "family": "domain_clarification", "title": "Churn",
         "content": {"definition": "  A customer with no purchase\n in the last   90 days. "},
         "concepts": ["churn"], "decisions": APPROVED},
        # an update of a manual card, drafted against revision 1, linking to a new proposal
        {"key": "rev-upd", "kind": "update", "card_id": revenue["id"], "revision": 1,
         "content": {"rule": "Exclude cancelled and refunded orders before summing amount."},
         "links": [{"target": "active", "meaning": "see"}],
         "decisions": [{"id": "d-4", "status": "Approved"}]},
    ]
    session = Session1(hm, hp, hr, churn, revenue, proposals)
    if propose or review:
        session.proposed = await _propose(env, hp, "s-1", proposals)
    if review:
        session.review = await _review(env, hr, "s-1", REVIEW_S1)
    return session


async def test_propose_classifies_each_proposal_and_a_retried_batch_stores_nothing_twice(
        make_env):
    async with make_env() as env:
        s = await _session_1(env, propose=False)
        res = await _propose(env, s.hp, "s-1", s.proposals)
        assert [(p["key"], p["action"], p["stored"]) for p in res["proposals"]] == [
            ("active", "create", "new"), ("q1", "create", "new"),
            ("churn-again", "reuse", "new"), ("rev-upd", "update", "new")]
        assert res["proposals"][2]["card_id"] == s.churn["id"]
        assert res["session_total"] == 4
        # a retried delivery of the same batch stores nothing twice
        again = await _propose(env, s.hp, "s-1", s.proposals)
        assert [p["stored"] for p in again["proposals"]] == ["unchanged"] * 4
        assert again["session_total"] == 4


async def test_the_summary_shows_each_proposed_card_and_the_changes_of_an_update(make_env):
    async with make_env() as env:
        s = await _session_1(env)
        summary = (await env.client.get(f"{SESSION}/s-1/summary", headers=s.hp)).json()
        # the reviewer reads the same document as the proposer
        assert (await env.client.get(f"{SESSION}/s-1/summary", headers=s.hr)).json() == summary
        items = {i["key"]: i for i in summary["proposals"]}
        assert summary["counts"] == {"total": 4, "create": 2, "reuse": 1, "update": 1,
                                     "stale": 0, "possible_duplicates": 0, "with_problems": 0,
                                     "erased": 0, "open": 4}
        assert items["active"]["card"]["title"] == "Active customer"
        assert items["active"]["rationale"] == "The analyst defined it in the session."
        assert items["q1"]["card"]["links"] == [{"target": "active", "meaning": "uses the definition"}]
        assert items["churn-again"]["action"] == "reuse"
        upd = items["rev-upd"]
        assert upd["stale"] is False and upd["base_revision"] == upd["current_revision"] == 1
        assert upd["changes"] == {
            "content.rule": {"before": REVENUE["content"]["rule"],
                             "after": "Exclude cancelled and refunded orders before summing amount."},
            "links": {"before": [], "after": [{"target": "active", "meaning": "see"}]}}
        assert summary["review"] is None


async def test_a_review_applies_the_selection_and_answers_with_its_receipt(make_env):
    async with make_env() as env:
        s = await _session_1(env)
        r = await _review(env, s.hr, "s-1", REVIEW_S1)
        assert "idempotent-replayed" not in r.headers
        receipt = r.json()
        assert receipt["outcome"] == "applied" and receipt["declined"] == []
        got = {i["key"]: i for i in receipt["items"]}
        assert [got[k]["action"] for k in ("active", "q1", "churn-again", "rev-upd")] == [
            "created", "created", "reused", "updated"]
        assert got["churn-again"]["card_id"] == s.churn["id"]
        assert got["rev-upd"]["card_id"] == s.revenue["id"] and got["rev-upd"]["revision"] == 2
        assert sorted(p["card_id"] for p in receipt["projection"]) == sorted(
            [got["active"]["card_id"], got["q1"]["card_id"], s.revenue["id"]])


async def test_reviewed_cards_carry_origin_source_edits_and_resolved_links(make_env):
    async with make_env() as env:
        s = await _session_1(env, review=True)
        got, revenue = s.got, s.revenue
        shown = {k: (await env.client.get(f"{MEM}/{got[k]['card_id']}", headers=s.hm)).json()
                 for k in got}
        active, q1 = shown["active"]["card"], shown["q1"]["card"]
        assert active["origin"] == "workflow"
        assert active["source"] == {"session_id": "s-1", "decision_ids": ["d-1"]}
        assert q1["source"] == {"session_id": "s-1", "decision_ids": ["d-2"]}  # approved only
        assert q1["content"] == {"question": "Active customers by country?",
                                 "sql": "SELECT country, count(*) FROM customers GROUP BY country",
                                 "context": "Active = last 30 days."}
        assert q1["links"] == [{"target": active["id"], "meaning": "uses the definition"}]
        assert shown["active"]["incoming_links"][0]["source"] in (q1["id"], revenue["id"])
        rev = shown["rev-upd"]["card"]
        assert rev["id"] == revenue["id"] and rev["origin"] == "manual" and rev["source"] is None
        assert rev["revision"] == 2 and rev["links"] == [{"target": active["id"], "meaning": "see"}]
        assert shown["churn-again"]["card"]["revision"] == 1  # reused, not written
        assert (await env.client.get(MEM, headers=s.hm)).json()["total"] == 4


async def test_reviewed_cards_are_queued_for_projection_and_then_recalled(make_env):
    async with make_env() as env:
        s = await _session_1(env, review=True)
        # projection: operations queued for every written card, all current after the worker
        pending = (await env.client.get(f"{MEM}/pending", headers=s.hm)).json()
        assert pending["total"] == 3
        await env.drain()
        r = await env.client.post(f"{MEM}/search", headers=s.hm, json={
            "query": "active customers by country", "mode": "solved"})
        assert [x["card"]["id"] for x in r.json()["results"]] == [s.got["q1"]["card_id"]]


async def test_after_the_review_the_summary_shows_its_receipt_and_what_it_did(make_env):
    async with make_env() as env:
        s = await _session_1(env, review=True)
        got = s.got
        summary = (await env.client.get(f"{SESSION}/s-1/summary", headers=s.hr)).json()
        assert summary["review"] == s.receipt
        # ... and shows what the review did, not what a review would do now (its own new cards
        # are not "reuses")
        after = {i["key"]: i for i in summary["proposals"]}
        assert {k: (i["reviewed"], i["action"], i["card_id"]) for k, i in after.items()} == {
            k: (got[k]["action"], {"created": "create", "updated": "update",
                                   "reused": "reuse"}[got[k]["action"]], got[k]["card_id"])
            for k in got}
        assert summary["counts"]["create"] == 2 and summary["counts"]["stale"] == 0


async def test_solved_index_requeues_what_the_review_recorded(make_env):
    async with make_env() as env:
        s = await _session_1(env, review=True)
        await env.drain()
        r = await env.client.post(f"{SESSION}/s-1/solved-index", headers=s.hr)
        assert r.status_code == 202, r.text
        si = r.json()
        assert si["review_id"] == "rv-1" and si["enqueued"] is True
        assert sorted(c["card_id"] for c in si["cards"]) == sorted(
            p["card_id"] for p in s.receipt["projection"])
        assert {c["status"] for c in si["cards"]} == {"requeued"} and len(si["operations"]) == 3
        await env.drain()
        assert (await env.client.get(f"{MEM}/pending", headers=s.hm)).json()["total"] == 0
        q1 = s.got["q1"]["card_id"]
        assert (await env.client.get(f"{MEM}/{q1}", headers=s.hm)).json()["card"]["revision"] == 1


async def test_a_reviewed_session_takes_no_more_proposals_and_no_second_review(make_env):
    async with make_env() as env:
        s = await _session_1(env, review=True)
        r = await env.client.post(f"{SESSION}/s-1/proposals", headers=s.hp,
                                  json={"proposals": [active_def(key="late")]})
        assert r.status_code == 409 and r.json()["review_id"] == "rv-1"
        r = await _review(env, s.hr, "s-1", {"review_id": "rv-other", "decline_all": True}, 409)
        assert "already reviewed" in r.json()["detail"]


# ---- replays, stale updates, links, refusals ----

REVIEW_S2 = {"review_id": "rv-2", "selected": [{"key": "active"}, {"key": "q1"}]}


async def _reviewed_session_2(env) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """Session s-2 (an addition and a solved question linking to it), reviewed once; returns
    (manage headers, review headers, the receipt)."""
    env.workspace("acme")
    hm, hp, hr = _tokens(env)
    await _propose(env, hp, "s-2", [active_def(), solved()])
    return hm, hr, (await _review(env, hr, "s-2", REVIEW_S2)).json()


async def test_replaying_a_review_five_times_concurrently_creates_each_card_once(make_env):
    async with make_env() as env:
        env.workspace("acme")
        _, hp, hr = _tokens(env)
        await _propose(env, hp, "s-2", [active_def(), solved()])
        responses = await asyncio.gather(*(
            env.client.post(f"{SESSION}/s-2/review", json=REVIEW_S2, headers=hr)
            for _ in range(5)))
        assert [r.status_code for r in responses] == [200] * 5
        bodies = [r.json() for r in responses]
        assert all(b == bodies[0] for b in bodies)
        assert sum(r.headers.get("idempotent-replayed") == "true" for r in responses) == 4
        assert env.scalar("SELECT count(*) FROM memory.cards") == 2
        assert env.scalar("SELECT count(*) FROM memory.card_links") == 1
        assert env.scalar("SELECT count(*) FROM memory.projection_ops") == 2
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 1
        assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'create'") == 2


async def test_a_replayed_review_or_solved_index_never_recreates_a_card_deleted_since(make_env):
    async with make_env() as env:
        hm, hr, receipt = await _reviewed_session_2(env)
        q1 = next(i["card_id"] for i in receipt["items"] if i["key"] == "q1")
        assert (await env.client.delete(f"{MEM}/{q1}", headers=hm)).status_code == 200
        r = await _review(env, hr, "s-2", REVIEW_S2)
        # the same receipt, without the deleted card's title (erasure, issue 16)
        erased = {**receipt, "items": [{**i, "title": "", "erased": True} if i["card_id"] == q1
                                       else i for i in receipt["items"]]}
        assert r.json() == erased and r.headers["idempotent-replayed"] == "true"
        assert (await env.client.get(f"{MEM}/{q1}", headers=hm)).status_code == 404
        assert env.scalar("SELECT count(*) FROM memory.cards") == 1
        # solved-index never re-creates it either: it reports it deleted
        si = (await env.client.post(f"{SESSION}/s-2/solved-index", headers=hr)).json()
        assert {c["card_id"]: c["status"] for c in si["cards"]}[q1] == "deleted"
        await env.drain()
        assert (await env.client.get(f"{MEM}/{q1}", headers=hm)).status_code == 404
        assert uuid.UUID(q1[4:]) not in await env.resources.index.scroll_ids("acme")


async def test_a_review_id_reused_for_another_request_or_session_is_refused(make_env):
    async with make_env() as env:
        _, hr, _ = await _reviewed_session_2(env)
        # the same review id with another request is refused, and writes nothing
        r = await _review(env, hr, "s-2", {"review_id": "rv-2", "decline_all": True}, 409)
        assert "different request" in r.json()["detail"]
        r = await _review(env, hr, "s-other", REVIEW_S2, 409)
        assert "another session" in r.json()["detail"]
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 1


async def test_a_batch_with_one_stale_update_writes_nothing_and_names_it(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hm, hp, hr = _tokens(env)
        revenue = await _card(env, hm, REVENUE)
        churn = await _card(env, hm, CHURN)
        await _propose(env, hp, "s-3", [
            active_def(),
            solved(),
            {"key": "churn-upd", "kind": "update", "card_id": churn["id"], "revision": 1,
             "title": "Churned customer (90 days)", "decisions": APPROVED},
            {"key": "rev-upd", "kind": "update", "card_id": revenue["id"], "revision": 1,
             "concepts": ["revenue"], "decisions": APPROVED},
        ])
        # an administrator edits the rule after the proposal was drafted
        r = await env.client.put(f"{MEM}/{revenue['id']}", headers=hm,
                                 json=dict(REVENUE, title="Net revenue (v2)", revision=1))
        assert r.status_code == 200
        summary = (await env.client.get(f"{SESSION}/s-3/summary", headers=hr)).json()
        items = {i["key"]: i for i in summary["proposals"]}
        assert items["rev-upd"]["stale"] is True and items["rev-upd"]["current_revision"] == 2
        assert any("stale" in p for p in items["rev-upd"]["problems"])
        assert items["churn-upd"]["stale"] is False and summary["counts"]["stale"] == 1

        before = env.scalar("SELECT count(*) FROM memory.projection_ops")
        body = {"review_id": "rv-3", "selected": [{"key": k} for k in
                                                  ("active", "q1", "churn-upd", "rev-upd")]}
        r = await _review(env, hr, "s-3", body, 409)
        problem = r.json()
        assert problem["code"] == "stale_revision" and problem["item"] == "rev-upd"
        assert "rev-upd" in problem["detail"] and problem["current_revision"] == 2
        assert env.scalar("SELECT count(*) FROM memory.cards") == 2
        assert env.scalar("SELECT count(*) FROM memory.projection_ops") == before
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 0
        shown = (await env.client.get(f"{MEM}/{churn['id']}", headers=hm)).json()["card"]
        assert shown["revision"] == 1 and shown["title"] == "Churned customer"
        # no receipt was written: the reviewer can drop the stale item and apply the rest
        # (with the summary's version, so that the dropped one is declined: the summary showed
        # it; without a version a proposal stored after the newest one selected stays open)
        body["selected"] = body["selected"][:3]
        receipt = (await _review(env, hr, "s-3", {**body, "version": summary["version"]})).json()
        assert receipt["declined"] == ["rev-upd"]
        assert [i["action"] for i in receipt["items"]] == ["created", "created", "updated"]


async def test_an_update_of_a_card_deleted_since_is_stale(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hm, hp, hr = _tokens(env)
        churn = await _card(env, hm, CHURN)
        await _propose(env, hp, "s-3b", [{"key": "u", "kind": "update", "card_id": churn["id"],
                                          "revision": 1, "title": "Churn", "decisions": APPROVED}])
        assert (await env.client.delete(f"{MEM}/{churn['id']}", headers=hm)).status_code == 200
        r = await _review(env, hr, "s-3b", {"review_id": "rv-3b", "selected": [{"key": "u"}]}, 409)
        assert r.json()["code"] == "stale_revision" and r.json()["item"] == "u"
        assert "deleted" in r.json()["detail"]


async def _two_workspaces(env) -> tuple[Headers, Headers, Headers, dict[str, Any]]:
    """Workspaces acme and other, a card in other; returns acme's manage, propose and review
    headers, and other's card."""
    env.workspace("acme")
    env.workspace("other")
    hm, hp, hr = _tokens(env)
    theirs = await _card(env, env.token("other", "memory.manage"), CHURN, ws="other")
    return hm, hp, hr, theirs


async def _cycle_reviewed(env, hp, hr) -> dict[str, str]:
    """Session s-4: two new cards linking each other (a cycle), both reviewed; their ids by key."""
    a = active_def(links=[{"target": "q1", "meaning": "example"}])
    await _propose(env, hp, "s-4", [a, solved()])
    receipt = (await _review(env, hr, "s-4", {"review_id": "rv-4", "selected": [
        {"key": "active"}, {"key": "q1"}]})).json()
    return {i["key"]: i["card_id"] for i in receipt["items"]}


async def _session_5(env, hp) -> None:
    """Session s-5: an addition and a solved question linking to it by key."""
    await _propose(env, hp, "s-5", [
        active_def(content={"definition": "A customer who bought this week."}),
        solved(content={"question": "Active customers per region?",
                        "sql": "SELECT region, count(*) FROM customers GROUP BY region"})])


async def test_new_cards_linking_each_other_resolve_inside_one_review(make_env):
    async with make_env() as env:
        hm, hp, hr, _ = await _two_workspaces(env)
        ids = await _cycle_reviewed(env, hp, hr)
        active = (await env.client.get(f"{MEM}/{ids['active']}", headers=hm)).json()["card"]
        q1 = (await env.client.get(f"{MEM}/{ids['q1']}", headers=hm)).json()["card"]
        assert active["links"] == [{"target": ids["q1"], "meaning": "example"}]
        assert q1["links"] == [{"target": ids["active"], "meaning": "uses the definition"}]


async def test_a_proposal_linking_to_another_workspaces_card_is_refused_like_a_missing_card(
        make_env):
    async with make_env() as env:
        _, hp, _, theirs = await _two_workspaces(env)
        r = await env.client.post(f"{SESSION}/s-5/proposals", headers=hp, json={"proposals": [
            active_def(links=[{"target": theirs["id"]}])]})
        assert r.status_code == 422 and r.json()["item"] == "active"
        assert "not a card of this workspace" in r.json()["detail"]


async def test_an_update_proposal_of_another_workspaces_card_is_refused(make_env):
    async with make_env() as env:
        _, hp, _, theirs = await _two_workspaces(env)
        r = await env.client.post(f"{SESSION}/s-6/proposals", headers=hp, json={"proposals": [
            {"key": "u", "kind": "update", "card_id": theirs["id"], "revision": 1,
             "title": "mine now", "decisions": APPROVED}]})
        assert r.status_code == 422 and "not a card of this workspace" in r.json()["detail"]
        assert env.scalar("SELECT count(*) FROM memory.cards WHERE workspace_id = 'other'") == 1


async def test_a_reviewers_edit_linking_to_another_workspace_fails_the_batch_naming_the_item(
        make_env):
    async with make_env() as env:
        _, hp, hr, theirs = await _two_workspaces(env)
        await _session_5(env, hp)
        r = await _review(env, hr, "s-5", {"review_id": "rv-5", "selected": [
            {"key": "active"},
            {"key": "q1", "edits": {"links": [{"target": "active"},
                                              {"target": theirs["id"], "meaning": "steal"}]}}]}, 422)
        problem = r.json()
        assert problem["item"] == "q1" and problem["field"] == "selected[1].links[1].target"
        assert theirs["id"] in problem["detail"]
        assert env.scalar("SELECT count(*) FROM memory.cards WHERE workspace_id = 'acme'") == 0
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 0


async def test_a_link_by_key_to_a_proposal_not_selected_fails_the_review(make_env):
    async with make_env() as env:
        _, hp, hr, _ = await _two_workspaces(env)
        await _session_5(env, hp)
        r = await _review(env, hr, "s-5", {"review_id": "rv-5", "selected": [{"key": "q1"}]}, 422)
        assert r.json()["item"] == "q1" and "not selected" in r.json()["detail"]


async def test_a_reused_card_is_not_written_but_an_invalid_link_on_it_fails_the_batch(make_env):
    async with make_env() as env:
        _, hp, hr, theirs = await _two_workspaces(env)
        ids = await _cycle_reviewed(env, hp, hr)
        await _propose(env, hp, "s-7", [active_def()])  # identical to the s-4 card
        r = await _review(env, hr, "s-7", {"review_id": "rv-7", "selected": [
            {"key": "active", "edits": {"links": [{"target": theirs["id"]}]}}]}, 422)
        assert r.json()["item"] == "active"
        receipt = (await _review(env, hr, "s-7", {"review_id": "rv-7", "selected": [
            {"key": "active"}]})).json()
        assert receipt["items"][0]["action"] == "reused" and receipt["items"][0]["card_id"] == ids["active"]


#: proposal batches refused as invalid: (batch, the item named or None, words of the detail,
#: the field named or None)
REFUSED_PROPOSALS = {
    "no approved decision": ([active_def(decisions=[{"id": "d-9", "status": "rejected"}])],
                             "active", "no approved decision", "proposals[0].decisions"),
    "no decision at all": ([active_def(decisions=[])], "active", "no approved decision", None),
    # no reusable content: a bare table choice, an unexplained failure, a blank definition
    "a bare table choice": ([{"key": "t", "family": "sql_rule", "title": "Use orders",
                              "content": {}, "decisions": APPROVED,
                              "dependencies": [{"database": "shop", "schema": "public",
                                                "table": "orders"}]}],
                            "t", "no reusable content", None),
    "an unexplained failure": ([{"key": "e", "family": "explained_error", "title": "Query failed",
                                 "content": {"error": "column does not exist"},
                                 "decisions": APPROVED}], "e",
                               "no reusable content: a explained_error needs an error and its "
                               "correction", None),
    "a blank definition": ([active_def(content={"definition": "   "})], "active",
                           "no reusable content", None),
    "an update that changes nothing": ([{"key": "u", "kind": "update",
                                         "card_id": f"mem-{uuid.uuid4()}", "revision": 1,
                                         "decisions": APPROVED}], "u",
                                       "changes at least one field", None),
    "a link to nothing": ([active_def(links=[{"target": "nope"}])], "active",
                          "neither a card id nor the key", None),
    "a duplicate key": ([active_def(), active_def(title="Same again")], None, "duplicate key",
                        None),
    "the same card twice": ([active_def(), active_def(key="active2", title="Active", content={
        "definition": "A customer  with a purchase\nin the last 30 days."})], "active2",
        "the same card as proposals[0] (key 'active')", "proposals[1].content"),
}


@pytest.mark.parametrize("batch, item, words, field", REFUSED_PROPOSALS.values(),
                         ids=REFUSED_PROPOSALS.keys())
async def test_an_invalid_proposal_batch_is_refused_naming_the_item_and_stores_nothing(
        make_env, batch, item, words, field):
    async with make_env() as env:
        env.workspace("acme")
        hp = env.token("acme", "memory.propose")
        r = await env.client.post(f"{SESSION}/s-r/proposals", headers=hp,
                                  json={"proposals": batch})
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert words in r.json()["detail"], r.text
        if item:
            assert r.json()["item"] == item, r.text
        if field:
            assert r.json()["field"] == field
        assert env.scalar("SELECT count(*) FROM memory.session_proposals") == 0
        assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'propose' "
                          "AND outcome = 'rejected:invalid_input'") == 1


async def _proposed_session_r(env) -> tuple[Headers, Headers, Headers]:
    """Workspaces acme and other; session s-r of acme holds an addition and a solved question;
    returns acme's (manage, propose, review) headers."""
    env.workspace("acme")
    env.workspace("other")
    hm, hp, hr = _tokens(env)
    await _propose(env, hp, "s-r", [active_def(), solved()])
    return hm, hp, hr


#: The session routes and the permissions that open each one (the reviewer gate, issue 16):
#: proposing is memory.propose, applying and re-projecting a review memory.review, the summary
#: either one; manage and schema open none of them.
SESSION_ROUTES = {
    "proposals": ("POST", f"{SESSION}/s-r/proposals", {"proposals": [active_def()]},
                  {"memory.propose"}),
    "summary": ("GET", f"{SESSION}/s-r/summary", None, {"memory.propose", "memory.review"}),
    "review": ("POST", f"{SESSION}/s-r/review", {"review_id": "x", "selected": [
        {"key": "active"}]}, {"memory.review"}),
    "solved-index": ("POST", f"{SESSION}/s-r/solved-index", None, {"memory.review"}),
}
SESSION_PERMISSIONS = ("memory.read", "memory.manage", "memory.propose", "memory.review",
                       "memory.schema")


@pytest.mark.parametrize("method, path, body, allowed", SESSION_ROUTES.values(),
                         ids=SESSION_ROUTES.keys())
async def test_a_session_route_needs_its_own_permission_of_its_workspace(
        make_env, method, path, body, allowed):
    """Permission missing -> 403 problem details naming it, nothing written but the rejection's
    activity record; another workspace's token -> 404; no token -> 401; the route's permission
    -> not a 401/403/404 (a 404 only for solved-index before the review)."""
    async with make_env() as env:
        await _proposed_session_r(env)
        hb = env.token("other", *SESSION_PERMISSIONS)
        for permission in SESSION_PERMISSIONS:
            if permission in allowed:
                continue
            before = env.scalar("SELECT count(*) FROM memory.activity")
            r = await env.client.request(method, path, json=body,
                                         headers=env.token("acme", permission))
            assert r.status_code == 403, (method, path, permission, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            problem = r.json()
            assert problem["code"] == "forbidden" and problem["permissions"] == sorted(allowed)
            assert "Active customer" not in r.text
            assert env.scalar("SELECT count(*) FROM memory.activity") == before + (method == "POST")
        for headers, status in ((hb, 404), ({}, 401)):
            r = await env.client.request(method, path, json=body, headers=headers)
            assert r.status_code == status, (method, path, status, r.text)
        r = await env.client.request(method, path, json=body, headers=hb)
        assert "Active customer" not in r.text
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 0
        assert env.scalar("SELECT count(*) FROM memory.session_proposals") == 2
        for permission in allowed:
            r = await env.client.request(method, path, json=body,
                                         headers=env.token("acme", permission))
            assert r.status_code in (200, 201, 202) or (
                path.endswith("/solved-index") and r.json()["code"] == "not_found"), r.text


async def _token(env, *permissions: str) -> tuple[Headers, str, dict[str, Any]]:
    """A token of acme created as ``memarc token create`` does: (headers, its activity actor
    ``token:<id>``, what create_token answered)."""
    from shared.store.bootstrap import create_token

    created = create_token(env.migrator_url, "memory", "acme", list(permissions))
    return ({"Authorization": f"Bearer {created['token']}"}, f"token:{created['id']}", created)


async def _activity(env, hm, verb: str) -> list[dict[str, Any]]:
    r = await env.client.get(f"{MEM}/activity", params={"verb": verb}, headers=hm)
    assert r.status_code == 200, r.text
    return r.json()["activity"]


async def test_the_reviewer_gate_a_proposing_agent_cannot_apply_its_own_proposals(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hm = env.token("acme", "memory.manage")
        hp, agent, created = await _token(env, "memory.propose")
        assert "warning" not in created
        await _propose(env, hp, "s-g", [active_def(), solved()])
        summary = (await env.client.get(f"{SESSION}/s-g/summary", headers=hp)).json()
        assert summary["counts"]["create"] == 2
        # the agent tries to apply its own proposals, and to re-project them: 403, nothing written
        for route, body in (("review", {"review_id": "self", "selected": [{"key": "active"}]}),
                            ("solved-index", None)):
            r = await env.client.post(f"{SESSION}/s-g/{route}", json=body, headers=hp)
            assert r.status_code == 403, r.text
            assert r.json()["code"] == "forbidden" and r.json()["permissions"] == ["memory.review"]
            assert "memory.review" in r.json()["detail"]
        assert env.scalar("SELECT count(*) FROM memory.cards") == 0
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 0
        # the refused attempt is recorded, naming the agent's token
        refused = await _activity(env, hm, "review")
        assert [(a["actor"], a["outcome"]) for a in refused] == [(agent, "rejected:forbidden")]
        # the reviewer's token cannot propose, but applies the review
        hr, reviewer, _ = await _token(env, "memory.review")
        r = await env.client.post(f"{SESSION}/s-g2/proposals", headers=hr,
                                  json={"proposals": [active_def()]})
        assert r.status_code == 403 and r.json()["permissions"] == ["memory.propose"]
        receipt = (await _review(env, hr, "s-g", {"review_id": "rv-g", "selected": [
            {"key": "active"}, {"key": "q1"}]})).json()
        assert [i["action"] for i in receipt["items"]] == ["created", "created"]
        # the receipt and the review's activity record name the reviewing token, the proposal's
        # the proposing one
        assert receipt["reviewed_by"] == reviewer
        reviews = await _activity(env, hm, "review")
        assert [(a["actor"], a["outcome"]) for a in reviews] == [
            (reviewer, "applied"), (agent, "rejected:forbidden")]
        assert reviews[0]["detail"]["review"] == "rv-g"
        assert [(a["actor"], a["outcome"]) for a in await _activity(env, hm, "propose")] == [
            (reviewer, "rejected:forbidden"), (agent, "ok")]
        assert {a["actor"] for a in await _activity(env, hm, "create")} == {reviewer}
        si = await env.client.post(f"{SESSION}/s-g/solved-index", headers=hr)
        assert si.status_code == 202, si.text
        assert [(a["actor"], a["outcome"][:8]) for a in await _activity(
            env, hm, "solved_index")] == [(reviewer, "ok"), (agent, "rejected")]


async def test_a_token_holding_both_permissions_is_possible_when_created_explicitly(make_env):
    async with make_env() as env:
        env.workspace("acme")
        both, actor, created = await _token(env, "memory.review", "memory.propose")
        assert created["permissions"] == ["memory.propose", "memory.review"]
        assert "apply its own proposals" in created["warning"]
        await _propose(env, both, "s-b", [active_def()])
        receipt = (await _review(env, both, "s-b", {"review_id": "rv-b", "selected": [
            {"key": "active"}]})).json()
        assert receipt["items"][0]["action"] == "created" and receipt["reviewed_by"] == actor


async def test_refused_reviews_and_session_requests_write_nothing(make_env, subtests):
    async with make_env() as env:
        _, hp, hr = await _proposed_session_r(env)
        with subtests.test("a key already stored with other content is a conflict"):
            r = await env.client.post(f"{SESSION}/s-r/proposals", headers=hp, json={"proposals": [
                active_def(title="Active customer (edited)")]})
            assert r.status_code == 409 and r.json()["item"] == "active"
        with subtests.test("nothing selected is refused"):
            r = await _review(env, hr, "s-r", {"review_id": "rv-r", "selected": []}, 422)
            assert "decline_all" in r.json()["detail"]
        with subtests.test("an unknown key is refused by name"):
            r = await _review(env, hr, "s-r", {"review_id": "rv-r", "selected": [{"key": "zzz"}]},
                              422)
            assert r.json()["item"] == "zzz"
        with subtests.test("the session's approved SQL is read-only in review"):
            # (its question and context are not)
            r = await _review(env, hr, "s-r", {"review_id": "rv-r", "selected": [
                {"key": "active"},
                {"key": "q1", "edits": {"content": {"sql": "SELECT 1"}}}]}, 422)
            assert r.json()["item"] == "q1" and "read-only" in r.json()["detail"]
            assert r.json()["field"] == "selected[1].edits.content.sql"
        with subtests.test("the family is fixed"):
            r = await _review(env, hr, "s-r", {"review_id": "rv-r", "selected": [
                {"key": "q1", "edits": {"content": {"question": "x"}, "family": "sql_rule"}}]},
                400)
            assert "unknown field `family`" in r.text
        assert env.scalar("SELECT count(*) FROM memory.cards") == 0
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 0
        with subtests.test("the summary of a session without proposals is a 404"):
            r = await env.client.get(f"{SESSION}/nobody/summary", headers=hr)
            assert r.status_code == 404
        with subtests.test("solved-index before a review is a 404"):
            r = await env.client.post(f"{SESSION}/s-r/solved-index", headers=hr)
            assert r.status_code == 404 and "no review receipt" in r.json()["detail"]


async def test_declining_all_is_a_receipt_too_and_replays_like_one(make_env):
    async with make_env() as env:
        _, _, hr = await _proposed_session_r(env)
        version = (await env.client.get(f"{SESSION}/s-r/summary", headers=hr)).json()["version"]
        r = await _review(env, hr, "s-r", {"review_id": "rv-r", "decline_all": True,
                                           "note": "not reusable", "version": version})
        declined = r.json()
        assert declined["outcome"] == "declined" and declined["declined"] == ["active", "q1"]
        assert declined["items"] == [] and declined["projection"] == []
        again = await _review(env, hr, "s-r", {"review_id": "rv-r", "decline_all": True,
                                               "note": "not reusable", "version": version})
        assert again.json() == declined and again.headers["idempotent-replayed"] == "true"
        assert env.scalar("SELECT count(*) FROM memory.cards") == 0


async def test_updates_keep_identity_origin_and_workflow_source(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hm, hp, hr = _tokens(env)
        await _propose(env, hp, "s-a", [active_def()])
        created = (await _review(env, hr, "s-a", {"review_id": "rv-a",
                                                  "selected": [{"key": "active"}]})).json()
        cid = created["items"][0]["card_id"]
        # a later session updates the workflow card: id, origin and source stay
        res = await _propose(env, hp, "s-b", [{
            "key": "upd", "kind": "update", "card_id": cid, "revision": 1,
            "content": {"definition": "A customer with a purchase in the last 28 days."},
            "scope": "retail", "decisions": [{"id": "d-77", "status": "approved"}]}])
        assert res["proposals"][0]["action"] == "update" and res["proposals"][0]["stale"] is False
        summary = (await env.client.get(f"{SESSION}/s-b/summary", headers=hr)).json()
        assert summary["proposals"][0]["changes"] == {
            "content.definition": {"before": "A customer with a purchase in the last 30 days.",
                                   "after": "A customer with a purchase in the last 28 days."},
            "scope": {"before": None, "after": "retail"}}
        receipt = (await _review(env, hr, "s-b", {"review_id": "rv-b", "selected": [
            {"key": "upd", "edits": {"title": "Active customer (28 days)"}}]})).json()
        assert receipt["items"][0]["action"] == "updated" and receipt["items"][0]["card_id"] == cid
        card = (await env.client.get(f"{MEM}/{cid}", headers=hm)).json()["card"]
        assert card["id"] == cid and card["revision"] == 2 and card["origin"] == "workflow"
        assert card["source"] == {"session_id": "s-a", "decision_ids": ["d-1"]}
        assert card["title"] == "Active customer (28 days)" and card["scope"] == "retail"
        # an addition that the reviewer's edits make the same card as an existing one reuses it
        await _propose(env, hp, "s-c", [active_def(key="again", content={
            "definition": "A customer with a purchase in the last 14 days."})])
        receipt = (await _review(env, hr, "s-c", {"review_id": "rv-c", "selected": [
            {"key": "again", "edits": {"scope": "retail", "content": {
                "definition": "A customer with a purchase in the  last 28 days."}}}]})).json()
        assert receipt["items"][0]["action"] == "reused" and receipt["items"][0]["card_id"] == cid
        assert receipt["projection"] == []
        assert env.scalar("SELECT count(*) FROM memory.cards") == 1


async def test_workflow_tables_are_isolated_by_workspace(make_env):
    async with make_env() as env:
        for ws in ("wa", "wb"):
            env.workspace(ws)
            _, hp, hr = _tokens(env, ws)
            base = f"/api/workspaces/{ws}/sessions/s"
            r = await env.client.post(f"{base}/proposals", headers=hp,
                                      json={"proposals": [active_def()]})
            assert r.status_code == 201, r.text
            r = await env.client.post(f"{base}/review", headers=hr,
                                      json={"review_id": "rv", "selected": [{"key": "active"}]})
            assert r.status_code == 200, r.text
        with psycopg.connect(env.migrator_url) as conn:
            for role in ("memarc_runtime", "memarc_reader"):
                conn.execute(f"SET ROLE {role}")
                conn.execute("SELECT set_config('memarc.workspace', 'wa', false)")
                for t in ("session_proposals", "review_receipts"):
                    seen = {r[0] for r in conn.execute(f"SELECT workspace_id FROM memory.{t}")}
                    assert seen == {"wa"}, (role, t)
                conn.execute("RESET ROLE")
            conn.execute("SET ROLE memarc_runtime")
            conn.execute("SELECT set_config('memarc.workspace', 'wa', false)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):  # receipts are append-only
                conn.execute("DELETE FROM memory.review_receipts")
            conn.rollback()



async def test_cli_workflow_commands_against_a_live_writer(make_env, tmp_path, monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch, "memory.review", "memory.schema") as env:
        async def cli(*argv: str):
            return await run_cli(capsys, *argv)

        reviewer = os.environ["MEMARC_TOKEN"]
        agent = env.token("acme", "memory.propose")["Authorization"].split()[1]
        props, rev = tmp_path / "proposals.json", tmp_path / "review.json"
        props.write_text(json.dumps([active_def(), solved()]))  # a bare list is accepted
        # the reviewer's token cannot propose (the reviewer gate): 403 forbidden
        code, _, err = await cli("propose", "--workspace", "acme", "--session", "s 1:x",
                                 "--data", str(props))
        assert code == 2 and json.loads(err)["code"] == "forbidden", err
        monkeypatch.setenv("MEMARC_TOKEN", agent)  # the proposing agent
        code, _, err = await cli("propose", "--workspace", "acme", "--session", "a/b",
                                 "--data", str(props))
        assert code == 2 and json.loads(err)["code"] == "bad_input"
        code, out, _ = await cli("propose", "--workspace", "acme", "--session", "s 1:x",
                                 "--data", str(props))
        assert code == 0 and [p["action"] for p in out["proposals"]] == ["create", "create"]
        code, out, _ = await cli("summary", "--workspace", "acme", "--session", "s 1:x")
        assert code == 0 and out["counts"]["create"] == 2 and out["session_id"] == "s 1:x"
        # ... and cannot apply its own proposals, nor re-project them
        rev.write_text(json.dumps({"review_id": "self", "selected": [{"key": "active"}]}))
        for argv in (("review-apply", "--data", str(rev)), ("solved-index",)):
            code, _, err = await cli(argv[0], "--workspace", "acme", "--session", "s 1:x",
                                     *argv[1:])
            assert code == 2 and json.loads(err)["code"] == "forbidden", (argv, err)
            assert json.loads(err)["permissions"] == ["memory.review"], err
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 0
        monkeypatch.setenv("MEMARC_TOKEN", reviewer)  # the reviewer
        code, out, _ = await cli("summary", "--workspace", "acme", "--session", "s 1:x")
        assert code == 0 and out["counts"]["create"] == 2
        rev.write_text(json.dumps({"review_id": "cli-1", "selected": [
            {"key": "active"}, {"key": "q1", "edits": {"content": {"sql": "SELECT 2"}}}]}))
        code, _, err = await cli("review-apply", "--workspace", "acme", "--session", "s 1:x",
                                 "--data", str(rev))
        assert code == 2 and json.loads(err)["item"] == "q1"
        rev.write_text(json.dumps({"review_id": "cli-1", "selected": [
            {"key": "active"}, {"key": "q1"}]}))
        code, first, _ = await cli("review-apply", "--workspace", "acme", "--session", "s 1:x",
                                   "--data", str(rev))
        assert code == 0 and [i["action"] for i in first["items"]] == ["created", "created"]
        code, again, _ = await cli("review-apply", "--workspace", "acme", "--session", "s 1:x",
                                   "--data", str(rev))
        assert code == 0 and again == first
        code, out, _ = await cli("solved-index", "--workspace", "acme", "--session", "s 1:x")
        assert code == 0 and len(out["operations"]) == 2
        change = tmp_path / "change.json"
        change.write_text(json.dumps({"run_id": "cli-run", "database": "shop",
                                      "schema": "public", "removed_tables": ["customers"]}))
        # two steps: record before the catalog commits its change, then run it
        code, out, _ = await cli("schema-cleanup", "--workspace", "acme", "--data", str(change),
                                 "--record-only")
        assert code == 0 and (out["phase"], out["deleted"]) == ("recorded", [])
        code, out, _ = await cli("schema-cleanup", "--workspace", "acme", "--run", "cli-run")
        q1 = next(i["card_id"] for i in first["items"] if i["key"] == "q1")
        assert code == 0 and out["phase"] == "index_pending" and out["deleted"] == [q1]
        async with env.running_worker():  # done once the point is deleted too
            code, out, _ = await cli("schema-cleanup", "--workspace", "acme", "--run", "cli-run",
                                     "--wait", "20")
        assert code == 0 and out["status"] == "done" and out["deleted"] == [q1]
        code, again, _ = await cli("schema-cleanup", "--workspace", "acme", "--data", str(change))
        assert code == 0 and again == out
        code, _, err = await cli("schema-cleanup", "--workspace", "acme", "--run", "x",
                                 "--data", str(change))
        assert code == 2 and json.loads(err)["code"] == "bad_input"
