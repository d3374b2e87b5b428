"""The cards decided in a workflow session (issue 16, DESIGN §5): recorded per session through the
API and the CLI, excluded from recall in that session (search, rules) and never a bridge of link
expansion; and workflow recall bound to its configured database and schema (the CLI's
``MEMARC_WORKFLOW_DATABASE`` / ``MEMARC_WORKFLOW_SCHEMA``, a token's binding). Real PostgreSQL,
Redis, index and models."""

from __future__ import annotations

import json
import uuid

from helpers import live_writer, run_cli

MEM = "/api/workspaces/acme/memory"
SESSIONS = "/api/workspaces/acme/sessions"


def _rule(title: str, text: str, **kw) -> dict:
    return {"family": "sql_rule", "title": title, "content": {"rule": text}, **kw}


def _term(title: str, text: str, **kw) -> dict:
    return {"family": "domain_clarification", "title": title, "content": {"definition": text},
            **kw}


async def _create(env, h, body, ws: str = "acme") -> str:
    r = await env.client.post(f"/api/workspaces/{ws}/memory", json=body, headers=h)
    assert r.status_code == 201, r.text
    return r.json()["card"]["id"]


async def _recall(env, h, mode: str = "search", **extra) -> dict:
    r = await env.client.post(f"{MEM}/search", headers=h, json={
        "query": "monthly churn rate customers lost", "mode": mode, "top": 20, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _ids(body: dict) -> set[str]:
    return {x["card"]["id"] for x in body["results"]}


async def _decide(env, h, session: str, *decisions: tuple[str, str], status: int = 200):
    r = await env.client.post(f"{SESSIONS}/{session}/decisions", headers=h, json={
        "decisions": [{"card_id": c, "decision": d} for c, d in decisions]})
    assert r.status_code == status, r.text
    return r.json()


def _decision_rows(env) -> int:
    return env.scalar("SELECT count(*) FROM memory.session_decisions")


async def test_decided_cards_are_left_out_of_search_and_rules_in_their_session_only(make_env):
    async with make_env() as env:
        env.workspace("acme")
        manage, agent = env.token("acme"), env.token("acme", "memory.propose")
        rule_a = await _create(env, manage, _rule("Monthly churn rate", "Monthly churn rate = "
                               "customers lost in the month / customers at month start."))
        rule_b = await _create(env, manage, _rule("Churn excludes trials", "Customers lost "
                               "during a free trial do not count in the churn rate."))
        term = await _create(env, manage, _term("Churned customer", "A customer lost: no "
                             "purchase in the last 90 days (monthly churn)."))
        await env.drain()
        before = await _recall(env, manage)
        assert {rule_a, rule_b, term} <= _ids(before)
        # the user accepted one rule and rejected the clarification (ids in another spelling)
        out = await _decide(env, agent, "s-1", (" " + rule_a.upper(), "accepted"),
                            (term, "rejected"))
        assert [(d["card_id"], d["decision"], d["stored"]) for d in out["decisions"]] == [
            (rule_a, "accepted", "new"), (term, "rejected", "new")]
        assert out["counts"] == {"total": 2, "accepted": 1, "rejected": 1}
        token_id = env.scalar("SELECT id::text FROM memory.api_tokens"
                              " WHERE permissions = ARRAY['memory.propose']")
        assert {d["decided_by"] for d in out["decisions"]} == {f"token:{token_id}"}
        # in the session: neither is a result, in search nor in rules; nothing counts as a ghost
        inside = await _recall(env, manage, session="s-1")
        assert rule_a not in _ids(inside) and term not in _ids(inside)
        assert rule_b in _ids(inside) and inside["excluded"] == 0
        rules = await _recall(env, manage, mode="rules", session=" s-1 ")
        assert _ids(rules) == {rule_b}
        assert _ids(await _recall(env, manage, mode="rules")) == {rule_a, rule_b}
        # without the session, or in another session, they are back
        assert {rule_a, term} <= _ids(await _recall(env, manage))
        assert {rule_a, term} <= _ids(await _recall(env, manage, session="s-2"))
        # the session's decisions, listed (the reviewer may read them too)
        r = await env.client.get(f"{SESSIONS}/s-1/decisions",
                                 headers=env.token("acme", "memory.review"))
        assert r.status_code == 200, r.text
        assert [(d["card_id"], d["decision"]) for d in r.json()["decisions"]] == [
            (rule_a, "accepted"), (term, "rejected")]
        # a decision changed, and the same one again (its author and time stay)
        out = await _decide(env, agent, "s-1", (rule_a, "rejected"))
        assert out["decisions"][0]["stored"] == "changed"
        again = await _decide(env, agent, "s-1", (rule_a, "rejected"))
        assert again["decisions"][0] == {**out["decisions"][0], "stored": "unchanged"}
        assert again["counts"] == {"total": 2, "accepted": 0, "rejected": 2}
        # one record per card that changed (2 new, then 1 changed); the unchanged re-send
        # records nothing
        assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'decide'"
                          " AND outcome = 'ok'") == 3
        # a card's activity lists its decisions, newest first (tester issue: no card_id)
        r = await env.client.get(f"{MEM}/activity", params={"card_id": rule_a, "verb": "decide"},
                                 headers=manage)
        assert r.status_code == 200, r.text
        assert [(a["verb"], a["card_id"], a["detail"]) for a in r.json()["activity"]] == [
            ("decide", rule_a, {"session": "s-1", "decision": "rejected"}),
            ("decide", rule_a, {"session": "s-1", "decision": "accepted"})]
        r = await env.client.get(f"{MEM}/activity", params={"card_id": term}, headers=manage)
        assert [(a["verb"], a["detail"]) for a in r.json()["activity"]
                if a["verb"] == "decide"] == [("decide", {"session": "s-1",
                                                          "decision": "rejected"})]
        # a deleted card takes its decisions with it
        r = await env.client.delete(f"{MEM}/{term}", headers=manage)
        assert r.status_code == 200, r.text
        r = await env.client.get(f"{SESSIONS}/s-1/decisions", headers=agent)
        assert [d["card_id"] for d in r.json()["decisions"]] == [rule_a]


async def test_a_decided_card_is_never_a_bridge_of_link_expansion(make_env):
    """a -> b -> c (as tests/test_links_recall.py builds it): with b decided in the session, b is
    no result, c is reached by no link path (its score is its own direct score), and b's links
    are never read."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        c = await _create(env, h, _rule("Zebra stripes", "Zebras migrate across the savanna."))
        b = await _create(env, h, _rule("Penguin colonies", "Penguins huddle on the ice shelf.",
                                        links=[{"target": c, "meaning": "see also"}]))
        a = await _create(env, h, _rule("Monthly churn rate", "Monthly churn rate = customers "
                                        "lost in the month / customers at the start.",
                                        links=[{"target": b, "meaning": "related"}]))
        await env.drain()
        free = {x["card"]["id"]: x for x in (await _recall(env, h, mode="rules"))["results"]}
        assert free[b]["retrieval"]["path"] == [a, b]
        assert len(free[c]["retrieval"]["path"]) > 1  # reached through b
        await _decide(env, env.token("acme", "memory.propose"), "s", (b, "rejected"))
        body = await _recall(env, h, mode="rules", session="s")
        got = {x["card"]["id"]: x for x in body["results"]}
        assert b not in got and set(got) == {a, c}
        assert got[c]["retrieval"]["path"] == [c]
        assert got[c]["score"] == 1 / (60 + got[c]["retrieval"]["seed_rank"])
        assert body["expansion"]["links_inspected"] == 1  # a -> b only: b is never a source


async def test_decisions_need_memory_propose_and_bad_input_writes_nothing(make_env):
    async with make_env() as env:
        env.workspace("acme")
        env.workspace("other")
        manage, agent = env.token("acme"), env.token("acme", "memory.propose")
        card = await _create(env, manage, _rule("Net revenue", "Exclude refunds from revenue."))
        theirs = await _create(env, env.token("other"), _rule("Theirs", "Another workspace."),
                               ws="other")
        url = f"{SESSIONS}/s/decisions"
        good = {"decisions": [{"card_id": card, "decision": "accepted"}]}
        # a reader, an administrator and a reviewer cannot record decisions; a reader cannot list
        for perms in (("memory.read",), ("memory.manage",), ("memory.review",)):
            r = await env.client.post(url, headers=env.token("acme", *perms), json=good)
            assert r.status_code == 403 and r.json()["code"] == "forbidden", (perms, r.text)
            assert r.json()["permissions"] == ["memory.propose"]
        r = await env.client.get(url, headers=env.token("acme", "memory.read"))
        assert r.status_code == 403 and r.json()["permissions"] == ["memory.propose",
                                                                    "memory.review"]
        # a session without decisions is not found
        r = await env.client.get(url, headers=agent)
        assert r.status_code == 404 and r.json()["code"] == "not_found", r.text
        bad = {
            "not an id": [{"card_id": "nonsense", "decision": "accepted"}],
            "bare uuid": [{"card_id": card[4:], "decision": "accepted"}],
            "unknown card": [{"card_id": f"mem-{uuid.uuid4()}", "decision": "accepted"}],
            "another workspace's card": [{"card_id": theirs, "decision": "rejected"}],
            "twice": [{"card_id": card, "decision": "accepted"},
                      {"card_id": card.upper(), "decision": "rejected"}],
            "after a good one": [{"card_id": card, "decision": "accepted"},
                                 {"card_id": theirs, "decision": "accepted"}],
            "no decision": [{"card_id": card, "decision": "maybe"}],
            "unknown field": [{"card_id": card, "decision": "accepted", "why": "x"}],
            "empty": [],
        }
        for name, decisions in bad.items():
            r = await env.client.post(url, headers=agent, json={"decisions": decisions})
            assert r.status_code in (400, 422), (name, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/problem+json"), name
            if "card" in name:  # unknown, or another workspace's: the same answer
                assert r.status_code == 422 and "is not a card in this workspace" in r.text, r.text
        r = await env.client.post(url, headers=agent, json={"decisions": bad["twice"]})
        assert r.json()["field"] == "decisions[1].card_id", r.text
        r = await env.client.post(url, headers=agent, json={"decisions": bad["after a good one"]})
        assert r.json()["field"] == "decisions[1].card_id", r.text
        assert _decision_rows(env) == 0
        assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'decide'"
                          " AND outcome = 'ok'") == 0
        # a blank session id, on the decisions and on recall
        r = await env.client.post(f"{SESSIONS}/%20/decisions", headers=agent, json=good)
        assert r.status_code == 422 and r.json()["field"] == "session_id", r.text
        r = await env.client.post(f"{MEM}/search", headers=manage,
                                  json={"query": "revenue", "session": "  "})
        assert r.status_code == 422 and r.json()["field"] == "session", r.text
        # a session id with '/' names no session route, so it can hold no decisions: refused
        # on recall rather than silently excluding nothing
        r = await env.client.post(f"{MEM}/search", headers=manage,
                                  json={"query": "revenue", "session": "team/s"})
        assert r.status_code == 422 and r.json()["field"] == "session", r.text
        assert "'/'" in r.json()["detail"], r.text
        assert _decision_rows(env) == 0
        # and the good request is recorded
        await _decide(env, agent, "s", (card, "accepted"))
        assert _decision_rows(env) == 1


def _bound_cards() -> dict[str, dict]:
    """Cards about orders in three physical places, one workspace-wide."""
    dep = lambda db, table: [{"database": db, "schema": "public", "table": table}]  # noqa: E731
    return {
        "shop_orders": _rule("Orders: cancelled status", "Orders with status cancelled are "
                             "left out of revenue.", dependencies=dep("shop", "orders")),
        "shop_customers": _rule("Customers: test accounts", "Orders of test customers are "
                                "left out of revenue.", dependencies=dep("shop", "customers")),
        "crm_orders": _rule("CRM orders: duplicates", "Duplicated orders are left out of "
                            "revenue.", dependencies=dep("crm", "orders")),
        "everywhere": _rule("Revenue is net of tax", "Revenue of orders is net of tax."),
    }


async def test_cli_decides_lists_and_recalls_with_the_session(make_env, monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch, "memory.propose") as env:
        manage = env.token("acme")
        first = await _create(env, manage, _rule("Monthly churn rate", "Monthly churn rate = "
                              "customers lost / customers at month start."))
        second = await _create(env, manage, _rule("Churn excludes trials", "Customers lost in "
                               "a trial do not count in the monthly churn rate."))
        await env.drain()
        w = ("--workspace", "acme")
        code, out, _ = await run_cli(capsys, "session", "decide", *w, "s-cli", first.upper(),
                                     "--accepted")
        assert code == 0 and out["decisions"][0]["card_id"] == first, out
        code, _, err = await run_cli(capsys, "session", "decide", *w, "s-cli", first, first,
                                     "--rejected")
        assert code == 2 and json.loads(err)["code"] == "invalid_input", err
        code, out, _ = await run_cli(capsys, "session", "decisions", *w, "s-cli")
        assert code == 0 and [(d["card_id"], d["decision"]) for d in out["decisions"]] == [
            (first, "accepted")]
        monkeypatch.setenv("MEMARC_TOKEN", manage["Authorization"].split()[1])
        for command in ("search", "rules"):
            code, out, _ = await run_cli(capsys, command, *w, "monthly churn rate",
                                         "--session", "s-cli")
            assert code == 0 and _ids(out) == {second}, (command, out)
            code, out, _ = await run_cli(capsys, command, *w, "monthly churn rate")
            assert code == 0 and _ids(out) == {first, second}, (command, out)
            # an empty --session (an unset variable in a script) is refused, never a recall
            # outside the session
            code, out, err = await run_cli(capsys, command, *w, "monthly churn rate",
                                           "--session", "")
            assert code == 2 and out is None and json.loads(err)["code"] == "bad_request", err
        # a blank session is refused by the CLI itself (the API would answer a bare 404)
        for argv in (("decide", *w, " ", second, "--accepted"), ("decisions", *w, "")):
            code, out, err = await run_cli(capsys, "session", *argv)
            assert code == 2 and json.loads(err)["code"] == "bad_input", (argv, err)
            assert "session id" in json.loads(err)["error"], err
        # the administrator's token cannot record decisions (memory.propose)
        code, _, err = await run_cli(capsys, "session", "decide", *w, "s-cli", second,
                                     "--rejected")
        assert code == 2 and json.loads(err)["code"] == "forbidden", err
        assert _decision_rows(env) == 1


async def test_cli_bound_to_a_database_and_schema_passes_them_on_every_workflow_call(
        make_env, tmp_path, monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch) as env:
        h = env.token("acme")
        ids = {name: await _create(env, h, body) for name, body in _bound_cards().items()}
        await env.drain()
        w = ("--workspace", "acme")
        orders = ("--filters", '{"table": "orders"}')
        # unbound, a table filter alone is refused by the API (it needs its database)
        code, _, err = await run_cli(capsys, "rules", *w, "revenue of orders", *orders)
        assert code == 2 and json.loads(err)["field"] == "filters.database", err
        monkeypatch.setenv("MEMARC_WORKFLOW_DATABASE", "shop")
        monkeypatch.setenv("MEMARC_WORKFLOW_SCHEMA", "public")
        expected = {ids["shop_orders"], ids["everywhere"]}
        for command in ("search", "rules"):
            code, out, _ = await run_cli(capsys, command, *w, "revenue of orders", *orders)
            assert code == 0 and _ids(out) == expected, (command, out)
        code, out, _ = await run_cli(capsys, "rules", *w, "revenue of orders")
        assert code == 0 and _ids(out) == {ids["shop_orders"], ids["shop_customers"],
                                           ids["everywhere"]}, out
        # an option overrides the environment; a filter outside the binding is refused
        code, out, _ = await run_cli(capsys, "rules", *w, "revenue of orders", *orders,
                                     "--database", "crm")
        assert code == 0 and _ids(out) == {ids["crm_orders"], ids["everywhere"]}, out
        code, _, err = await run_cli(capsys, "rules", *w, "revenue", "--filters",
                                     '{"database": "crm", "table": "orders"}')
        assert code == 2 and json.loads(err)["code"] == "outside_binding", err
        # solved-search takes the binding too (no solved question here: an empty answer)
        code, out, _ = await run_cli(capsys, "solved-search", *w, "revenue", *orders)
        assert code == 0 and out["results"] == [], out
        # propose: a dependency that names no database is the workflow's
        agent = env.token("acme", "memory.propose")["Authorization"].split()[1]
        monkeypatch.setenv("MEMARC_TOKEN", agent)
        props = tmp_path / "proposals.json"
        props.write_text(json.dumps([{
            "key": "k", "decisions": [{"id": "d", "status": "approved"}], "family": "sql_rule",
            "title": "Orders: refunds", "content": {"rule": "Refunded orders are not revenue."},
            "dependencies": [{"table": "orders", "column": "status"}, {"database": "shop"}]}]))
        code, out, err = await run_cli(capsys, "propose", *w, "--session", "s", "--data",
                                       str(props))
        assert code == 0, err
        code, out, _ = await run_cli(capsys, "summary", *w, "--session", "s")
        deps = out["proposals"][0]["card"]["dependencies"]
        assert [{k: v for k, v in d.items() if v is not None} for d in deps] == [
            {"database": "shop", "schema": "public", "table": "orders", "column": "status"},
            {"database": "shop"}], deps
        props.write_text(json.dumps([{
            "key": "k2", "decisions": [{"id": "d", "status": "approved"}], "family": "sql_rule",
            "title": "CRM", "content": {"rule": "x"},
            "dependencies": [{"database": "crm", "schema": "public"}]}]))
        code, _, err = await run_cli(capsys, "propose", *w, "--session", "s", "--data",
                                     str(props))
        assert code == 2 and json.loads(err)["code"] == "outside_binding", err
        assert env.scalar("SELECT count(*) FROM memory.session_proposals") == 1


async def test_a_token_bound_to_a_database_and_schema_enforces_the_binding(make_env,
                                                                            monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch) as env:
        h = env.token("acme")
        ids = {name: await _create(env, h, body) for name, body in _bound_cards().items()}
        await env.drain()
        bound = env.token("acme", "memory.read", database="shop", db_schema="public")
        r = await env.client.post(f"{MEM}/search", headers=bound, json={
            "query": "revenue of orders", "mode": "rules", "filters": {"table": "orders"}})
        assert r.status_code == 200, r.text
        assert _ids(r.json()) == {ids["shop_orders"], ids["everywhere"]}
        for filters in ({"database": "crm"}, {"database": "shop", "schema": "sales"}):
            r = await env.client.post(f"{MEM}/search", headers=bound, json={
                "query": "revenue", "mode": "rules", "filters": filters})
            assert r.status_code == 403 and r.json()["code"] == "forbidden", (filters, r.text)
        # through the CLI with no binding of its own: the token's applies
        monkeypatch.setenv("MEMARC_TOKEN", bound["Authorization"].split()[1])
        code, out, _ = await run_cli(capsys, "rules", "--workspace", "acme", "revenue of orders",
                                     "--filters", '{"table": "orders"}')
        assert code == 0 and _ids(out) == {ids["shop_orders"], ids["everywhere"]}, out
