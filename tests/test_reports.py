"""The curation reports (issue 35 part 3, docs/usage.md "Curation reports"): cards never
recalled, cards marked unhelpful, and possible conflicts found with the workspace's index; over
the API (``memory.manage``: 403 without it, 404 for another workspace, 422 for a bound) and in
the administration (pages, ``.json`` and ``.csv`` downloads).

Recall records and feedback are seeded as the database owner (the feedback API is another
part of the issue); the cards are real, projected by a real worker with the real model, and the
conflicts come from the real index.
"""

from __future__ import annotations

import csv
import io
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
from admin_helpers import sign_in

BASE = "/api/workspaces/acme/memory"
REPORTS = f"{BASE}/reports"
CUSTOMERS = [{"database": "shop", "schema": "public", "table": "customers"}]
ORDERS = [{"database": "shop", "schema": "public", "table": "orders"}]

#: two definitions of one term over one table that disagree: the pair the report must put first
ACTIVE_30 = {"family": "domain_clarification", "title": "Active customer",
             "content": {"definition": "An active customer is a customer who placed at least "
                                       "one order in the last 30 days."},
             "scope": "sales", "dependencies": CUSTOMERS}
ACTIVE_90 = {"family": "domain_clarification", "title": "Active customer (90 days)",
             "content": {"definition": "An active customer is a customer who placed at least "
                                       "one order in the last 90 days."},
             "scope": "sales", "dependencies": CUSTOMERS}
#: the same rule twice, word for word: an exact duplicate, listed after the contradiction
CENTS_A = {"family": "sql_rule", "title": "Amounts are in cents",
           "content": {"rule": "Order amounts are stored in cents: divide amount by 100 for "
                               "euros."}, "dependencies": ORDERS}
CENTS_B = {"family": "sql_rule", "title": "Order amounts in cents",
           "content": {"rule": "Order amounts are stored in cents: divide amount by 100 for "
                               "euros."}, "dependencies": ORDERS}
#: near the active-customer definitions, but of another scope: no conflict
ACTIVE_SUPPORT = {"family": "domain_clarification", "title": "Active customer (support)",
                  "content": {"definition": "An active customer is a customer who placed at "
                                            "least one order in the last 60 days."},
                  "scope": "support", "dependencies": CUSTOMERS}
#: unrelated
CHURN = {"family": "domain_clarification", "title": "Churned account",
         "content": {"definition": "A churned account cancelled its subscription and has not "
                                   "renewed it within 14 days."}, "scope": "sales",
         "dependencies": [{"database": "shop", "schema": "public", "table": "subscriptions"}]}


async def _cards(env, *cards: dict, workspace: str = "acme") -> tuple[dict[str, str], list[str]]:
    """``workspace`` with ``cards``, projected; its manager's headers and the card ids."""
    env.workspace(workspace)
    h = env.token(workspace)
    ids = []
    for card in cards:
        r = await env.client.post(f"/api/workspaces/{workspace}/memory", json=card, headers=h)
        assert r.status_code == 201, r.text
        ids.append(r.json()["card"]["id"])
    await env.drain()
    return h, ids


def seed_recall(env, card_ids: list[str], days_ago: float, workspace: str = "acme") -> uuid.UUID:
    """A recall record of ``workspace`` made ``days_ago`` days ago that returned ``card_ids``
    in that order (as the database owner)."""
    rid = uuid.uuid4()
    with psycopg.connect(env.migrator_url) as conn:
        conn.execute(
            "INSERT INTO memory.recall_records (id, workspace_id, actor, mode, top, "
            "query_digest, card_ids, scores, excluded, timings, created_at) VALUES "
            "(%s, %s, 'token:test', 'search', 10, %s, %s, %s, 0, '{}', %s)",
            [rid, workspace, "sha256:" + "0" * 64, [uuid.UUID(c[4:]) for c in card_ids],
             [1.0 / (60 + i) for i in range(len(card_ids))],
             datetime.now(timezone.utc) - timedelta(days=days_ago)])
    return rid


def seed_feedback(env, recall_id: uuid.UUID, card_id: str, verdict: str, actor: str,
                  workspace: str = "acme") -> None:
    """A verdict on ``card_id`` in the recall ``recall_id`` (as the database owner)."""
    with psycopg.connect(env.migrator_url) as conn:
        conn.execute("INSERT INTO memory.recall_feedback (workspace_id, recall_id, card_id, "
                     "actor, verdict, via) VALUES (%s, %s, %s, %s, %s, 'api')",
                     [workspace, recall_id, uuid.UUID(card_id[4:]), actor, verdict])


def _ids(rows: list[dict]) -> list[str]:
    return [r["id"] for r in rows]


async def test_never_recalled_lists_the_cards_no_recall_of_the_window_returned(make_env):
    async with make_env() as env:
        h, (a, b, c, d) = await _cards(env, ACTIVE_30, CENTS_A, CHURN, ACTIVE_SUPPORT)
        seed_recall(env, [a], days_ago=2)
        seed_recall(env, [b, a], days_ago=40)
        r = await env.client.get(f"{REPORTS}/never-recalled", headers=h)
        assert r.status_code == 200, r.text
        page = r.json()
        # b was last returned 40 days ago: idle longest, first; c and d never (newest last)
        assert _ids(page["rows"]) == [b, c, d] and page["total"] == 3 and page["days"] == 30
        first = page["rows"][0]
        assert first["recalls"] == 0 and first["family"] == "sql_rule"
        age = datetime.now(timezone.utc) - datetime.fromisoformat(first["last_recalled"])
        assert timedelta(days=39.9) < age < timedelta(days=40.1)
        assert page["rows"][1]["last_recalled"] is None  # never since created
        # a wider window: b's recall 40 days ago counts
        r = await env.client.get(f"{REPORTS}/never-recalled", params={"days": 60}, headers=h)
        assert _ids(r.json()["rows"]) == [c, d]
        # filters: family and text, as the card list's
        r = await env.client.get(f"{REPORTS}/never-recalled",
                                 params={"family": "domain_clarification"}, headers=h)
        assert _ids(r.json()["rows"]) == [c, d]
        r = await env.client.get(f"{REPORTS}/never-recalled", params={"q": "SUPPORT"}, headers=h)
        assert _ids(r.json()["rows"]) == [d]
        # sort and pages
        r = await env.client.get(f"{REPORTS}/never-recalled",
                                 params={"sort": "title", "per_page": 2, "page": 2}, headers=h)
        body = r.json()
        # "Active customer (support)", "Amounts are in cents", "Churned account"
        assert body["total"] == 3 and _ids(body["rows"]) == [c]
        r = await env.client.get(f"{REPORTS}/never-recalled",
                                 params={"sort": "title", "desc": "true"}, headers=h)
        assert _ids(r.json()["rows"]) == [c, b, d]
        r = await env.client.get(f"{REPORTS}/never-recalled", params={"page": 9}, headers=h)
        assert r.json()["rows"] == [] and r.json()["total"] == 3


async def test_unhelpful_counts_verdicts_per_card_on_the_window(make_env):
    async with make_env() as env:
        h, (a, b, c) = await _cards(env, ACTIVE_30, CENTS_A, CHURN)
        r1 = seed_recall(env, [a, b], days_ago=1)
        r2 = seed_recall(env, [a, b, c], days_ago=3)
        old = seed_recall(env, [c], days_ago=45)
        seed_feedback(env, r1, a, "wrong", "token:x")
        seed_feedback(env, r1, a, "not_helpful", "token:y")
        seed_feedback(env, r2, a, "helpful", "token:x")
        seed_feedback(env, r1, b, "not_helpful", "token:x")
        seed_feedback(env, r2, b, "helpful", "token:y")
        seed_feedback(env, r2, c, "helpful", "token:x")
        seed_feedback(env, old, c, "wrong", "token:x")  # outside the 30-day window
        r = await env.client.get(f"{REPORTS}/unhelpful", headers=h)
        assert r.status_code == 200, r.text
        rows = r.json()["rows"]
        assert _ids(rows) == [a, b]
        assert {k: rows[0][k] for k in ("recalls", "helpful", "not_helpful", "wrong")} == \
            {"recalls": 2, "helpful": 1, "not_helpful": 1, "wrong": 1}
        assert {k: rows[1][k] for k in ("recalls", "helpful", "not_helpful", "wrong")} == \
            {"recalls": 2, "helpful": 1, "not_helpful": 1, "wrong": 0}
        r = await env.client.get(f"{REPORTS}/unhelpful", params={"min_feedback": 2}, headers=h)
        assert _ids(r.json()["rows"]) == [a] and r.json()["total"] == 1
        # the 60-day window counts c's old verdict
        r = await env.client.get(f"{REPORTS}/unhelpful", params={"days": 60}, headers=h)
        assert set(_ids(r.json()["rows"])) == {a, b, c}
        r = await env.client.get(f"{REPORTS}/unhelpful", params={"days": 60, "sort": "share"},
                                 headers=h)
        # a: 2 of its 3 verdicts unhelpful; b and c: 1 of 2 each (ties by id, descending too)
        assert _ids(r.json()["rows"]) == [a, *sorted([b, c], reverse=True)]
        r = await env.client.get(f"{REPORTS}/unhelpful", params={"family": "sql_rule"}, headers=h)
        assert _ids(r.json()["rows"]) == [b]


async def test_conflicts_puts_the_contradiction_first_then_the_duplicate(make_env):
    async with make_env() as env:
        h, (a30, a90, ca, cb, support, churn) = await _cards(
            env, ACTIVE_30, ACTIVE_90, CENTS_A, CENTS_B, ACTIVE_SUPPORT, CHURN)
        r = await env.client.get(f"{REPORTS}/conflicts", headers=h)
        assert r.status_code == 200, r.text
        page = r.json()
        pairs = page["pairs"]
        assert [(p["kind"], {p["a"]["id"], p["b"]["id"]}) for p in pairs] == [
            ("conflict", {a30, a90}), ("duplicate", {ca, cb})]
        first = pairs[0]
        assert first["family"] == "domain_clarification" and first["similarity"] >= 0.8
        assert first["values_differ"] is True and pairs[1]["values_differ"] is False
        assert first["same_term"] is True  # both define "an active customer"
        only = {first[s]["id"]: first[s]["only"] for s in ("a", "b")}
        assert only[a30] == ["30"] and only[a90] == ["90"]
        assert "same scope 'sales'" in first["why"]
        assert "same objects: shop.public.customers" in first["why"]
        texts = {first[s]["id"]: first[s]["text"] for s in ("a", "b")}
        assert ACTIVE_30["content"]["definition"] in texts[a30]
        assert ACTIVE_90["content"]["definition"] in texts[a90]
        assert pairs[1]["similarity"] > 0.99  # the same words
        assert page["compared"] == 6 and page["cached"] is False
        # the pairs are kept while nothing changes: the next page reads no index
        r = await env.client.get(f"{REPORTS}/conflicts", params={"per_page": 1, "page": 2},
                                 headers=h)
        assert r.json()["cached"] is True and r.json()["total"] == 2
        assert {r.json()["pairs"][0]["a"]["id"], r.json()["pairs"][0]["b"]["id"]} == {ca, cb}
        # filters: a family, a text that one card of a pair matches
        r = await env.client.get(f"{REPORTS}/conflicts", params={"family": "sql_rule"}, headers=h)
        assert [p["kind"] for p in r.json()["pairs"]] == ["duplicate"]
        r = await env.client.get(f"{REPORTS}/conflicts", params={"q": "90 days"}, headers=h)
        assert [{p["a"]["id"], p["b"]["id"]} for p in r.json()["pairs"]] == [{a30, a90}]
        # a similarity above every pair's lists none
        r = await env.client.get(f"{REPORTS}/conflicts", params={"min_similarity": 1.0},
                                 headers=h)
        assert all(p["kind"] == "duplicate" for p in r.json()["pairs"])
        # a change of the cards computes them again: delete one of the duplicates
        r = await env.client.delete(f"{BASE}/{cb}", headers=h)
        assert r.status_code == 200
        await env.drain()
        r = await env.client.get(f"{REPORTS}/conflicts", headers=h)
        assert r.json()["cached"] is False and r.json()["total"] == 1


async def test_reports_need_memory_manage_in_their_own_workspace(make_env):
    async with make_env() as env:
        h, _ = await _cards(env, CHURN)
        reader = env.token("acme", "memory.read")
        env.workspace("other")
        other = env.token("other")
        for name in ("never-recalled", "unhelpful", "conflicts"):
            r = await env.client.get(f"{REPORTS}/{name}", headers=reader)
            assert r.status_code == 403, (name, r.text)
            assert "memory.manage" in r.json()["detail"]
            r = await env.client.get(f"{REPORTS}/{name}", headers=other)
            assert r.status_code == 404, (name, r.text)
            r = await env.client.get(f"{REPORTS}/{name}", params={"sort": "nope"}, headers=h)
            assert r.status_code == 400, (name, r.text)
        for name, params in (("never-recalled", {"days": 0}), ("unhelpful", {"days": 4000}),
                             ("unhelpful", {"min_feedback": 0}),
                             ("conflicts", {"min_similarity": 0.2})):
            r = await env.client.get(f"{REPORTS}/{name}", params=params, headers=h)
            assert r.status_code == 422, (name, params, r.text)
            assert next(iter(params)) in r.text


async def test_the_administration_shows_each_report_with_json_and_csv(make_env):
    async with make_env() as env:
        h, (a30, a90, churn) = await _cards(env, ACTIVE_30, ACTIVE_90, CHURN)
        rid = seed_recall(env, [a30], days_ago=1)
        seed_feedback(env, rid, a30, "wrong", "token:x")
        client = env.client
        await sign_in(client, h)
        base = "/admin/workspaces/acme/reports"
        r = await client.get(f"{base}/never-recalled")
        assert r.status_code == 200, r.text
        assert "Churned account" in r.text and "never since created" in r.text
        assert 'href="/admin/workspaces/acme/reports/never-recalled.csv' in r.text
        r = await client.get(f"{base}/never-recalled.csv", params={"family": "domain_clarification"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
        assert "attachment" in r.headers["content-disposition"]
        rows = list(csv.DictReader(io.StringIO(r.text)))
        assert [row["id"] for row in rows] == [a90, churn]  # both idle since created, oldest first
        assert {row["last_recalled"] for row in rows} == {"never"}
        r = await client.get(f"{base}/never-recalled.json")
        assert r.status_code == 200 and r.json()["total"] == 2
        r = await client.get(f"{base}/unhelpful")
        assert r.status_code == 200 and "Active customer" in r.text
        r = await client.get(f"{base}/unhelpful.csv")
        assert list(csv.DictReader(io.StringIO(r.text)))[0]["wrong"] == "1"
        r = await client.get(f"{base}/conflicts")
        assert r.status_code == 200 and "Active customer (90 days)" in r.text
        assert f"/admin/workspaces/acme/cards/{a30}" in r.text
        assert "/admin/workspaces/acme/reports/merge?" in r.text
        r = await client.get(f"{base}/conflicts.json")
        assert r.json()["pairs"][0]["kind"] == "conflict"
        r = await client.get(f"{base}/conflicts.csv")
        row = next(csv.DictReader(io.StringIO(r.text)))
        assert {row["a_id"], row["b_id"]} == {a30, a90} and row["kind"] == "conflict"
        r = await client.get(f"{base}/merge", params={"a": a30, "b": a90})
        assert r.status_code == 200
        assert "last 30 days" in r.text and "last 90 days" in r.text
        assert f"/admin/workspaces/acme/cards/{a90}/delete" in r.text
        r = await client.get(f"{base}/never-recalled", params={"days": "0"})
        assert r.status_code == 422 and "days" in r.text
        # the navigation names the reports
        r = await client.get("/admin/workspaces/acme/cards")
        assert f'href="{base}/never-recalled"' in r.text


LEGACY = {"family": "sql_rule", "title": "Legacy orders are in lire",
          "content": {"rule": "Amounts of legacy_orders are in Italian lire."},
          "dependencies": [{"database": "shop", "schema": "public", "table": "legacy_orders"}]}
ARCHIVED = {"family": "sql_rule", "title": "Archived orders keep their state",
            "content": {"rule": "archive.old_orders keeps the state an order had when archived."},
            "dependencies": [{"database": "shop", "schema": "archive", "table": "old_orders"}]}


async def test_stale_dependencies_lists_the_tables_nothing_recent_showed_in_use(make_env):
    async with make_env() as env:
        h, (active, cents, churn, legacy, archived) = await _cards(
            env, ACTIVE_30, CENTS_A, CHURN, LEGACY, ARCHIVED)
        env.no_automatic_evaluations()
        # orders: a recall of 2 days ago returned its card; subscriptions: only one of 40 days
        seed_recall(env, [cents], 2)
        seed_recall(env, [churn], 40)
        # customers: a recall narrowed to the table (its filters) returned nothing
        with psycopg.connect(env.migrator_url) as conn:
            conn.execute(
                "INSERT INTO memory.recall_records (id, workspace_id, actor, mode, top, filters,"
                " query_digest, card_ids, scores, excluded, timings) VALUES (%s, 'acme',"
                " 'token:test', 'search', 10, %s, %s, '{}', '{}', 0, '{}')",
                [uuid.uuid4(), psycopg.types.json.Jsonb(
                    {"database": "shop", "table": "Customers"}), "sha256:" + "1" * 64])
        # shop.archive: a schema-change run covered the schema and kept old_orders
        r = await env.client.post("/api/workspaces/acme/schema-changes",
                                  headers=env.token("acme", "memory.schema"), json={
            "run_id": "r1", "database": "shop", "schema": "archive",
            "removed_tables": ["tmp_import"]})
        assert r.status_code == 200, r.text
        r = await env.client.get(f"{REPORTS}/stale-dependencies", headers=h)
        assert r.status_code == 200, r.text
        page = r.json()
        # never seen first, then the longest unseen; the tables seen within 30 days are not listed
        assert [(x["table"], x["seen_by"]) for x in page["rows"]] == [
            ("legacy_orders", None), ("subscriptions", "result")]
        assert page["total"] == 2 and page["days"] == 30
        assert page["rows"][0]["examples"] == [{"id": legacy, "title": LEGACY["title"]}]
        assert page["rows"][0]["last_seen"] is None
        seen = datetime.fromisoformat(page["rows"][1]["last_seen"])
        assert timedelta(days=39) < datetime.now(timezone.utc) - seen < timedelta(days=41)
        # a wider window: subscriptions was seen within it
        r = await env.client.get(f"{REPORTS}/stale-dependencies", headers=h,
                                 params={"days": 60, "sort": "table"})
        assert [x["table"] for x in r.json()["rows"]] == ["legacy_orders"]
        # a filter on the cards: only the tables of the matching cards
        r = await env.client.get(f"{REPORTS}/stale-dependencies", headers=h,
                                 params={"q": "Churned"})
        assert [x["table"] for x in r.json()["rows"]] == ["subscriptions"]
        # bounds and permissions, as the other reports
        r = await env.client.get(f"{REPORTS}/stale-dependencies", headers=h, params={"days": 0})
        assert r.status_code == 422 and r.json()["field"] == "days"
        r = await env.client.get(f"{REPORTS}/stale-dependencies",
                                 headers=env.token("acme", "memory.read"))
        assert r.status_code == 403
        # the administration's page and its CSV
        await sign_in(env.client, h)
        r = await env.client.get("/admin/workspaces/acme/reports/stale-dependencies")
        assert r.status_code == 200
        assert "shop.public.legacy_orders" in r.text and "never, in the kept records" in r.text
        assert "a recall returned one of its cards" in r.text
        r = await env.client.get("/admin/workspaces/acme/reports/stale-dependencies.csv")
        rows = list(csv.DictReader(io.StringIO(r.text)))
        assert [(x["table"], x["last_seen"]) for x in rows][0] == ("legacy_orders", "never")
