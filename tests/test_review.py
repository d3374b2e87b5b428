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
