"""A schema dropped or altered under a running writer (issue 14): every route answers 503
``schema_outdated`` (problem details, the missing object named in the detail), never a 500, and
once the schema is back the same process serves again. Real PostgreSQL: the change is made with
the migrator's connection while the app runs (``make_env``)."""

from __future__ import annotations

import psycopg
import pytest

BASE = "/api/workspaces/acme/memory"
CARD = {"family": "sql_rule", "title": "Use order_date for bookings",
        "content": {"rule": "Bookings are counted by order_date, not ship_date."}}

#: (what is changed, the DDL that changes it, the DDL that restores it or None)
CHANGES = [
    ("cards renamed", "ALTER TABLE memory.cards RENAME TO cards_moved",
     "ALTER TABLE memory.cards_moved RENAME TO cards"),
    ("a column renamed", "ALTER TABLE memory.cards RENAME COLUMN title TO heading",
     "ALTER TABLE memory.cards RENAME COLUMN heading TO title"),
    ("links dropped", "DROP TABLE memory.card_links CASCADE", None),
    ("the schema renamed", "ALTER SCHEMA memory RENAME TO memory_moved",
     "ALTER SCHEMA memory_moved RENAME TO memory"),
    ("the schema dropped", "DROP SCHEMA memory CASCADE", None),
]


def _ddl(env, statement: str) -> None:
    with psycopg.connect(env.migrator_url, autocommit=True) as conn:
        conn.execute(statement)


async def _calls(env, h, card_id: str, revision: int) -> dict[str, object]:
    """List, get, search, create, update (of ``revision``) and the pending list:
    ``{route: response}``."""
    c = env.client
    return {
        "list": await c.get(BASE, headers=h),
        "get": await c.get(f"{BASE}/{card_id}", headers=h),
        "search": await c.post(f"{BASE}/search", headers=h, json={"query": "bookings"}),
        "create": await c.post(BASE, headers=h, json=CARD),
        "update": await c.put(f"{BASE}/{card_id}", headers=h, json={**CARD, "revision": revision}),
        "pending": await c.get(f"{BASE}/pending", headers=h),
    }


@pytest.mark.parametrize("change", CHANGES, ids=[c[0] for c in CHANGES])
async def test_a_schema_changed_after_start_up_is_a_503_with_a_code(make_env, change):
    what, ddl, restore = change
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme", "memory.manage", "memory.read")
        r = await env.client.post(BASE, headers=h, json=CARD)
        assert r.status_code == 201, r.text
        card_id = r.json()["card"]["id"]
        # every statement has run often enough to be prepared on the pooled connections
        for revision in range(1, 7):
            assert all(r.status_code < 300 for r in (await _calls(env, h, card_id, revision)).values())
        await env.drain()  # the card is current: recall reads its content
        r = await env.client.post(f"{BASE}/search", headers=h, json={"query": "bookings"})
        assert card_id in [x["card"]["id"] for x in r.json()["results"]], r.text
        _ddl(env, ddl)
        for route, r in (await _calls(env, h, card_id, 7)).items():
            if route == "pending" and r.status_code == 200:
                continue  # reads neither cards nor links: it may still answer
            assert r.status_code == 503, (what, route, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            problem = r.json()
            assert problem["code"] == "schema_outdated", (what, route, problem)
            assert "memarc migrate" in problem["detail"] and "does not exist" in problem["detail"]
        if what.startswith("the schema"):  # readiness reads the schema's migrations table
            r = await env.client.get("/readyz")
            assert r.status_code == 503 and r.json()["code"] == "schema_outdated", r.text
        if restore is None:
            return
        _ddl(env, restore)
        r = await env.client.get(f"{BASE}/{card_id}", headers=h)
        assert r.status_code == 200, r.text
        r = await env.client.post(BASE, headers=h, json={**CARD, "title": "Again"})
        assert r.status_code == 201, r.text


async def test_a_column_added_after_start_up_changes_nothing(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme", "memory.manage", "memory.read")
        r = await env.client.post(BASE, headers=h, json=CARD)
        card_id = r.json()["card"]["id"]
        r = await env.client.post(f"{BASE}/index", headers=h)
        assert r.status_code == 202, r.text
        rebuild = r.json()["id"]
        for _ in range(6):
            assert (await env.client.get(f"{BASE}/index/{rebuild}", headers=h)).status_code == 200
        _ddl(env, "ALTER TABLE memory.index_rebuilds ADD COLUMN note text")
        _ddl(env, "ALTER TABLE memory.cards ADD COLUMN note text")
        for route, r in (await _calls(env, h, card_id, 1)).items():
            assert r.status_code < 300, (route, r.text)
        r = await env.client.get(f"{BASE}/index/{rebuild}", headers=h)
        assert r.status_code == 200, r.text
