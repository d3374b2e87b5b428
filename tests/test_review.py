"""Review of a session (issue 24 "Review of a session", issue 25 case 6): the list of sessions to
review (API and CLI), a review bound to the summary it was made on, and the links of an approved
addition that reuses an existing card. Real PostgreSQL, Redis, index and models; no mocks."""

from __future__ import annotations

import json

from helpers import live_writer, run_cli
from test_workflow import APPROVED, SESSION, _card, _propose, _review, _tokens, active_def

RULE = {"key": "rule", "family": "sql_rule", "title": "Paid orders only",
        "content": {"rule": "Keep orders whose status is 'paid'."}, "decisions": APPROVED}


async def _sessions(env, h, status: str | None = None, code: int = 200):
    r = await env.client.get(SESSION, headers=h, params={"status": status} if status else None)
    assert r.status_code == code, r.text
    return r.json()


# ---- the list of sessions to review ----

async def test_the_sessions_list_counts_proposals_and_tells_open_from_reviewed(make_env):
    async with make_env() as env:
        env.workspace("acme")
        admin, agent, reviewer = _tokens(env)
        card = await _card(env, admin, {"family": "sql_rule", "title": "Old rule",
                                        "content": {"rule": "Old."}})
        await _propose(env, agent, "s-old", [active_def()])
        await _propose(env, agent, "s-new", [RULE, {
            "key": "upd", "kind": "update", "card_id": card["id"], "revision": 1,
            "content": {"rule": "New."}, "decisions": APPROVED}])
        # the card moves on: the update is stale
        r = await env.client.put(f"/api/workspaces/acme/memory/{card['id']}", headers=admin,
                                 json={"family": "sql_rule", "title": "Old rule",
                                       "content": {"rule": "Older."}, "revision": 1})
        assert r.status_code == 200, r.text
        listed = await _sessions(env, reviewer)
        assert listed["status"] == "open"
        assert [s["session_id"] for s in listed["sessions"]] == ["s-new", "s-old"]
        new = listed["sessions"][0]
        assert (new["additions"], new["updates"], new["stale"], new["reviewed"]) == (1, 1, 1,
                                                                                   False)
        assert len(new["proposed_by"]) == 1 and new["proposed_by"][0].startswith("token:")
        assert new["first_proposed_at"] <= new["last_proposed_at"]
        await _review(env, reviewer, "s-old", {"review_id": "rv-old", "selected": [
            {"key": "active"}]})
        assert [s["session_id"] for s in (await _sessions(env, reviewer))["sessions"]] == ["s-new"]
        done = (await _sessions(env, agent, "reviewed"))["sessions"]
        assert [(s["session_id"], s["review_id"], s["outcome"]) for s in done] == [
            ("s-old", "rv-old", "applied")]
        assert len((await _sessions(env, reviewer, "all"))["sessions"]) == 2
        # a reader may not list them; a bad status or an unknown parameter is a 400
        assert (await _sessions(env, env.token("acme", "memory.read"), code=403))["code"] \
            == "forbidden"
        await _sessions(env, reviewer, "closed", code=400)
        r = await env.client.get(SESSION, headers=reviewer, params={"state": "open"})
        assert r.status_code == 400, r.text


async def test_cli_sessions_lists_the_sessions_to_review(make_env, monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch, "memory.review") as env:
        agent = env.token("acme", "memory.propose")
        await _propose(env, agent, "s-cli", [active_def()])
        code, out, err = await run_cli(capsys, "sessions", "--workspace", "acme")
        assert code == 0, err
        assert [(s["session_id"], s["additions"]) for s in out["sessions"]] == [("s-cli", 1)]
        code, out, _ = await run_cli(capsys, "sessions", "--workspace", "acme", "--status",
                                     "reviewed")
        assert code == 0 and out["sessions"] == []
        code, _, err = await run_cli(capsys, "sessions", "--workspace", "other")
        assert code == 2 and json.loads(err)["code"] == "not_found", err


async def test_cli_review_apply_carries_the_version_memarc_summary_showed(
        make_env, monkeypatch, capsys, tmp_path):
    """Issue 36: ``memarc summary`` shows the summary's version and remembers it;
    ``review-apply`` sends it without the reviewer copying it, so a Decline all written by hand
    declines what the summary showed. A proposal stored since the reviewer looked makes it
    refuse (nothing sent) and say which; ``--version`` reviews what was seen, leaving the new
    one open. With no summary looked at, a decline_all is the API's 428 with a hint."""
    async with live_writer(make_env, monkeypatch, "memory.review") as env:
        agent = env.token("acme", "memory.propose")
        where = ("--workspace", "acme", "--session", "s-cli")
        review = tmp_path / "review.json"
        review.write_text(json.dumps({"review_id": "rv-all", "decline_all": True}))
        await _propose(env, agent, "s-cli", [active_def()])
        code, _, err = await run_cli(capsys, "review-apply", *where, "--data", str(review))
        problem = json.loads(err)
        assert code == 2 and problem["code"] == "summary_version_required", err
        assert "memarc summary" in problem["hint"]
        code, out, err = await run_cli(capsys, "summary", *where)
        assert code == 0 and out["version"], err
        seen = out["version"]
        await _propose(env, agent, "s-cli", [RULE])  # stored after the reviewer looked
        code, _, err = await run_cli(capsys, "review-apply", *where, "--data", str(review))
        problem = json.loads(err)
        assert code == 2 and problem["code"] == "summary_changed", err
        assert (problem["seen_version"], problem["stored_since"]) == (seen, ["rule"])
        assert f"--version {seen}" in problem["error"]
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 0
        code, out, err = await run_cli(capsys, "review-apply", *where, "--data", str(review),
                                       "--version", seen)
        assert code == 0, err
        assert out["declined"] == ["active"] and out["open"] == ["rule"]
        assert out["reviewed_on"] == {"version": seen, "from": "--version"}
        # the next review: the summary looked at again, its version carried
        code, out, err = await run_cli(capsys, "summary", *where)
        assert [p["key"] for p in out["proposals"] if p.get("reviewed") is None] == ["rule"]
        shown = out["version"]
        review.write_text(json.dumps({"review_id": "rv-rule", "selected": [{"key": "rule"}]}))
        code, out, err = await run_cli(capsys, "review-apply", *where, "--data", str(review))
        assert code == 0, err
        assert out["reviewed_on"] == {"version": shown, "from": "memarc summary"}
        assert [i["key"] for i in out["items"]] == ["rule"] and out["open"] == []
        # the same review again (a lost answer): the API's replay of the same request
        code, again, err = await run_cli(capsys, "review-apply", *where, "--data", str(review))
        assert code == 0 and again == out, err
        # a new review on the summary seen before that review: look again
        review.write_text(json.dumps({"review_id": "rv-new", "selected": [{"key": "rule"}]}))
        code, _, err = await run_cli(capsys, "review-apply", *where, "--data", str(review))
        problem = json.loads(err)
        assert code == 2 and problem["code"] == "summary_changed", err
        assert problem["no_longer_open"] == ["rule"]
        review.write_text(json.dumps({"review_id": "rv-x", "version": "1-a", "decline_all": True}))
        code, _, err = await run_cli(capsys, "review-apply", *where, "--data", str(review),
                                     "--version", "1-b")
        assert code == 2 and json.loads(err)["code"] == "bad_input" and "differ" in err


# ---- a review bound to the summary it was made on (issue 25, case 6) ----

async def _summary(env, h, session="s6"):
    r = await env.client.get(f"{SESSION}/{session}/summary", headers=h)
    assert r.status_code == 200, r.text
    return r.json()


async def _opened(env, session, proposals):
    """Workspace acme with ``proposals`` stored in ``session``; the agent's and the reviewer's
    headers."""
    env.workspace("acme")
    _, agent, reviewer = _tokens(env)
    await _propose(env, agent, session, proposals)
    return agent, reviewer


async def test_a_proposal_added_after_the_summary_is_neither_applied_nor_declined(make_env):
    async with make_env() as env:
        agent, reviewer = await _opened(env, "s6", [active_def()])
        seen = await _summary(env, reviewer)
        await _propose(env, agent, "s6", [RULE])  # p2 arrives while the reviewer reads
        body = {"review_id": "rv-6", "version": seen["version"], "selected": [{"key": "active"}]}
        receipt = (await _review(env, reviewer, "s6", body)).json()
        assert [i["key"] for i in receipt["items"]] == ["active"]
        assert receipt["declined"] == [] and receipt["open"] == ["rule"]
        # the same receipt on replay
        again = await _review(env, reviewer, "s6", body)
        assert again.json() == receipt and again.headers.get("Idempotent-Replayed") == "true"
        after = await _summary(env, reviewer)
        state = {i["key"]: i["reviewed"] for i in after["proposals"]}
        assert state == {"active": "created", "rule": None} and after["counts"]["open"] == 1
        listed = (await env.client.get(SESSION, headers=reviewer)).json()["sessions"]
        assert [(s["session_id"], s["open"]) for s in listed] == [("s6", 1)]
        # another reviewer still holding the first summary: it changed, 409, nothing written
        r = await _review(env, reviewer, "s6", {**body, "review_id": "rv-6b"}, status=409)
        assert r.json()["code"] == "summary_changed"
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 1
        # p2 is reviewed later, on the summary that shows it
        second = (await _review(env, reviewer, "s6", {
            "review_id": "rv-7", "version": after["version"], "selected": [{"key": "rule"}]})).json()
        assert [i["key"] for i in second["items"]] == ["rule"] and second["open"] == []
        final = await _summary(env, reviewer)
        assert {i["key"]: i["reviewed"] for i in final["proposals"]} == {
            "active": "created", "rule": "created"}
        assert [r["review_id"] for r in final["reviews"]] == ["rv-6", "rv-7"]
        assert (await _sessions(env, reviewer))["sessions"] == []
        r = await _review(env, reviewer, "s6", {"review_id": "rv-8", "decline_all": True},
                          status=409)
        assert "already reviewed" in r.json()["detail"]


async def test_without_a_version_a_review_decides_nothing_it_does_not_name(make_env):
    """Issue 36's four steps through the HTTP API, as a client that knows no versions: p1 is
    proposed, the reviewer reads the summary, p2 arrives (201), the review selects p1 without
    a version. p2 is not declined: it stays open for a review that sees it. A decline_all
    without a version is a 428 and writes nothing."""
    async with make_env() as env:
        agent, reviewer = await _opened(env, "s6", [active_def()])
        seen = await _summary(env, reviewer)
        assert [i["key"] for i in seen["proposals"]] == ["active"]
        r = await env.client.post(f"{SESSION}/s6/proposals", headers=agent,
                                  json={"proposals": [RULE]})
        assert r.status_code == 201, r.text
        receipt = (await _review(env, reviewer, "s6", {
            "review_id": "rv-old", "selected": [{"key": "active"}]})).json()
        assert [i["key"] for i in receipt["items"]] == ["active"]
        assert receipt["declined"] == [] and receipt["open"] == ["rule"]
        after = await _summary(env, reviewer)
        assert {i["key"]: i["reviewed"] for i in after["proposals"]} == {
            "active": "created", "rule": None}
        # decline_all names nothing: without the version it would decline unseen proposals
        r = await _review(env, reviewer, "s6", {"review_id": "rv-all", "decline_all": True},
                          status=428)
        problem = r.json()
        assert problem["code"] == "summary_version_required" and problem["field"] == "version"
        assert "summary" in problem["detail"]
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 1
        declined = (await _review(env, reviewer, "s6", {
            "review_id": "rv-all", "version": after["version"], "decline_all": True})).json()
        assert declined["declined"] == ["rule"] and declined["open"] == []


async def test_without_a_version_a_review_covers_what_came_before_what_it_names(make_env):
    """Every summary that showed the newest proposal a review names showed the ones stored
    before it: those are decided (declined when not selected)."""
    async with make_env() as env:
        agent, reviewer = await _opened(env, "s6", [active_def(), RULE])
        receipt = (await _review(env, reviewer, "s6", {
            "review_id": "rv-old", "selected": [{"key": "rule"}]})).json()
        assert receipt["declined"] == ["active"] and receipt["open"] == []
        r = await _review(env, reviewer, "s6", {"review_id": "rv-v", "version": "1-0",
                                                 "decline_all": True}, status=409)
        assert r.json()["code"] == "conflict"  # reviewed already: nothing is open


async def test_a_forged_or_old_version_is_a_409_and_writes_nothing(make_env):
    async with make_env() as env:
        agent, reviewer = await _opened(env, "s6", [active_def()])
        for version in ("junk", "999999-abc", "1-0000000000000000"):
            r = await _review(env, reviewer, "s6", {"review_id": f"rv-{version}",
                                                     "version": version,
                                                     "decline_all": True}, status=409)
            assert r.json()["code"] == "summary_changed" and r.json()["field"] == "version"
        assert env.scalar("SELECT count(*) FROM memory.review_receipts") == 0


async def test_the_admin_page_sends_its_version_so_later_proposals_stay_open(make_env):
    import admin_helpers
    from test_admin_review import form_of, post

    async with make_env() as env:
        agent, reviewer = await _opened(env, "s1", [active_def()])
        await admin_helpers.sign_in(env.client, reviewer)
        page = await env.client.get("/admin/workspaces/acme/sessions/s1")
        pairs = form_of(page.text)
        assert ("version", (await _summary(env, reviewer, "s1"))["version"]) in pairs
        await _propose(env, agent, "s1", [RULE])
        r = await post(env, pairs)
        assert r.status_code == 303, r.text
        receipt = await env.client.get(r.headers["location"])
        assert 'id="left-open"' in receipt.text and "Paid orders only" in receipt.text
        assert "1 proposal of this session is still open" in receipt.text
        page = await env.client.get("/admin/workspaces/acme/sessions/s1")
        assert 'name="p1-keep"' in page.text and 'name="p0-keep"' not in page.text


# ---- the approved links of an addition that reuses an existing card ----

async def _linked_card(env):
    """Workspace acme with a card "Refunds" and a card identical to :func:`active_def` that links
    to it ("see also"); ``(admin, agent, reviewer, refunds, existing)``."""
    env.workspace("acme")
    admin, agent, reviewer = _tokens(env)
    other = await _card(env, admin, {"family": "sql_rule", "title": "Refunds",
                                     "content": {"rule": "Refunds are negative."}})
    base = {k: v for k, v in active_def().items() if k in ("family", "title", "content")}
    existing = await _card(env, admin, {**base, "links": [
        {"target": other["id"], "meaning": "see also"}]})
    return admin, agent, reviewer, other, existing


async def test_a_reused_card_gets_the_approved_links_it_lacks_as_a_new_revision(make_env):
    async with make_env() as env:
        admin, agent, reviewer, other, existing = await _linked_card(env)
        target = await _card(env, admin, {"family": "sql_rule", "title": "Paid orders",
                                          "content": {"rule": "Keep paid orders."}})
        await _propose(env, agent, "s-links", [active_def(links=[
            {"target": target["id"], "meaning": "filters by"},
            {"target": other["id"], "meaning": "contradicts"}])])
        summary = await _summary(env, reviewer, "s-links")
        assert summary["proposals"][0]["action"] == "reuse"
        receipt = (await _review(env, reviewer, "s-links", {
            "review_id": "rv-links", "version": summary["version"],
            "selected": [{"key": "active"}]})).json()
        item = receipt["items"][0]
        assert (item["action"], item["card_id"], item["revision"]) == ("reused", existing["id"], 2)
        assert item["links_added"] == [target["id"]]
        assert item["links_not_written"] == [
            f"{other['id']} (contradicts): the card already links to it as 'see also'"]
        card = (await env.client.get(f"/api/workspaces/acme/memory/{existing['id']}",
                                     headers=admin)).json()["card"]
        assert card["revision"] == 2 and card["origin"] == existing["origin"]
        assert sorted((link["target"], link["meaning"]) for link in card["links"]) == sorted([
            (other["id"], "see also"), (target["id"], "filters by")])
        # the new revision is queued for projection and recorded, like any write of a review
        assert [p["card_id"] for p in receipt["projection"]] == [existing["id"]]
        uid = existing["id"].removeprefix("mem-")
        assert env.scalar("SELECT count(*) FROM memory.projection_ops WHERE card_id = %s AND "
                          "op = 'upsert' AND revision = 2", uid) == 1
        r = await env.client.get("/api/workspaces/acme/memory/activity", headers=admin,
                                 params={"card_id": existing["id"], "verb": "reuse"})
        assert r.json()["total"] == 1, r.text


async def test_a_reused_card_that_already_has_the_links_is_not_written(make_env):
    async with make_env() as env:
        admin, agent, reviewer, other, existing = await _linked_card(env)
        await _propose(env, agent, "s-same", [active_def(links=[
            {"target": other["id"], "meaning": "see also"}])])
        receipt = (await _review(env, reviewer, "s-same", {
            "review_id": "rv-same", "selected": [{"key": "active"}]})).json()
        item = receipt["items"][0]
        assert (item["action"], item["revision"]) == ("reused", 1)
        assert "links_added" not in item and "links_not_written" not in item
        assert receipt["projection"] == []


# ---- what the archive holds near an addition: similar cards, nearby solved questions ----

async def _nearby_page(env):
    """Workspace acme with a similar card, a solved question of database shop and an unrelated
    rule, indexed; a session proposing "Active customer" (of shop); the reviewer signed in on
    its summary page."""
    import admin_helpers

    env.workspace("acme")
    admin, agent, reviewer = _tokens(env)
    await _card(env, admin, {"family": "domain_clarification", "title": "Active buyer",
                             "content": {"definition": "A buyer with a purchase in the last "
                                                       "30 days."}})
    await _card(env, admin, {"family": "solved_question", "title": "Active customers by month",
                             "content": {"question": "How many active customers per month?",
                                         "sql": "SELECT month, count(*) FROM customers GROUP BY 1"},
                             "dependencies": [{"database": "shop"}]})
    await _card(env, admin, {"family": "sql_rule", "title": "Paid orders",
                             "content": {"rule": "Keep paid orders."}})
    await env.drain()
    await _propose(env, agent, "s-near", [active_def(dependencies=[
        {"database": "shop", "schema": "public", "table": "customers"}])])
    await admin_helpers.sign_in(env.client, reviewer)
    return await env.client.get("/admin/workspaces/acme/sessions/s-near")


async def test_the_summary_page_shows_similar_cards_and_nearby_solved_questions(make_env):
    import re

    async with make_env() as env:
        page = await _nearby_page(env)
        assert page.status_code == 200, page.text
        near = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.text.split('id="nearby-0"')[1]
                                          .split("</div>")[0]))
        similar, solved = near.split("Where it would be recalled")
        assert "Similar, not the same" in similar and "Active buyer" in similar
        assert "Paid orders" not in similar and "Active customers by month" not in similar
        assert "solved questions of shop" in solved and "Active customers by month" in solved


async def test_without_recall_the_summary_page_says_so_and_still_reviews(make_env):
    async with make_env() as env:
        env.app.state.archive.embedder = None  # the model is not available to this process
        page = await _nearby_page(env)
        assert page.status_code == 200, page.text
        assert "cannot be shown now" in page.text and 'id="review-form"' in page.text
