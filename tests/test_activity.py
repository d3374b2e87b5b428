"""The activity log: every state change and every rejected attempt, per workspace."""

from __future__ import annotations

import pytest
from helpers import make_incompatible_collection

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
        for path in ("activity", "pending"):  # an offset past bigint names itself, not SQL
            r = await env.client.get(f"{BASE}/{path}", params={"offset": 10**20}, headers=h)
            assert r.status_code == 400 and "offset" in r.text, r.text


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
        # a prefix, not a LIKE pattern: "%" and "_" match themselves only
        for pattern in ("%", "_", "rej_cted", "%invalid"):
            r = await ds.client.get("/-/memory/acme/-/activity.json", cookies=alice,
                                    params={"outcome": pattern})
            assert r.status_code == 200 and r.json()["total"] == 0, (pattern, r.text)
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


async def _projection_records(env, h, card_id=None) -> list[dict]:
    params = {"verb": "project", **({"card_id": card_id} if card_id else {})}
    r = await env.client.get(f"{BASE}/activity", params=params, headers=h)
    assert r.status_code == 200, r.text
    return r.json()["activity"]


async def test_a_projection_the_privacy_filter_refuses_is_recorded_once_per_revision(make_env):
    """Issue 16: the worker's refusal is a state change with an activity record (actor
    ``worker``, verb ``project``, outcome ``privacy_refused``, the revision and the filter's
    message, never the card's text); a retried refusal is not recorded again, a new revision or
    a manual retry is."""
    async with make_env(privacy_max_chars=300, max_attempts=50) as env:
        env.workspace("acme")
        h = env.token("acme")
        secret = "password=Hunter2xyzzy"
        long_rule = {"family": "sql_rule", "title": "Long rule",
                     "content": {"rule": f"{secret} " + "invoice lines are summed per day. " * 12}}
        card = (await env.client.post(BASE, json=long_rule, headers=h)).json()["card"]
        short = (await env.client.post(BASE, json=CARD, headers=h)).json()["card"]
        await env.drain()
        records = await _projection_records(env, h)
        assert [(a["actor"], a["card_id"], a["outcome"]) for a in records] == [
            ("worker", card["id"], "privacy_refused")]
        detail = records[0]["detail"]
        assert detail["revision"] == 1
        assert detail["message"].startswith("privacy_filter_failed: privacy filter refused")
        assert "Hunter2xyzzy" not in str(records[0]) and "invoice lines" not in str(records[0])
        # the card that passed the filter is projected and has no such record
        shown = (await env.client.get(f"{BASE}/{short['id']}", headers=h)).json()["card"]
        assert shown["index_status"] == "current"
        assert await _projection_records(env, h, short["id"]) == []
        # the worker retries the same revision (more attempts, by its sweeps): no second record
        pending = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
        attempts = pending[0]["attempts"]
        await env.drain()
        pending = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
        assert [o["card_id"] for o in pending] == [card["id"]]
        assert pending[0]["attempts"] > attempts >= 1
        assert len(await _projection_records(env, h)) == 1
        # a new revision refused again is recorded again
        r = await env.client.put(f"{BASE}/{card['id']}", headers=h,
                                 json={**long_rule, "title": "Longer rule", "revision": 1})
        assert r.status_code == 200
        await env.drain()
        records = await _projection_records(env, h, card["id"])
        assert [(a["outcome"], a["detail"]["revision"]) for a in records] == [
            ("privacy_refused", 2), ("privacy_refused", 1)]
        # so is the refusal that follows a manual retry (its own record comes in between)
        assert (await env.client.post(f"{BASE}/{card['id']}/retry", headers=h)).status_code == 202
        await env.drain()
        body = (await env.client.get(f"{BASE}/activity", params={"card_id": card["id"]},
                                     headers=h)).json()
        assert [(a["verb"], a["outcome"]) for a in body["activity"][:3]] == [
            ("project", "privacy_refused"), ("retry", "ok"), ("project", "privacy_refused")]
        # the outcome filter finds them
        r = await env.client.get(f"{BASE}/activity", params={"outcome": "privacy_refused"},
                                 headers=h)
        assert r.json()["total"] == 3


@pytest.mark.both_engines  # the incompatible collection is made differently on each
async def test_a_projection_kept_pending_by_an_incompatible_index_is_recorded(make_env):
    """Issue 16: an operation the worker cannot complete because the collection has another
    layout stays pending and says so in the activity log, once per card and revision."""
    async with make_env(max_attempts=50) as env:
        env.workspace("acme")
        h = env.token("acme")
        old = (await env.client.post(BASE, json=CARD, headers=h)).json()["card"]
        await env.drain()
        await make_incompatible_collection(env.resources.index, "acme",
                                          recorded_in=env.migrator_url)
        new = (await env.client.post(BASE, headers=h, json={
            **CARD, "title": "Fiscal quarters", "content": {"rule": "Quarters start in April."}})
        ).json()["card"]
        await env.drain()
        shown = (await env.client.get(f"{BASE}/{new['id']}", headers=h)).json()
        assert shown["card"]["index_status"] == "pending"
        assert shown["open_operations"][0]["last_error"].startswith("collection ")
        records = await _projection_records(env, h)
        assert [(a["actor"], a["card_id"], a["outcome"], a["detail"]["revision"])
                for a in records] == [("worker", new["id"], "index_incompatible", 1)]
        assert records[0]["detail"]["message"].startswith("index_incompatible: collection ")
        await env.drain()  # another attempt, the same failure: no second record
        assert len(await _projection_records(env, h)) == 1
        assert await _projection_records(env, h, old["id"]) == []
        # the rebuild that recovers the collection projects the card; nothing more is recorded
        assert (await env.client.post(f"{BASE}/index", headers=h)).status_code == 202
        await env.drain()
        shown = (await env.client.get(f"{BASE}/{new['id']}", headers=h)).json()["card"]
        assert shown["index_status"] == "current"
        assert len(await _projection_records(env, h)) == 1
