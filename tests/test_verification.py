"""Verified recall: index points never answer on their own (DESIGN §5 step 2)."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from helpers import index_point

from shared.models import PROJECTION_FORMAT

pytestmark = pytest.mark.both_engines

BASE = "/api/workspaces/acme/memory"


def _rule(title: str, rule: str) -> dict:
    return {"family": "sql_rule", "title": title, "content": {"rule": rule}}


async def test_ghost_stale_and_old_format_points_are_never_returned(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        live = []
        for i in range(3):
            r = await env.client.post(BASE, headers=h, json=_rule(
                f"Fiscal week rule {i}", f"Fiscal weeks start on Monday; rule number {i}."))
            live.append(r.json()["card"])
        await env.drain()

        # 1. an orphan point (no card) that matches the query better than anything live
        ghost_id = uuid.uuid4()
        ghost = dict(live[0], id=f"mem-{ghost_id}", title="Fiscal week starts Monday ghost",
                     content={"rule": "Fiscal week starts on Monday. Fiscal week."})
        await index_point(env, ghost)
        # 2. a point for a live card carrying a different revision and a forged title
        forged = dict(live[1], title="FORGED fiscal week", revision=live[1]["revision"] + 1)
        await index_point(env, forged)

        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "fiscal week starts on Monday", "mode": "rules"})
        body = r.json()
        ids = [x["card"]["id"] for x in body["results"]]
        assert f"mem-{ghost_id}" not in ids
        assert live[1]["id"] not in ids  # its point does not match its PostgreSQL revision
        assert sorted(ids) == sorted([live[0]["id"], live[2]["id"]])
        assert body["excluded"] == 2
        assert all("FORGED" not in x["card"]["title"] for x in body["results"])
        # seeds are ranked among verified hits only
        assert [x["retrieval"]["seed_rank"] for x in body["results"]] == [1, 2]

        # 3. a recorded projection in an older format is excluded for every mode
        with psycopg.connect(env.migrator_url) as conn:
            conn.execute("UPDATE memory.projections SET format = %s WHERE card_id = %s",
                         [PROJECTION_FORMAT - 1, uuid.UUID(live[0]["id"][4:])])
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "fiscal week starts on Monday", "mode": "rules"})
        assert [x["card"]["id"] for x in r.json()["results"]] == [live[2]["id"]]
        shown = (await env.client.get(f"{BASE}/{live[0]['id']}", headers=h)).json()
        assert shown["card"]["index_status"] == "pending"


async def test_response_content_comes_from_postgresql(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        card = (await env.client.post(BASE, headers=h, json=_rule(
            "Currency conversion", "Convert amounts to EUR with the daily rate table."))).json()["card"]
        await env.drain()
        # overwrite the point's payload with the same revision but forged filter fields
        await index_point(env, dict(card, title="Currency conversion"), concepts=["forged"])
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "convert amounts to EUR", "mode": "rules"})
        res = r.json()["results"]
        assert len(res) == 1
        assert res[0]["card"]["concepts"] == [] and res[0]["card"]["content"] == card["content"]


async def test_dropped_hits_are_topped_up_from_the_index(make_env):
    """More ghosts than seeds: the next round excludes them and live cards still come back."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        live = (await env.client.post(BASE, headers=h, json=_rule(
            "Refund policy", "Refunds are negative revenue rows in the payments table."))).json()["card"]
        await env.drain()
        for i in range(25):  # seeds for top=1 are 20 per branch
            await index_point(env, dict(live, id=f"mem-{uuid.uuid4()}",
                                   title=f"Refund policy refunds payments {i}"))
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "refund policy refunds payments", "mode": "rules",
                                        "top": 1})
        body = r.json()
        assert [x["card"]["id"] for x in body["results"]] == [live["id"]]
        assert body["excluded"] == 25


async def test_filters_are_rechecked_in_postgresql(make_env):
    """A point whose payload claims to match the filters but whose card does not is dropped."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        card = (await env.client.post(BASE, headers=h, json=dict(
            _rule("Shipping cost rule", "Shipping cost is charged per parcel."),
            scope="Logistics",
            dependencies=[{"database": "db1", "schema": "public", "table": "parcels"}]))).json()["card"]
        await env.drain()
        await index_point(env, card, scope="Finance", concepts=["money"],
                     deps=[{"database": "db2", "schema": "public", "table": None, "column": None}])
        for filters in ({"scope": "Finance"}, {"concepts": ["money"]}, {"database": "db2"}):
            r = await env.client.post(f"{BASE}/search", headers=h, json={
                "query": "shipping cost per parcel", "mode": "rules", "filters": filters})
            assert r.json()["results"] == [] and r.json()["excluded"] == 1, filters
