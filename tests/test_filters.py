"""Recall filters (DESIGN §5): applied in both index branches and re-checked in PostgreSQL."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.both_engines

BASE = "/api/workspaces/acme/memory"
TEXT = "Revenue recognition: book revenue when the order ships."


def _card(title, **kw):
    return {"family": "sql_rule", "title": title, "content": {"rule": f"{title}. {TEXT}"}, **kw}


CARDS = {
    "two_entries": _card("Two entries", dependencies=[
        {"database": "db1", "schema": "s", "table": "orders", "column": "id"},
        {"database": "db1", "schema": "s", "table": "customers", "column": "name"}]),
    "db_only": _card("Database only", dependencies=[{"database": "db1"}]),
    "orders_table": _card("Orders table", dependencies=[
        {"database": "db1", "schema": "s", "table": "orders"}]),
    "orders_name": _card("Orders name column", dependencies=[
        {"database": "db1", "schema": "s", "table": "orders", "column": "name"}]),
    "other_db": _card("Other database", dependencies=[{"database": "db2", "schema": "s"}]),
    "workspace_wide": _card("Workspace wide"),
    "sales": _card("Sales scoped", scope="Sales", concepts=["revenue", "finance"]),
    "sales_lower": _card("sales lower scoped", scope="sales", concepts=["revenue"]),
    "sales_emea": _card("Sales EMEA scoped", scope="Sales EMEA"),
}


@pytest.fixture
def seeded(make_env):
    async def seed(env):
        env.workspace("acme")
        h = env.token("acme")
        ids = {}
        for key, body in CARDS.items():
            r = await env.client.post(BASE, json=body, headers=h)
            assert r.status_code == 201, r.text
            ids[r.json()["card"]["id"]] = key
        await env.drain()
        return h, ids
    return seed


async def _keys(env, h, ids, filters, status=200, token=None):
    r = await env.client.post(f"{BASE}/search", headers=token or h, json={
        "query": "revenue recognition order ships", "mode": "rules", "top": 50, "filters": filters})
    assert r.status_code == status, r.text
    return {ids[x["card"]["id"]] for x in r.json()["results"]} if status == 200 else r.json()


async def test_physical_context_is_satisfied_by_one_dependency_entry(make_env, seeded):
    async with make_env() as env:
        h, ids = await seeded(env)
        unscoped = {"workspace_wide", "sales", "sales_lower", "sales_emea"}
        got = await _keys(env, h, ids, {"database": "db1", "schema": "s", "table": "orders",
                                        "column": "name"})
        assert "two_entries" not in got  # never pieced together from two entries
        assert got == {"db_only", "orders_table", "orders_name"} | unscoped
        got = await _keys(env, h, ids, {"database": "db1", "schema": "s", "table": "orders"})
        assert got == {"two_entries", "db_only", "orders_table", "orders_name"} | unscoped
        # without a table filter, table-specific cards of the database stay discoverable
        got = await _keys(env, h, ids, {"database": "db1"})
        assert got == {"two_entries", "db_only", "orders_table", "orders_name"} | unscoped
        got = await _keys(env, h, ids, {"database": "db2"})
        assert got == {"other_db"} | unscoped
        # a physical filter with a gap is refused
        err = await _keys(env, h, ids, {"database": "db1", "column": "name"}, status=422)
        assert "filters.table" in err["detail"]


async def test_scope_is_exact_and_concepts_are_all_required(make_env, seeded):
    async with make_env() as env:
        h, ids = await seeded(env)
        assert await _keys(env, h, ids, {"scope": "Sales"}) == {"sales"}
        assert await _keys(env, h, ids, {"scope": "sales"}) == {"sales_lower"}
        assert await _keys(env, h, ids, {"concepts": ["revenue"]}) == {"sales", "sales_lower"}
        assert await _keys(env, h, ids, {"concepts": ["revenue", "finance"]}) == {"sales"}
        assert await _keys(env, h, ids, {"concepts": ["revenue", "missing"]}) == set()


async def test_a_bound_token_cannot_widen_its_binding(make_env, seeded):
    async with make_env() as env:
        h, ids = await seeded(env)
        bound = env.token("acme", "memory.read", database="db2", db_schema="s")
        got = await _keys(env, h, ids, {}, token=bound)
        assert got == {"other_db", "workspace_wide", "sales", "sales_lower", "sales_emea"}
        err = await _keys(env, h, ids, {"database": "db1"}, status=403, token=bound)
        assert err["code"] == "forbidden" and "db2" in err["detail"]
        err = await _keys(env, h, ids, {"database": "db2", "schema": "other"}, status=403,
                          token=bound)
        assert err["code"] == "forbidden"


async def test_exclusions_and_mode_families(make_env, seeded):
    async with make_env() as env:
        h, ids = await seeded(env)
        by_key = {v: k for k, v in ids.items()}
        r = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "revenue recognition", "mode": "rules", "top": 50,
            "exclude": [by_key["sales"], by_key["db_only"]]})
        got = {ids[x["card"]["id"]] for x in r.json()["results"]}
        assert got == set(CARDS) - {"sales", "db_only"}
        r = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "revenue recognition", "mode": "solved"})
        assert r.json()["results"] == []
        r = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "revenue", "mode": "rules", "family": ["domain_clarification"]})
        assert r.status_code == 422 and "does not return" in r.json()["detail"]
        for body in ({"query": "x", "top": 0}, {"query": "x", "top": 101}, {"query": ""},
                     {"query": "x", "mode": "everything"}, {"query": "x" * 2001},
                     {"query": "x", "exclude": ["not-an-id"]}):
            r = await env.client.post(f"{BASE}/search", headers=h, json=body)
            assert r.status_code in (400, 422), body
            assert r.headers["content-type"].startswith("application/problem+json")
