"""Workflow (DESIGN §6): session proposals, summary, reviewed promotion with durable receipts,
solved-index. Real PostgreSQL, Redis, index and models; no mocks."""

from __future__ import annotations

import asyncio
import json
import uuid

import psycopg
import pytest
from conftest import start_server, stop_server

from writer.app import create_app
from writer.cli import main

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


async def test_propose_summary_review_and_solved_index_end_to_end(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hm, hr = env.token("acme", "memory.manage"), env.token("acme", "memory.review")
        churn = await _card(env, hm, CHURN)
        revenue = await _card(env, hm, REVENUE)
        await env.drain()

        proposals = [
            active_def(),
            solved(),
            # identical to the churn card up to case and whitespace: a reuse, not a duplicate
            {"key": "churn-again", "family": "domain_clarification", "title": "Churn",
             "content": {"definition": "  a CUSTOMER with no purchase\n in the last   90 days. "},
             "decisions": APPROVED},
            # an update of a manual card, drafted against revision 1, linking to a new proposal
            {"key": "rev-upd", "kind": "update", "card_id": revenue["id"], "revision": 1,
             "content": {"rule": "Exclude cancelled and refunded orders before summing amount."},
             "links": [{"target": "active", "meaning": "see"}],
             "decisions": [{"id": "d-4", "status": "Approved"}]},
        ]
        res = await _propose(env, hr, "s-1", proposals)
        assert [(p["key"], p["action"], p["stored"]) for p in res["proposals"]] == [
            ("active", "create", "new"), ("q1", "create", "new"),
            ("churn-again", "reuse", "new"), ("rev-upd", "update", "new")]
        assert res["proposals"][2]["card_id"] == churn["id"]
        assert res["session_total"] == 4
        # a retried delivery of the same batch stores nothing twice
        again = await _propose(env, hr, "s-1", proposals)
        assert [p["stored"] for p in again["proposals"]] == ["unchanged"] * 4
        assert again["session_total"] == 4

        summary = (await env.client.get(f"{SESSION}/s-1/summary", headers=hr)).json()
        items = {i["key"]: i for i in summary["proposals"]}
        assert summary["counts"] == {"total": 4, "create": 2, "reuse": 1, "update": 1,
                                     "stale": 0, "with_problems": 0}
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

        body = {"review_id": "rv-1", "selected": [
            {"key": "active"},
            {"key": "q1", "edits": {"content": {"question": "Active customers by country?",
                                                "context": "Active = last 30 days."}}},
            {"key": "churn-again"}, {"key": "rev-upd"}]}
        r = await _review(env, hr, "s-1", body)
        assert "idempotent-replayed" not in r.headers
        receipt = r.json()
        assert receipt["outcome"] == "applied" and receipt["declined"] == []
        got = {i["key"]: i for i in receipt["items"]}
        assert [got[k]["action"] for k in ("active", "q1", "churn-again", "rev-upd")] == [
            "created", "created", "reused", "updated"]
        assert got["churn-again"]["card_id"] == churn["id"]
        assert got["rev-upd"]["card_id"] == revenue["id"] and got["rev-upd"]["revision"] == 2
        assert sorted(p["card_id"] for p in receipt["projection"]) == sorted(
            [got["active"]["card_id"], got["q1"]["card_id"], revenue["id"]])

        shown = {k: (await env.client.get(f"{MEM}/{got[k]['card_id']}", headers=hm)).json()
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
        assert (await env.client.get(MEM, headers=hm)).json()["total"] == 4

        # projection: operations queued for every written card, all current after the worker
        pending = (await env.client.get(f"{MEM}/pending", headers=hm)).json()
        assert pending["total"] == 3
        await env.drain()
        r = await env.client.post(f"{MEM}/search", headers=hm, json={
            "query": "active customers by country", "mode": "solved"})
        assert [x["card"]["id"] for x in r.json()["results"]] == [q1["id"]]

        # the summary now carries the receipt; solved-index re-queues what it recorded
        summary = (await env.client.get(f"{SESSION}/s-1/summary", headers=hr)).json()
        assert summary["review"] == receipt
        # ... and shows what the review did, not what a review would do now (its own new cards
        # are not "reuses")
        after = {i["key"]: i for i in summary["proposals"]}
        assert {k: (i["reviewed"], i["action"], i["card_id"]) for k, i in after.items()} == {
            k: (got[k]["action"], {"created": "create", "updated": "update",
                                   "reused": "reuse"}[got[k]["action"]], got[k]["card_id"])
            for k in got}
        assert summary["counts"]["create"] == 2 and summary["counts"]["stale"] == 0
        r = await env.client.post(f"{SESSION}/s-1/solved-index", headers=hr)
        assert r.status_code == 202, r.text
        si = r.json()
        assert si["review_id"] == "rv-1" and si["enqueued"] is True
        assert sorted(c["card_id"] for c in si["cards"]) == sorted(
            p["card_id"] for p in receipt["projection"])
        assert {c["status"] for c in si["cards"]} == {"requeued"} and len(si["operations"]) == 3
        await env.drain()
        assert (await env.client.get(f"{MEM}/pending", headers=hm)).json()["total"] == 0
        assert (await env.client.get(f"{MEM}/{q1['id']}", headers=hm)).json()["card"]["revision"] == 1

        # the session is closed: no more proposals, no second review
        r = await env.client.post(f"{SESSION}/s-1/proposals", headers=hr,
                                  json={"proposals": [active_def(key="late")]})
        assert r.status_code == 409 and r.json()["review_id"] == "rv-1"
        r = await _review(env, hr, "s-1", {"review_id": "rv-other", "decline_all": True}, 409)
        assert "already reviewed" in r.json()["detail"]


async def test_replaying_a_review_five_times_concurrently_creates_each_card_once(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hm, hr = env.token("acme", "memory.manage"), env.token("acme", "memory.review")
        await _propose(env, hr, "s-2", [active_def(), solved()])
        body = {"review_id": "rv-2", "selected": [{"key": "active"}, {"key": "q1"}]}
        responses = await asyncio.gather(*(
            env.client.post(f"{SESSION}/s-2/review", json=body, headers=hr) for _ in range(5)))
        assert [r.status_code for r in responses] == [200] * 5
        bodies = [r.json() for r in responses]
        assert all(b == bodies[0] for b in bodies)
        assert sum(r.headers.get("idempotent-replayed") == "true" for r in responses) == 4
        assert env.scalar("SELECT count(*) FROM memory.cards") == 2
        assert env.scalar("SELECT count(*) FROM memory.card_links") == 1
        assert env.scalar("SELECT count(*) FROM memory.projection_ops") == 2
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 1
        assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'create'") == 2

        # a card created by the review and deleted since is not recreated by a replay
        q1 = next(i["card_id"] for i in bodies[0]["items"] if i["key"] == "q1")
        assert (await env.client.delete(f"{MEM}/{q1}", headers=hm)).status_code == 200
        r = await _review(env, hr, "s-2", body)
        assert r.json() == bodies[0] and r.headers["idempotent-replayed"] == "true"
        assert (await env.client.get(f"{MEM}/{q1}", headers=hm)).status_code == 404
        assert env.scalar("SELECT count(*) FROM memory.cards") == 1
        # solved-index never re-creates it either: it reports it deleted
        si = (await env.client.post(f"{SESSION}/s-2/solved-index", headers=hr)).json()
        assert {c["card_id"]: c["status"] for c in si["cards"]}[q1] == "deleted"
        await env.drain()
        assert (await env.client.get(f"{MEM}/{q1}", headers=hm)).status_code == 404
        assert uuid.UUID(q1[4:]) not in await env.resources.index.scroll_ids("acme")

        # the same review id with another request is refused, and writes nothing
        r = await _review(env, hr, "s-2", {"review_id": "rv-2", "decline_all": True}, 409)
        assert "different request" in r.json()["detail"]
        r = await _review(env, hr, "s-other", body, 409)
        assert "another session" in r.json()["detail"]
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 1


async def test_a_batch_with_one_stale_update_writes_nothing_and_names_it(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hm, hr = env.token("acme", "memory.manage"), env.token("acme", "memory.review")
        revenue = await _card(env, hm, REVENUE)
        churn = await _card(env, hm, CHURN)
        await _propose(env, hr, "s-3", [
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
        body["selected"] = body["selected"][:3]
        receipt = (await _review(env, hr, "s-3", body)).json()
        assert receipt["declined"] == ["rev-upd"]
        assert [i["action"] for i in receipt["items"]] == ["created", "created", "updated"]
        # an update of a card deleted since is stale too
        await _propose(env, hr, "s-3b", [{"key": "u", "kind": "update", "card_id": churn["id"],
                                          "revision": 2, "title": "Churn", "decisions": APPROVED}])
        assert (await env.client.delete(f"{MEM}/{churn['id']}", headers=hm)).status_code == 200
        r = await _review(env, hr, "s-3b", {"review_id": "rv-3b", "selected": [{"key": "u"}]}, 409)
        assert r.json()["code"] == "stale_revision" and r.json()["item"] == "u"
        assert "deleted" in r.json()["detail"]


async def test_links_between_new_cards_resolve_and_another_workspace_link_fails(make_env):
    async with make_env() as env:
        env.workspace("acme")
        env.workspace("other")
        hm, hr = env.token("acme", "memory.manage"), env.token("acme", "memory.review")
        theirs = await _card(env, env.token("other", "memory.manage"), CHURN, ws="other")
        # two new cards linking each other (a cycle) resolve inside one review
        a = active_def(links=[{"target": "q1", "meaning": "example"}])
        await _propose(env, hr, "s-4", [a, solved()])
        receipt = (await _review(env, hr, "s-4", {"review_id": "rv-4", "selected": [
            {"key": "active"}, {"key": "q1"}]})).json()
        ids = {i["key"]: i["card_id"] for i in receipt["items"]}
        active = (await env.client.get(f"{MEM}/{ids['active']}", headers=hm)).json()["card"]
        q1 = (await env.client.get(f"{MEM}/{ids['q1']}", headers=hm)).json()["card"]
        assert active["links"] == [{"target": ids["q1"], "meaning": "example"}]
        assert q1["links"] == [{"target": ids["active"], "meaning": "uses the definition"}]

        # at propose time, a link to another workspace's card is refused like a missing card
        r = await env.client.post(f"{SESSION}/s-5/proposals", headers=hr, json={"proposals": [
            active_def(links=[{"target": theirs["id"]}])]})
        assert r.status_code == 422 and r.json()["item"] == "active"
        assert "not a card of this workspace" in r.json()["detail"]
        # a reviewer's edit adding such a link fails the whole batch, naming the item
        await _propose(env, hr, "s-5", [
            active_def(content={"definition": "A customer who bought this week."}),
            solved(content={"question": "Active customers per region?",
                            "sql": "SELECT region, count(*) FROM customers GROUP BY region"})])
        r = await _review(env, hr, "s-5", {"review_id": "rv-5", "selected": [
            {"key": "active"},
            {"key": "q1", "edits": {"links": [{"target": "active"},
                                              {"target": theirs["id"], "meaning": "steal"}]}}]}, 422)
        problem = r.json()
        assert problem["item"] == "q1" and problem["field"] == "selected[1].links[1].target"
        assert theirs["id"] in problem["detail"]
        assert env.scalar("SELECT count(*) FROM memory.cards WHERE workspace_id = 'acme'") == 2
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 1
        # a reused card is not written, but an invalid link on it still fails the batch
        await _propose(env, hr, "s-7", [active_def()])  # identical to the s-4 card
        r = await _review(env, hr, "s-7", {"review_id": "rv-7", "selected": [
            {"key": "active", "edits": {"links": [{"target": theirs["id"]}]}}]}, 422)
        assert r.json()["item"] == "active"
        receipt = (await _review(env, hr, "s-7", {"review_id": "rv-7", "selected": [
            {"key": "active"}]})).json()
        assert receipt["items"][0]["action"] == "reused" and receipt["items"][0]["card_id"] == ids["active"]
        # a link by key to a proposal that is not selected fails too
        r = await _review(env, hr, "s-5", {"review_id": "rv-5", "selected": [{"key": "q1"}]}, 422)
        assert r.json()["item"] == "q1" and "not selected" in r.json()["detail"]
        # another workspace's card cannot be the target of an update proposal either
        r = await env.client.post(f"{SESSION}/s-6/proposals", headers=hr, json={"proposals": [
            {"key": "u", "kind": "update", "card_id": theirs["id"], "revision": 1,
             "title": "mine now", "decisions": APPROVED}]})
        assert r.status_code == 422 and "not a card of this workspace" in r.json()["detail"]
        assert env.scalar("SELECT count(*) FROM memory.cards WHERE workspace_id = 'other'") == 1


async def test_refusals(make_env):
    async with make_env() as env:
        env.workspace("acme")
        env.workspace("other")
        hm, hr = env.token("acme", "memory.manage"), env.token("acme", "memory.review")

        async def refused(proposal, words, field=None):
            r = await env.client.post(f"{SESSION}/s-r/proposals", headers=hr,
                                      json={"proposals": [proposal]})
            assert r.status_code == 422, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.json()["item"] == proposal["key"] and words in r.json()["detail"], r.text
            if field:
                assert r.json()["field"] == field

        # no approved decision
        await refused(active_def(decisions=[{"id": "d-9", "status": "rejected"}]),
                      "no approved decision", "proposals[0].decisions")
        await refused(active_def(decisions=[]), "no approved decision")
        # no reusable content: a bare table choice, an unexplained failure, a blank definition
        await refused({"key": "t", "family": "sql_rule", "title": "Use orders",
                       "content": {}, "decisions": APPROVED,
                       "dependencies": [{"database": "shop", "schema": "public", "table": "orders"}]},
                      "no reusable content")
        await refused({"key": "e", "family": "explained_error", "title": "Query failed",
                       "content": {"error": "column does not exist"}, "decisions": APPROVED},
                      "no reusable content: a explained_error needs an error and its correction")
        await refused(active_def(content={"definition": "   "}), "no reusable content")
        await refused({"key": "u", "kind": "update", "card_id": f"mem-{uuid.uuid4()}",
                       "revision": 1, "decisions": APPROVED}, "changes at least one field")
        await refused(active_def(links=[{"target": "nope"}]), "neither a card id nor the key")
        r = await env.client.post(f"{SESSION}/s-r/proposals", headers=hr, json={"proposals": [
            active_def(), active_def(title="Same again")]})
        assert r.status_code == 422 and "duplicate key" in r.json()["detail"]
        r = await env.client.post(f"{SESSION}/s-r/proposals", headers=hr, json={"proposals": [
            active_def(), active_def(key="active2", content={
                "definition": "a customer WITH a purchase in the last 30 days."})]})
        assert r.status_code == 422 and r.json()["item"] == "active2"
        assert "same family and content" in r.json()["detail"]
        assert env.scalar("SELECT count(*) FROM memory.session_proposals") == 0
        assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'propose' "
                           "AND outcome = 'rejected:invalid_input'") == 9

        # permission missing -> 403; another workspace's token -> 404 (on every route)
        await _propose(env, hr, "s-r", [active_def(), solved()])
        hb = env.token("other", "memory.review")
        for method, path, body in [
            ("POST", f"{SESSION}/s-r/proposals", {"proposals": [active_def()]}),
            ("GET", f"{SESSION}/s-r/summary", None),
            ("POST", f"{SESSION}/s-r/review", {"review_id": "x", "decline_all": True}),
            ("POST", f"{SESSION}/s-r/solved-index", None),
        ]:
            for headers, status in ((hm, 403), (env.token("acme", "memory.schema"), 403),
                                    (hb, 404), ({}, 401)):
                r = await env.client.request(method, path, json=body, headers=headers)
                assert r.status_code == status, (method, path, status, r.text)
            r = await env.client.request(method, path, json=body, headers=hb)
            assert "Active customer" not in r.text

        # a key already stored with other content is a conflict; nothing selected is refused
        r = await env.client.post(f"{SESSION}/s-r/proposals", headers=hr, json={"proposals": [
            active_def(title="Active customer (edited)")]})
        assert r.status_code == 409 and r.json()["item"] == "active"
        r = await _review(env, hr, "s-r", {"review_id": "rv-r", "selected": []}, 422)
        assert "decline_all" in r.json()["detail"]
        r = await _review(env, hr, "s-r", {"review_id": "rv-r", "selected": [{"key": "zzz"}]}, 422)
        assert r.json()["item"] == "zzz"
        # the session's approved SQL is read-only in review; its question and context are not
        r = await _review(env, hr, "s-r", {"review_id": "rv-r", "selected": [
            {"key": "active"},
            {"key": "q1", "edits": {"content": {"sql": "SELECT 1"}}}]}, 422)
        assert r.json()["item"] == "q1" and "read-only" in r.json()["detail"]
        assert r.json()["field"] == "selected[1].edits.content.sql"
        r = await _review(env, hr, "s-r", {"review_id": "rv-r", "selected": [  # family is fixed
            {"key": "q1", "edits": {"content": {"question": "x"}, "family": "sql_rule"}}]}, 400)
        assert "unknown field `family`" in r.text
        assert env.scalar("SELECT count(*) FROM memory.cards") == 0
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 0
        r = await env.client.get(f"{SESSION}/nobody/summary", headers=hr)
        assert r.status_code == 404
        r = await env.client.post(f"{SESSION}/s-r/solved-index", headers=hr)
        assert r.status_code == 404 and "no review receipt" in r.json()["detail"]

        # an explicit decline of all is a receipt too, and replays like one
        r = await _review(env, hr, "s-r", {"review_id": "rv-r", "decline_all": True,
                                           "note": "not reusable"})
        declined = r.json()
        assert declined["outcome"] == "declined" and declined["declined"] == ["active", "q1"]
        assert declined["items"] == [] and declined["projection"] == []
        again = await _review(env, hr, "s-r", {"review_id": "rv-r", "decline_all": True,
                                               "note": "not reusable"})
        assert again.json() == declined and again.headers["idempotent-replayed"] == "true"
        assert env.scalar("SELECT count(*) FROM memory.cards") == 0


async def test_updates_keep_identity_origin_and_workflow_source(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hm, hr = env.token("acme", "memory.manage"), env.token("acme", "memory.review")
        await _propose(env, hr, "s-a", [active_def()])
        created = (await _review(env, hr, "s-a", {"review_id": "rv-a",
                                                  "selected": [{"key": "active"}]})).json()
        cid = created["items"][0]["card_id"]
        # a later session updates the workflow card: id, origin and source stay
        res = await _propose(env, hr, "s-b", [{
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
        # an addition whose (edited) content matches an existing card reuses it at review time
        await _propose(env, hr, "s-c", [active_def(key="again", content={
            "definition": "A customer with a purchase in the last 14 days."})])
        receipt = (await _review(env, hr, "s-c", {"review_id": "rv-c", "selected": [
            {"key": "again", "edits": {"content": {
                "definition": "a customer with a purchase in the LAST 28 days."}}}]})).json()
        assert receipt["items"][0]["action"] == "reused" and receipt["items"][0]["card_id"] == cid
        assert receipt["projection"] == []
        assert env.scalar("SELECT count(*) FROM memory.cards") == 1


async def test_workflow_tables_are_isolated_by_workspace(make_env):
    async with make_env() as env:
        for ws in ("wa", "wb"):
            env.workspace(ws)
            h = env.token(ws, "memory.review")
            base = f"/api/workspaces/{ws}/sessions/s"
            r = await env.client.post(f"{base}/proposals", headers=h,
                                      json={"proposals": [active_def()]})
            assert r.status_code == 201, r.text
            r = await env.client.post(f"{base}/review", headers=h,
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
    async with make_env() as env:
        env.workspace("acme")
        review = env.token("acme", "memory.review", "memory.schema")["Authorization"].split()[1]
        server, task, url = await start_server(create_app(env.settings, env.resources))
        monkeypatch.setenv("MEMARC_URL", url)
        monkeypatch.setenv("MEMARC_TOKEN", review)

        async def cli(*argv: str):
            capsys.readouterr()
            code = await asyncio.to_thread(main, list(argv))
            out = capsys.readouterr()
            return code, (json.loads(out.out) if out.out.strip() else None), \
                (out.err.strip().splitlines() or [""])[-1]

        try:
            props, rev = tmp_path / "proposals.json", tmp_path / "review.json"
            props.write_text(json.dumps([active_def(), solved()]))  # a bare list is accepted
            code, _, err = await cli("propose", "--workspace", "acme", "--session", "a/b",
                                     "--data", str(props))
            assert code == 2 and json.loads(err)["code"] == "bad_input"
            code, out, _ = await cli("propose", "--workspace", "acme", "--session", "s 1:x",
                                     "--data", str(props))
            assert code == 0 and [p["action"] for p in out["proposals"]] == ["create", "create"]
            code, out, _ = await cli("summary", "--workspace", "acme", "--session", "s 1:x")
            assert code == 0 and out["counts"]["create"] == 2 and out["session_id"] == "s 1:x"
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
            code, out, _ = await cli("schema-cleanup", "--workspace", "acme", "--data", str(change))
            q1 = next(i["card_id"] for i in first["items"] if i["key"] == "q1")
            assert code == 0 and out["status"] == "done" and out["deleted"] == [q1]
        finally:
            await stop_server(server, task)
