"""Erasure (issue 16, DESIGN §2): a deleted card's content does not outlive it anywhere in the
archive. Session proposals and review receipts keep their ids, counts and actions and lose the
content, in the deletion's transaction. Checked by reading every text, jsonb and array column of
every table of the archive schema, and the index's payloads. Real services, no mocks."""

from __future__ import annotations

import uuid

import psycopg
from psycopg import sql

MEM = "/api/workspaces/acme/memory"
SESSION = "/api/workspaces/acme/sessions"
#: a string that appears only in the card under test (title, content, scope, concepts, rationale)
MARK = "Zorblatt7731"
APPROVED = [{"id": "d-1", "status": "approved"}]


def proposal(key: str = "k1", **kw):
    return {"key": key, "family": "domain_clarification", "title": f"{MARK} customer",
            "content": {"definition": f"A {MARK} customer bought twice in a week.",
                        "context": f"Only for the {MARK} programme."},
            "scope": f"loyalty {MARK}", "concepts": [f"concept-{MARK}"],
            "decisions": APPROVED, "rationale": f"The analyst defined {MARK} in the session.",
            **kw}


def holders(migrator_url: str, needle: str) -> dict[str, int]:
    """``{"table.column": rows}`` of every text-like column (text, varchar, jsonb, json,
    arrays) of every table of schema ``memory`` whose value contains ``needle``, read as the
    database owner's superuser login (no row-level security)."""
    found: dict[str, int] = {}
    with psycopg.connect(migrator_url) as conn:
        columns = conn.execute(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c"
            " JOIN information_schema.tables t USING (table_schema, table_name)"
            " WHERE c.table_schema = 'memory' AND t.table_type = 'BASE TABLE'"
            " AND (c.data_type IN ('text', 'character varying', 'jsonb', 'json', 'ARRAY'))"
            " ORDER BY 1, 2").fetchall()
        assert len(columns) > 40  # the whole archive, not a few tables
        for table, column in columns:
            n = conn.execute(sql.SQL("SELECT count(*) FROM memory.{} WHERE {}::text LIKE %s")
                             .format(sql.Identifier(table), sql.Identifier(column)),
                             [f"%{needle}%"]).fetchone()[0]
            if n:
                found[f"{table}.{column}"] = n
    return found


async def test_a_deleted_cards_content_is_erased_from_proposals_and_receipts(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hm, hp, hr = (env.token("acme", "memory.manage"), env.token("acme", "memory.propose"),
                      env.token("acme", "memory.review"))
        other = (await env.client.post(MEM, headers=hm, json={
            "family": "sql_rule", "title": "Count orders once",
            "content": {"rule": "Use count(DISTINCT order_id)."}})).json()["card"]
        # session s1: the card is proposed, reviewed and created, next to an unrelated proposal
        r = await env.client.post(f"{SESSION}/s1/proposals", headers=hp, json={"proposals": [
            proposal(), {"key": "k2", "family": "sql_rule", "title": "Weekly grain",
                         "content": {"rule": "Group by ISO week."}, "decisions": APPROVED}]})
        assert r.status_code == 201, r.text
        r = await env.client.post(f"{SESSION}/s1/review", headers=hr, json={
            "review_id": "rv-1", "selected": [{"key": "k1"}, {"key": "k2"}]})
        assert r.status_code == 200, r.text
        items = {i["key"]: i for i in r.json()["items"]}
        card_id = items["k1"]["card_id"]
        # session s2 (not reviewed): an update of that card, and an addition reusing it exactly
        card = (await env.client.get(f"{MEM}/{card_id}", headers=hm)).json()["card"]
        r = await env.client.post(f"{SESSION}/s2/proposals", headers=hp, json={"proposals": [
            {"key": "u1", "kind": "update", "card_id": card_id, "revision": card["revision"],
             "content": {"definition": f"A {MARK} customer bought three times."},
             "decisions": APPROVED},
            proposal("again", title=card["title"]),
            {"key": "keep", "family": "sql_rule", "title": "Keep me",
             "content": {"rule": "Dates are UTC."}, "decisions": APPROVED}]})
        assert r.status_code == 201, r.text
        assert {p["key"]: p["action"] for p in r.json()["proposals"]}["again"] == "reuse"
        await env.drain()
        before = holders(env.migrator_url, MARK)
        # the check sees the content where it lives (it is not vacuous)
        assert {"cards.title", "cards.content", "cards.scope", "session_proposals.proposal",
                "review_receipts.result"} <= set(before), before
        points = await env.resources.index.scroll_ids("acme")
        assert uuid.UUID(card_id[4:]) in points

        r = await env.client.delete(f"{MEM}/{card_id}", headers=hm)
        assert r.status_code == 200, r.text
        assert holders(env.migrator_url, MARK) == {}  # nowhere in PostgreSQL
        await env.drain()
        points = await env.resources.index.scroll_ids("acme")
        assert uuid.UUID(card_id[4:]) not in points
        assert all(MARK not in str(p) for p in points.values())  # nor in the index

        # the receipt keeps ids, counts and actions; the summaries say what is left
        summary = (await env.client.get(f"{SESSION}/s1/summary", headers=hr)).json()
        receipt_items = {i["key"]: i for i in summary["review"]["items"]}
        assert receipt_items["k1"] == {**items["k1"], "title": "", "erased": True}
        assert receipt_items["k2"] == items["k2"] and "erased" not in items["k2"]
        shown = {p["key"]: p for p in summary["proposals"]}
        assert shown["k1"]["erased"] and shown["k1"]["card"] is None
        assert shown["k1"]["reviewed"] == "created" and shown["k1"]["card_id"] == card_id
        assert shown["k1"]["decisions"] == APPROVED
        assert not shown["k2"]["erased"] and shown["k2"]["card"]["title"] == "Weekly grain"
        assert summary["counts"]["total"] == 2 and summary["counts"]["erased"] == 1
        s2 = (await env.client.get(f"{SESSION}/s2/summary", headers=hr)).json()
        assert {p["key"]: p["erased"] for p in s2["proposals"]} == {
            "u1": True, "again": True, "keep": False}
        # an erased key cannot be filled again; the rest of the session is reviewable
        r = await env.client.post(f"{SESSION}/s2/proposals", headers=hp,
                                  json={"proposals": [proposal("u1")]})
        assert r.status_code == 409 and r.json()["item"] == "u1"
        r = await env.client.post(f"{SESSION}/s2/review", headers=hr, json={
            "review_id": "rv-2", "selected": [{"key": "keep"}]})
        assert r.status_code == 200, r.text
        # the replay of the first review returns the erased receipt, and recreates nothing
        r = await env.client.post(f"{SESSION}/s1/review", headers=hr, json={
            "review_id": "rv-1", "selected": [{"key": "k1"}, {"key": "k2"}]})
        assert r.status_code == 200 and r.headers["idempotent-replayed"] == "true"
        assert (await env.client.get(f"{MEM}/{card_id}", headers=hm)).status_code == 404
        assert holders(env.migrator_url, MARK) == {}
        # another card is untouched
        assert (await env.client.get(f"{MEM}/{other['id']}", headers=hm)).status_code == 200


async def test_a_schema_cleanup_erases_the_content_of_the_cards_it_deletes(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hp, hr, hs = (env.token("acme", "memory.propose"), env.token("acme", "memory.review"),
                      env.token("acme", "memory.schema"))
        dep = [{"database": "shop", "schema": "public", "table": "orders"}]
        r = await env.client.post(f"{SESSION}/s1/proposals", headers=hp, json={
            "proposals": [proposal(dependencies=dep)]})
        assert r.status_code == 201, r.text
        r = await env.client.post(f"{SESSION}/s1/review", headers=hr, json={
            "review_id": "rv-1", "selected": [{"key": "k1"}]})
        assert r.status_code == 200 and MARK in r.text
        assert "review_receipts.result" in holders(env.migrator_url, MARK)
        r = await env.client.post("/api/workspaces/acme/schema-changes", headers=hs, json={
            "run_id": "sync-1", "database": "shop", "schema": "public",
            "removed_tables": ["orders"]})
        assert r.status_code == 200 and len(r.json()["deleted"]) == 1, r.text
        assert holders(env.migrator_url, MARK) == {}
