"""Card lifecycle end to end: write API -> outbox -> arq worker -> Qdrant -> verified recall."""

from __future__ import annotations

import uuid

import psycopg
import pytest

pytestmark = pytest.mark.both_engines

ORDERS_RULE = {
    "family": "sql_rule",
    "title": "Net revenue excludes cancelled orders",
    "content": {"rule": "Filter orders with status <> 'cancelled' before summing amount for net revenue.",
                "rationale": "Cancelled orders are refunded in full."},
    "concepts": ["revenue"],
    "dependencies": [{"database": "shop", "schema": "public", "table": "orders", "column": "status"}],
}
CHURN_DEF = {
    "family": "domain_clarification",
    "title": "Churned customer",
    "content": {"definition": "A customer with no purchase in the last 90 days."},
    "concepts": ["churn"],
}


BASE = "/api/workspaces/acme/memory"


async def search(env, headers, query, ws="acme", **body):
    r = await env.client.post(f"/api/workspaces/{ws}/memory/search",
                              json={"query": query, **body}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def _projected_rule_and_definition(env) -> tuple[dict, dict, dict]:
    """Workspace acme with the orders rule and the churn definition, both projected; returns
    (headers, rule card, definition card)."""
    env.workspace("acme")
    h = env.token("acme", "memory.manage")
    rule = (await env.client.post(BASE, json=ORDERS_RULE, headers=h)).json()["card"]
    churn = (await env.client.post(BASE, json=CHURN_DEF, headers=h)).json()["card"]
    await env.drain()
    return h, rule, churn


async def test_a_new_card_is_pending_until_projected_then_recalled(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme", "memory.manage")

        r = await env.client.post(BASE, json=ORDERS_RULE, headers=h)
        assert r.status_code == 201, r.text
        created = r.json()
        assert created["index_status"] == "pending"
        card = created["card"]
        assert card["id"].startswith("mem-") and card["revision"] == 1 and card["origin"] == "manual"
        r = await env.client.post(BASE, json=CHURN_DEF, headers=h)
        churn = r.json()["card"]

        # Not projected yet: visible in administration, excluded from recall.
        res = await search(env, h, "net revenue cancelled orders", mode="rules")
        assert res["results"] == []

        await env.drain()
        res = await search(env, h, "how to compute net revenue", mode="rules")
        assert [x["card"]["id"] for x in res["results"]] == [card["id"]]
        hit = res["results"][0]
        assert hit["score"] == 1 / 61
        assert hit["retrieval"]["path"] == [card["id"]]
        assert hit["retrieval"]["seed_rank"] == 1
        assert res["excluded"] == 0
        # search mode covers clarifications and rules; family narrows it
        res = await search(env, h, "customer churn definition", family=["domain_clarification"])
        assert [x["card"]["id"] for x in res["results"]] == [churn["id"]]


async def test_an_updated_card_is_excluded_until_projected_again_then_recalled_anew(make_env):
    async with make_env() as env:
        h, card, _ = await _projected_rule_and_definition(env)
        upd = dict(ORDERS_RULE, title="Gross revenue includes every order",
                   content={"rule": "Gross revenue sums amount over all orders including cancelled ones."},
                   revision=1)
        r = await env.client.put(f"{BASE}/{card['id']}", json=upd, headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["card"]["revision"] == 2 and r.json()["index_status"] == "pending"
        res = await search(env, h, "gross revenue all orders", mode="rules")
        assert res["results"] == []
        assert res["excluded"] == 1  # the stale point was a hit and was dropped
        await env.drain()
        res = await search(env, h, "gross revenue all orders", mode="rules")
        assert [x["card"]["title"] for x in res["results"]] == ["Gross revenue includes every order"]
        assert res["results"][0]["card"]["revision"] == 2


async def test_a_deleted_card_loses_its_incoming_links_and_its_point_and_is_never_recalled(
        make_env):
    async with make_env() as env:
        h, card, churn = await _projected_rule_and_definition(env)
        # Link churn -> rule, then delete the rule: link gone, never returned, point removed.
        r = await env.client.put(f"{BASE}/{churn['id']}", headers=h, json=dict(
            CHURN_DEF, revision=1, links=[{"target": card["id"], "meaning": "see also"}]))
        assert r.status_code == 200, r.text
        r = await env.client.delete(f"{BASE}/{card['id']}", headers=h)
        assert r.status_code == 200 and r.json()["deleted"] == card["id"]
        r = await env.client.get(f"{BASE}/{churn['id']}", headers=h)
        assert r.json()["card"]["links"] == []
        assert r.json()["card"]["revision"] == 2  # link removal by deletion keeps the revision
        r = await env.client.get(f"{BASE}/{card['id']}", headers=h)
        assert r.status_code == 404
        res = await search(env, h, "net revenue cancelled orders", mode="rules")
        assert res["results"] == []  # the point is still there until the worker runs
        await env.drain()
        points = await env.resources.index.scroll_ids("acme")
        assert uuid.UUID(card["id"][4:]) not in points
        res = await search(env, h, "gross revenue all orders", mode="rules")
        assert res["results"] == []
        r = await env.client.get(f"{BASE}/pending", headers=h)
        assert r.json()["total"] == 0


async def test_stale_revision_is_409_and_changes_nothing(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        card = (await env.client.post(BASE, json=CHURN_DEF, headers=h)).json()["card"]
        ok = await env.client.put(f"{BASE}/{card['id']}", headers=h,
                                  json=dict(CHURN_DEF, title="Churned customer (90 days)", revision=1))
        assert ok.status_code == 200
        stale = await env.client.put(f"{BASE}/{card['id']}", headers=h,
                                     json=dict(CHURN_DEF, title="Overwrite", revision=1))
        assert stale.status_code == 409
        body = stale.json()
        assert stale.headers["content-type"].startswith("application/problem+json")
        assert body["code"] == "stale_revision" and body["current_revision"] == 2
        now = (await env.client.get(f"{BASE}/{card['id']}", headers=h)).json()["card"]
        assert now["title"] == "Churned customer (90 days)" and now["revision"] == 2
        # an update keeps the family (and origin): changing it is refused
        r = await env.client.put(f"{BASE}/{card['id']}", headers=h, json=dict(
            ORDERS_RULE, revision=2))
        assert r.status_code == 422 and r.json()["field"] == "family"


#: card bodies the write API refuses, by what is wrong with them
BAD_BODIES = {
    "blank title": {"family": "sql_rule", "title": "  ", "content": {"rule": "x"}},
    "empty content": {"family": "sql_rule", "title": "t", "content": {}},
    "a field of another family": {"family": "sql_rule", "title": "t",
                                  "content": {"rule": "x", "sql": "select 1"}},
    "unknown family": {"family": "nope", "title": "t", "content": {"rule": "x"}},
    "title too long": {"family": "sql_rule", "title": "t" * 201, "content": {"rule": "x"}},
    "table without schema": {"family": "sql_rule", "title": "t", "content": {"rule": "x"},
                             "dependencies": [{"database": "d", "table": "orders"}]},
    "link to a missing card": {"family": "sql_rule", "title": "t", "content": {"rule": "x"},
                               "links": [{"target": f"mem-{uuid.uuid4()}"}]},
    "unknown field": {"family": "sql_rule", "title": "t", "content": {"rule": "x"}, "unknown": 1},
    "too many concepts": {"family": "sql_rule", "title": "t", "content": {"rule": "x"},
                          "concepts": ["c"] * 51},
    "NUL in a dependency": {"family": "sql_rule", "title": "t", "content": {"rule": "x"},
                            "dependencies": [{"database": "a\u0000b"}]},
    "NUL in the content": {"family": "sql_rule", "title": "t", "content": {"rule": "x\u0000"}},
}


def assert_nothing_written(env) -> None:
    """No card and no projection operation in the database."""
    with psycopg.connect(env.migrator_url) as conn:
        assert conn.execute("SELECT count(*) FROM memory.cards").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM memory.projection_ops").fetchone()[0] == 0


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
async def test_an_invalid_card_is_a_4xx_problem_and_writes_nothing(make_env, body):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        r = await env.client.post(BASE, json=body, headers=h)
        assert r.status_code in (400, 422), (body, r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["status"] == r.status_code and r.json()["detail"]
        assert_nothing_written(env)


async def test_malformed_requests_are_4xx_problems_and_write_nothing(make_env, subtests):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        with subtests.test("a body that is not JSON"):
            r = await env.client.post(BASE, content=b"{not json",
                                      headers={**h, "content-type": "application/json"})
            assert r.status_code == 400 and r.json()["code"] == "bad_request"
        with subtests.test("no body"):
            r = await env.client.post(BASE, headers=h)
            assert r.status_code == 400 and r.json()["detail"] == "a JSON request body is required"
        with subtests.test("NUL in a list query"):
            r = await env.client.get(BASE, params={"q": "a\x00b"}, headers=h)
            assert r.status_code == 422 and "NUL" in r.json()["detail"]
        for name, filters in (("database", {"database": "fin\x00"}),
                              ("scope", {"scope": "a\x00"}),
                              ("concepts[1]", {"concepts": ["ok", "b\x00"]}),
                              ("table", {"database": "fin", "table": "t\x00"})):
            with subtests.test("NUL in a recall filter", filter=name):
                r = await env.client.post(f"{BASE}/search", headers=h,
                                          json={"query": "loans", "filters": filters})
                assert r.status_code == 422, r.text
                assert r.json()["field"] == f"filters.{name}", r.text
        with subtests.test("a blank recall query"):
            r = await env.client.post(f"{BASE}/search", json={"query": "   "}, headers=h)
            assert r.status_code == 422 and "blank" in r.json()["detail"]
        with subtests.test("a method the route does not have"):
            r = await env.client.patch(BASE, json={}, headers=h)
            assert r.status_code == 405 and "GET" in r.headers["allow"]
        assert_nothing_written(env)


async def test_link_to_another_workspace_card_is_rejected(make_env):
    async with make_env() as env:
        env.workspace("acme")
        env.workspace("other")
        ha, hb = env.token("acme"), env.token("other")
        theirs = (await env.client.post("/api/workspaces/other/memory", json=CHURN_DEF,
                                        headers=hb)).json()["card"]
        r = await env.client.post("/api/workspaces/acme/memory", headers=ha, json=dict(
            ORDERS_RULE, links=[{"target": theirs["id"], "meaning": "steal"}]))
        assert r.status_code == 422
        assert "not a card of this workspace" in r.json()["detail"]
        # and at the database level, even as the runtime role with the right workspace set
        with psycopg.connect(env.migrator_url) as conn:
            mine = conn.execute(
                "INSERT INTO memory.cards (workspace_id, id, family, title, origin, content) "
                "VALUES ('acme', gen_random_uuid(), 'sql_rule', 't', 'manual', '{}') RETURNING id"
            ).fetchone()[0]
            conn.commit()
            conn.execute("SET ROLE memarc_runtime")
            conn.execute("SELECT set_config('memarc.workspace', 'acme', false)")
            try:
                conn.execute("INSERT INTO memory.card_links (workspace_id, source_id, target_id) "
                             "VALUES ('acme', %s, %s)", [mine, uuid.UUID(theirs["id"][4:])])
                raise AssertionError("cross-workspace link was accepted")
            except psycopg.errors.ForeignKeyViolation:
                conn.rollback()


async def test_openapi_document_lists_every_route(make_env):
    async with make_env() as env:
        r = await env.client.get("/schema/openapi.json")
        assert r.status_code == 200
        paths = r.json()["paths"]
        base = "/api/workspaces/{workspace_id}/memory"
        for suffix in ("", "/{card_id}", "/pending", "/search", "/{card_id}/retry", "/import"):
            assert base + suffix in paths
        assert set(paths[base + "/{card_id}"]) >= {"get", "put", "delete"}


async def test_a_write_that_waits_reports_current_in_the_card_too(make_env):
    """``?wait`` with a worker running: the answer's ``index_status`` and the card's own say the
    same (the card is read in the write's transaction, before its projection)."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        body = {"family": "sql_rule", "title": "Waited for", "content": {"rule": "r"}}
        async with env.running_worker():
            r = await env.client.post(BASE, json=body, headers=h, params={"wait": 20})
            assert r.status_code == 201, r.text
            assert r.json()["index_status"] == r.json()["card"]["index_status"] == "current"
            card = r.json()["card"]
            r = await env.client.put(f"{BASE}/{card['id']}", headers=h, params={"wait": 20},
                                     json={**body, "title": "Waited again", "revision": 1})
            assert r.status_code == 200, r.text
            assert r.json()["index_status"] == r.json()["card"]["index_status"] == "current"
