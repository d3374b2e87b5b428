"""Workspace isolation: tokens, ids and raw SQL under row-level security (DESIGN §8).

The exhaustive audit (every route, CLI command, explorer page, table and use case) is in
``test_isolation_audit.py``."""

from __future__ import annotations

import psycopg
import pytest

CARD = {"family": "domain_clarification", "title": "Active user",
        "content": {"definition": "A user with a session in the last 28 days."},
        "dependencies": [{"database": "app", "schema": "public", "table": "sessions"}],
        "concepts": ["engagement"]}


async def _seed(env) -> tuple[dict, dict, dict, dict]:
    env.workspace("wa")
    env.workspace("wb")
    ha, hb = env.token("wa", "memory.manage"), env.token("wb", "memory.manage")
    for h, ws in ((ha, "wa"), (hb, "wb")):  # a tracked rebuild row in each workspace
        assert (await env.client.post(f"/api/workspaces/{ws}/memory/index", headers=h)).status_code == 202
    a1 = (await env.client.post("/api/workspaces/wa/memory", json=CARD, headers=ha)).json()["card"]
    await env.client.post("/api/workspaces/wa/memory", headers=ha, json=dict(
        CARD, title="Active user (mobile)", links=[{"target": a1["id"], "meaning": "refines"}]))
    b1 = (await env.client.post("/api/workspaces/wb/memory", json=CARD, headers=hb)).json()["card"]
    await env.client.post("/api/workspaces/wb/memory", headers=hb, json=dict(
        CARD, title="Weekly active user", links=[{"target": b1["id"], "meaning": "refines"}]))
    await env.drain()
    return ha, hb, a1, b1


@pytest.mark.both_engines  # the leak test of issue 7: search results on both engines
async def test_other_workspace_tokens_and_ids_see_nothing(make_env):
    async with make_env() as env:
        ha, hb, a1, b1 = await _seed(env)
        # B's token on A's routes: 404 (the workspace does not exist for it), no data
        for method, path, body in [
            ("GET", "/api/workspaces/wa/memory", None),
            ("GET", f"/api/workspaces/wa/memory/{a1['id']}", None),
            ("PUT", f"/api/workspaces/wa/memory/{a1['id']}", dict(CARD, revision=1)),
            ("DELETE", f"/api/workspaces/wa/memory/{a1['id']}", None),
            ("GET", "/api/workspaces/wa/memory/pending", None),
            ("GET", "/api/workspaces/wa/memory/status", None),
            ("POST", f"/api/workspaces/wa/memory/{a1['id']}/retry", None),
            ("POST", "/api/workspaces/wa/memory/search", {"query": "active user"}),
            ("POST", "/api/workspaces/wa/memory", CARD),
            ("POST", "/api/workspaces/wa/memory/index", None),
            ("GET", "/api/workspaces/wa/memory/index", None),
        ]:
            r = await env.client.request(method, path, json=body, headers=hb)
            assert r.status_code == 404, (method, path, r.status_code, r.text)
            body = r.json()
            body.pop("instance")  # the caller's own request path
            assert a1["id"] not in str(body) and "Active user" not in str(body)
        # A's card id through B's own workspace: 404 exactly like a missing card
        r = await env.client.get(f"/api/workspaces/wb/memory/{a1['id']}", headers=hb)
        missing = await env.client.get("/api/workspaces/wb/memory/mem-00000000-0000-4000-8000-000000000000",
                                       headers=hb)
        assert r.status_code == missing.status_code == 404
        assert r.json()["code"] == missing.json()["code"] == "not_found"
        # B's search never returns A's cards
        r = await env.client.post("/api/workspaces/wb/memory/search", headers=hb,
                                  json={"query": "active user sessions"})
        ids = [x["card"]["id"] for x in r.json()["results"]]
        assert b1["id"] in ids and a1["id"] not in ids and len(ids) == 2
        # no token / bad token / missing permission
        r = await env.client.get("/api/workspaces/wa/memory")
        assert r.status_code == 401 and r.headers["content-type"].startswith("application/problem+json")
        r = await env.client.get("/api/workspaces/wa/memory", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401
        reader = env.token("wa", "memory.read")
        r = await env.client.get("/api/workspaces/wa/memory", headers=reader)
        assert r.status_code == 403
        r = await env.client.post("/api/workspaces/wa/memory/search", headers=reader,
                                  json={"query": "active user"})
        assert r.status_code == 200 and len(r.json()["results"]) == 2


async def test_runtime_role_cannot_write_into_another_workspace(make_env):
    async with make_env() as env:
        await _seed(env)
        with psycopg.connect(env.migrator_url) as conn:
            conn.execute("SET ROLE memarc_runtime")
            conn.execute("SELECT set_config('memarc.workspace', 'wa', false)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):  # RLS WITH CHECK
                conn.execute("INSERT INTO memory.cards (workspace_id, id, family, title, origin, content)"
                             " VALUES ('wb', gen_random_uuid(), 'sql_rule', 't', 'manual', '{}')")
            conn.rollback()
