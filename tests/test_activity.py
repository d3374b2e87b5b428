"""The activity log: every state change and every rejected attempt, per workspace."""

from __future__ import annotations

BASE = "/api/workspaces/acme/memory"
CARD = {"family": "sql_rule", "title": "Fiscal year starts in April",
        "content": {"rule": "The fiscal year starts on April 1st."}}


async def test_activity_records_changes_and_rejections(make_env):
    async with make_env() as env:
        env.workspace("acme")
        env.workspace("other")
        h = env.token("acme")
        card = (await env.client.post(BASE, json=CARD, headers=h)).json()["card"]
        r = await env.client.post(BASE, json={**CARD, "title": " "}, headers=h)
        assert r.status_code == 422
        r = await env.client.put(f"{BASE}/{card['id']}", json={**CARD, "revision": 1}, headers=h)
        assert r.status_code == 200
        r = await env.client.put(f"{BASE}/{card['id']}", json={**CARD, "revision": 1}, headers=h)
        assert r.status_code == 409
        assert (await env.client.delete(f"{BASE}/{card['id']}", headers=h)).status_code == 200

        body = (await env.client.get(f"{BASE}/activity", headers=h)).json()
        got = [(a["verb"], a["outcome"]) for a in body["activity"]]
        assert got == [("delete", "ok"), ("update", "rejected:stale_revision"), ("update", "ok"),
                       ("create", "rejected:invalid_input"), ("create", "ok")]
        assert body["total"] == 5
        assert all(a["actor"].startswith("token:") for a in body["activity"])
        assert body["activity"][0]["card_id"] == card["id"]
        rejected = (await env.client.get(f"{BASE}/activity", params={"outcome": "rejected"},
                                         headers=h)).json()
        assert rejected["total"] == 2
        by_card = (await env.client.get(f"{BASE}/activity", params={"card_id": card["id"]},
                                        headers=h)).json()
        assert by_card["total"] == 4  # the rejected create had no card yet
        # another workspace's token sees nothing; a reader cannot list activity
        r = await env.client.get(f"{BASE}/activity", headers=env.token("other"))
        assert r.status_code == 404
        r = await env.client.get(f"{BASE}/activity", headers=env.token("acme", "memory.read"))
        assert r.status_code == 403
        r = await env.client.get(f"{BASE}/activity", params={"card_id": "nope"}, headers=h)
        assert r.status_code == 422


async def test_explorer_lists_activity_only_to_permitted_actors(make_env):
    from datasette.app import Datasette

    async with make_env() as env:
        env.workspace("acme")
        env.workspace("other")
        h = env.token("acme")
        await env.client.post(BASE, json=CARD, headers=h)
        await env.client.post(BASE, json={**CARD, "title": ""}, headers=h)
        ds = Datasette(memory=False, metadata={"plugins": {"memarc-explorer": {
            "database_url": env.settings.database_url, "workspaces": {"alice": ["acme"]}}}})
        ds.memarc_resources = env.resources
        alice = {"ds_actor": ds.sign({"a": {"id": "alice"}}, "actor")}
        r = await ds.client.get("/-/memory/acme/-/activity", cookies=alice)
        assert r.status_code == 200 and "rejected:invalid_input" in r.text and "2 records" in r.text
        r = await ds.client.get("/-/memory/acme/-/activity.json?outcome=rejected", cookies=alice)
        assert r.json()["total"] == 1
        r = await ds.client.get("/-/memory/acme/-/activity.csv", cookies=alice)
        assert r.status_code == 200 and r.text.count("\n") == 3
        import csv
        import io
        import json

        rows = list(csv.DictReader(io.StringIO(r.text)))
        details = [json.loads(row["detail"]) for row in rows if row["detail"]]
        assert details and all(isinstance(d, dict) for d in details)  # JSON, not Python repr
        r = await ds.client.get("/-/memory/other/-/activity", cookies=alice)
        assert r.status_code == 404
