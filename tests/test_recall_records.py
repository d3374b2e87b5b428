"""Recall records (issue 35 part 1, migration 026, docs/usage.md): every recall a caller asks
answers a ``recall_id`` and leaves a bounded record in PostgreSQL (mode, filters, the cards
returned with rank and score, timings, the query as the privacy filter left it, or its digest
only), isolated by workspace; an evaluation run writes none; the worker's sweep purges the
records past their retention in batches; a record PostgreSQL refuses is counted as lost in
``/metrics`` and the recall answers all the same.

Through the writer app, the explorer's recall page, a real worker, PostgreSQL, Redis, the
embedded index and the real embedding model.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.rows import dict_row
from test_explorer import explorer, get  # noqa: F401
from test_metrics import scrape, value

from shared import worker
from shared.archive import review_context
from shared.auth import Principal
from shared.archive.recall_records import query_digest
from shared.metrics import RECALL_STAGES

BASE = "/api/workspaces/acme/memory"
RULE = {"family": "sql_rule", "title": "Fiscal year starts in April",
        "content": {"rule": "The fiscal year starts on April 1st, not in January."},
        "concepts": ["finance"],
        "dependencies": [{"database": "shop", "schema": "public", "table": "orders"}]}
DEFINITION = {"family": "domain_clarification", "title": "Fiscal quarter",
              "content": {"definition": "A fiscal quarter is three months of the fiscal year, "
                                        "the first one starting in April."},
              "concepts": ["finance"]}
SECRET = "password=hunter2secret"
QUERY = f"When does the fiscal year start? {SECRET}"


async def _archive(env, workspace: str = "acme") -> tuple[dict[str, str], list[str]]:
    """``workspace`` with the rule and the definition, projected; its manager's headers and
    the two card ids."""
    env.workspace(workspace)
    h = env.token(workspace)
    ids = []
    for card in (RULE, DEFINITION):
        r = await env.client.post(f"/api/workspaces/{workspace}/memory", json=card, headers=h)
        assert r.status_code == 201, r.text
        ids.append(r.json()["card"]["id"])
    await env.drain()
    return h, ids


def records(env, workspace: str | None = None) -> list[dict]:
    """The recall records, oldest first, as the database owner (no row-level security)."""
    with psycopg.connect(env.migrator_url, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT * FROM memory.recall_records WHERE %(ws)s::text IS NULL"
            " OR workspace_id = %(ws)s ORDER BY created_at, id", {"ws": workspace}).fetchall()


def as_role(env, role: str, workspace: str, query: str) -> list[tuple]:
    """``query``'s rows as ``role`` in ``workspace`` (row-level security on)."""
    with psycopg.connect(env.migrator_url) as conn:
        conn.execute(f"SET ROLE {role}")
        conn.execute("SELECT set_config('memarc.workspace', %s, false)", [workspace])
        return conn.execute(query).fetchall()


async def test_a_recall_answers_its_recall_id_and_records_what_it_returned(make_env):
    async with make_env() as env:
        h, (rule, _) = await _archive(env)
        token_id = env.scalar("SELECT id FROM memory.api_tokens ORDER BY created_at DESC LIMIT 1")
        before, _ = await scrape(env)
        body = {"query": QUERY, "top": 5, "mode": "search", "family": ["sql_rule",
                "domain_clarification"], "filters": {"concepts": ["finance"], "database": "shop"},
                "session": "s1"}
        r = await env.client.post(f"{BASE}/search", json=body, headers=h)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["results"] and answer["results"][0]["card"]["id"] == rule
        recall_id = str(uuid.UUID(answer["recall_id"]))
        [row] = records(env)
        assert str(row["id"]) == recall_id and row["workspace_id"] == "acme"
        assert row["actor"] == f"token:{token_id}" and row["session_id"] == "s1"
        assert (row["mode"], row["top"]) == ("search", 5)
        assert row["families"] == ["sql_rule", "domain_clarification"]
        assert row["filters"] == {"concepts": ["finance"], "database": "shop"}
        # the cards in rank order with their scores, as answered
        assert [f"mem-{c}" for c in row["card_ids"]] == [x["card"]["id"] for x in answer["results"]]
        assert row["scores"] == [x["score"] for x in answer["results"]]
        assert row["excluded"] == answer["excluded"]
        # the query as the privacy filter left it, and its digest
        assert "hunter2secret" not in row["query_text"] and "[REDACTED:" in row["query_text"]
        assert row["query_text"].startswith("When does the fiscal year start?")
        assert row["query_digest"] == query_digest(row["query_text"])
        assert set(row["timings"]) == {*RECALL_STAGES, "total"}
        assert row["timings"]["total"] >= row["timings"]["embed"] > 0
        after, text = await scrape(env)
        assert value(after, "memarc_recall_records_total") == \
            value(before, "memarc_recall_records_total") + 1
        assert value(after, "memarc_recall_records_lost_total") == 0
        assert SECRET not in text

        # each recall its own record; the same question asked again has the same digest
        again = (await env.client.post(f"{BASE}/search", json={"query": QUERY.upper()},
                                       headers=h)).json()
        assert again["recall_id"] not in (None, recall_id)
        first, second = records(env)
        assert second["query_digest"] == first["query_digest"]
        assert (second["session_id"], second["families"], second["filters"]) == (None, None, {})


async def test_with_the_query_text_off_a_record_keeps_its_digest_only(make_env):
    async with make_env(recall_query_text=False) as env:
        h, _ = await _archive(env)
        r = await env.client.post(f"{BASE}/search", json={"query": QUERY}, headers=h)
        assert r.status_code == 200 and r.json()["recall_id"]
        [row] = records(env)
        assert row["query_text"] is None
        # the digest of the filtered text: a secret in the question is not in its digest either
        redacted = env.resources.privacy.redact(QUERY)
        assert row["query_digest"] == query_digest(redacted) != query_digest(QUERY)


async def test_another_workspace_cannot_read_a_record_nor_write_one(make_env):
    async with make_env() as env:
        h, _ = await _archive(env)
        env.workspace("other")
        r = await env.client.post(f"{BASE}/search", json={"query": QUERY}, headers=h)
        recall_id = r.json()["recall_id"]
        select = "SELECT id::text FROM memory.recall_records"
        assert as_role(env, "memarc_reader", "acme", select) == [(recall_id,)]
        assert as_role(env, "memarc_reader", "other", select) == []
        assert as_role(env, "memarc_reader", "", select) == []
        # the runtime role reads its own workspace's records (feedback and the reports check
        # them, migration 027), never another's, and can neither change nor delete one
        assert as_role(env, "memarc_runtime", "acme", select) == [(recall_id,)]
        assert as_role(env, "memarc_runtime", "other", select) == []
        for change in ("UPDATE memory.recall_records SET top = 2 RETURNING 1",
                       "DELETE FROM memory.recall_records RETURNING 1"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                as_role(env, "memarc_runtime", "acme", change)
        # nor can a runtime transaction of another workspace write one for acme
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            as_role(env, "memarc_runtime", "other",
                    "INSERT INTO memory.recall_records (id, workspace_id, actor, mode, top,"
                    " query_digest, card_ids, scores, excluded, timings) VALUES"
                    f" (gen_random_uuid(), 'acme', 'x', 'search', 1, 'sha256:{'0' * 64}',"
                    " '{}', '{}', 0, '{}') RETURNING 1")


async def test_the_explorer_recall_page_is_recorded_under_its_actor(make_env, explorer):
    async with make_env() as env:
        await _archive(env)
        ds = explorer(env, {"alice": ["acme"]})
        r = await get(ds, "/-/memory/acme/-/recall", q="fiscal year start", mode="rules")
        assert r.status_code == 200 and "1 result" in r.text
        [row] = records(env)
        assert (row["actor"], row["mode"], row["query_text"]) == (
            "datasette:alice", "rules", "fiscal year start")


async def test_an_evaluation_run_and_the_review_neighbours_write_no_record(make_env):
    async with make_env() as env:
        env.no_automatic_evaluations()
        h, (rule, definition) = await _archive(env)
        r = await env.client.post(BASE, headers=h, json={
            "family": "solved_question", "title": "Orders of the fiscal year",
            "content": {"question": "How many orders in the current fiscal year?",
                        "sql": "SELECT count(*) FROM orders WHERE ordered_at >= '2024-04-01'"},
            "dependencies": [{"database": "shop", "schema": "public", "table": "orders"}],
            "links": [{"target": rule, "meaning": "uses the rule"},
                      {"target": definition, "meaning": "uses the definition"}]})
        assert r.status_code == 201, r.text
        await env.drain()
        r = await env.client.post(f"{BASE}/evaluations", headers=h)
        assert r.status_code == 202, r.text
        await env.drain()
        run = (await env.client.get(f"{BASE}/evaluations/{r.json()['id']}", headers=h)).json()
        assert run["status"] == "done" and run["total"] >= 3, run
        assert records(env) == []
        # the review page's neighbours are the archive's own recalls: no record either
        propose = env.token("acme", "memory.propose")
        r = await env.client.post("/api/workspaces/acme/sessions/s1/proposals", headers=propose,
                                  json={"proposals": [{"key": "k1", "kind": "addition",
                                                       "decisions": [{"id": "d1",
                                                                      "status": "approved"}],
                                                       "family": "sql_rule",
                                                       "title": "Fiscal year in April",
                                                       "content": {"rule": "April first."}}]})
        assert r.status_code == 201, r.text
        archive = env.resources.archive()
        reviewer = Principal(workspace="acme", permissions=frozenset({"memory.review"}),
                             actor="reviewer")
        summary = await archive.workflow.summary(reviewer, "acme", "s1")
        nearby = await review_context.neighbours(archive, reviewer, "acme", summary)
        assert nearby.available and nearby.items["k1"].similar
        assert records(env) == []


async def test_the_sweep_purges_records_past_their_retention_in_batches(make_env, monkeypatch):
    async with make_env(recall_retention_days=30) as env:
        h, _ = await _archive(env)
        for i in range(4):
            r = await env.client.post(f"{BASE}/search", json={"query": f"fiscal year {i}"},
                                      headers=h)
            assert r.json()["recall_id"]
        old = [str(row["id"]) for row in records(env)][:3]
        with psycopg.connect(env.migrator_url) as conn:
            conn.execute("UPDATE memory.recall_records SET created_at = now() - interval '31 days'"
                         " WHERE id = ANY(%s::uuid[])", [old])
        # a batch at a time, and no more batches than a sweep runs
        monkeypatch.setattr(worker, "RECALL_PURGE_BATCH", 1)
        monkeypatch.setattr(worker, "RECALL_PURGE_BATCHES", 2)
        assert await worker.purge_recall_records(env.resources) == 2
        assert len(records(env)) == 2
        # the worker's sweep deletes the rest past retention, and only those
        await env.drain()
        [kept] = records(env)
        assert str(kept["id"]) not in old


async def test_a_record_postgresql_refuses_is_counted_lost_and_the_recall_answers(make_env):
    async with make_env() as env:
        h, (rule, _) = await _archive(env)
        before, _ = await scrape(env)
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            conn.execute("REVOKE INSERT ON memory.recall_records FROM memarc_runtime")
        r = await env.client.post(f"{BASE}/search", json={"query": QUERY}, headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["recall_id"] is None and r.json()["results"][0]["card"]["id"] == rule
        # the table gone altogether: the same
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            conn.execute("DROP TABLE memory.recall_records CASCADE")
        r = await env.client.post(f"{BASE}/search", json={"query": QUERY}, headers=h)
        assert r.status_code == 200 and r.json()["recall_id"] is None and r.json()["results"]
        after, _ = await scrape(env)
        assert value(after, "memarc_recall_records_lost_total") == \
            value(before, "memarc_recall_records_lost_total") + 2
        assert value(after, "memarc_recall_records_total") == \
            value(before, "memarc_recall_records_total")
