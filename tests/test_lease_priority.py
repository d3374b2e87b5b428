"""The lease order of the projection outbox (migration 023, issue 26): upserts of solved
questions are leased before every other operation queued with them, even when an import's links
queued their targets first; the head start is bounded (10 minutes), deletes get none, the given
operation of a job still comes first, and everything is projected in the end."""

from __future__ import annotations

import json
import uuid

import psycopg

from shared.store import outbox

MEM = "/api/workspaces/acme/memory"
NDJSON = {"Content-Type": "application/x-ndjson"}


def _clarification(i: int) -> dict:
    return {"key": f"clar-{i}", "family": "domain_clarification", "title": f"Term {i}",
            "content": {"definition": f"Term {i} means the {i}th kind of client."}}


def _solved(i: int, links: list[str]) -> dict:
    return {"key": f"solved-{i}", "family": "solved_question", "title": f"Question {i}",
            "content": {"question": f"How many clients of kind {i} are there?",
                        "sql": f"SELECT count(*) FROM client WHERE kind = {i}"},
            "links": [{"target": t, "meaning": "uses"} for t in links]}


#: Other families first in the file, solved questions last, each linking to clarifications (their
#: link triggers queue the clarifications' re-projection before the import's own upserts).
LINES = ([_clarification(i) for i in range(6)]
         + [{"key": "rule-1", "family": "sql_rule", "title": "Kinds are integers",
             "content": {"rule": "Compare client.kind as an integer."}},
            {"key": "err-1", "family": "explained_error", "title": "kind is text",
             "content": {"error": "operator does not exist: text = integer",
                         "correction": "Cast client.kind to integer."}}]
         + [_solved(i, [f"clar-{i}", f"clar-{(i + 1) % 6}", "rule-1"]) for i in range(4)])


def _open_ops(env) -> list[dict]:
    """Every open operation with its card's family, in id order (as the database owner)."""
    with psycopg.connect(env.migrator_url) as conn:
        conn.row_factory = psycopg.rows.dict_row
        return conn.execute(
            "SELECT o.id, o.card_id, o.op, o.created_at, o.lease_order, c.family "
            "FROM memory.projection_ops o LEFT JOIN memory.cards c ON c.id = o.card_id "
            "WHERE o.status <> 'done' ORDER BY o.id").fetchall()


def _give_back(env) -> None:
    """The operations leased by the test (no worker projects them) are pending again."""
    with psycopg.connect(env.migrator_url) as conn:
        conn.execute("UPDATE memory.projection_ops SET status = 'pending', "
                     "lease_expires_at = NULL WHERE status = 'running'")


async def _import(env, h) -> None:
    body = "\n".join(json.dumps(line) for line in LINES).encode()
    r = await env.client.post(f"{MEM}/import", content=body, headers={**h, **NDJSON})
    assert r.status_code == 201 and r.json()["created"] == len(LINES), r.text


async def _lease(env, op_id=None, limit=256) -> list[dict]:
    async with env.resources.db.transaction("acme") as conn:
        return await outbox.lease(conn, "acme", op_id, batch=True, limit=limit,
                                  lease_seconds=60)


async def test_an_import_leases_its_solved_questions_first_though_its_links_queued_others_first(
        make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await _import(env, h)
        ops = _open_ops(env)
        family = {o["card_id"]: o["family"] for o in ops}
        solved = [o["id"] for o in ops if o["family"] == "solved_question"]
        others = [o["id"] for o in ops if o["family"] != "solved_question"]
        assert len(solved) == 4 and len(others) == 8
        # the premise: in id order (the old lease order) other families' operations come first
        assert min(others) < min(solved)
        assert all(o["op"] == "upsert" for o in ops)

        first = await _lease(env, limit=4)
        assert sorted(o["id"] for o in first) == sorted(solved)
        assert {family[o["card_id"]] for o in first} == {"solved_question"}
        rest = await _lease(env)
        assert sorted(o["id"] for o in rest) == sorted(others)  # in id order among themselves
        assert await _lease(env) == []

        # the leases expire unprojected: reclaimed in the same order, solved questions first
        with psycopg.connect(env.migrator_url) as conn:
            conn.execute("UPDATE memory.projection_ops SET lease_expires_at = now() - "
                         "interval '1 second' WHERE status = 'running'")
        again = await _lease(env, limit=4)
        assert sorted(o["id"] for o in again) == sorted(solved)
        assert all(o["attempts"] == 2 for o in again)
        _give_back(env)

        # a job's own operation still comes first, then the lease order
        given = await _lease(env, op_id=others[-1], limit=3)
        assert sorted(o["id"] for o in given) == sorted([others[-1], *solved[:2]])
        _give_back(env)

        # everything is projected, the sweep (lease order) offering the jobs
        await env.drain()
        assert _open_ops(env) == []
        r = await env.client.post(f"{MEM}/search", headers=h, json={
            "query": "how many clients of kind 2", "mode": "solved", "top": 1})
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["card"]["title"] == "Question 2"


async def test_the_head_start_is_bounded_and_deletes_and_other_families_get_none(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await _import(env, h)
        await env.drain()
        cards = {c["title"]: c for c in (await env.client.get(
            MEM, headers=h)).json()["cards"]}
        clar, question = cards["Term 0"], cards["Question 3"]
        # a clarification's re-projection queued 11 minutes ago (a backlog) ...
        with psycopg.connect(env.migrator_url) as conn:
            old = conn.execute(
                "INSERT INTO memory.projection_ops (workspace_id, card_id, op, revision, "
                "created_at) VALUES ('acme', %s, 'upsert', 1, now() - interval '11 minutes') "
                "RETURNING id", [uuid.UUID(clar["id"][4:])]).fetchone()[0]
        # ... then a solved question edited now, and a clarification edited now
        r = await env.client.put(f"{MEM}/{question['id']}", headers=h, json={
            **{k: question[k] for k in ("family", "title", "content")},
            "content": {**question["content"], "question": "How many clients of kind 3 exist?"},
            "revision": question["revision"]})
        assert r.status_code == 200, r.text
        term = cards["Term 5"]
        r = await env.client.put(f"{MEM}/{term['id']}", headers=h, json={
            **{k: term[k] for k in ("family", "title")},
            "content": {"definition": "Term 5 means the fifth kind of client, still."},
            "revision": term["revision"]})
        assert r.status_code == 200, r.text
        ops = {(o["family"], o["op"], o["card_id"]): o for o in _open_ops(env)}
        edited = ops[("solved_question", "upsert", uuid.UUID(question["id"][4:]))]
        assert (edited["created_at"] - edited["lease_order"]).total_seconds() == 600
        assert all(o["lease_order"] == o["created_at"] for o in ops.values()
                   if o["family"] != "solved_question")
        leased = [o["id"] for o in await _lease(env, limit=1)]
        assert leased == [old]  # queued more than 10 minutes before: not overtaken
        nxt = await _lease(env, limit=1)
        assert nxt[0]["id"] == edited["id"]  # overtakes the clarification queued with it
        _give_back(env)
        await env.drain()

        # a solved question's deletion has no head start
        r = await env.client.delete(f"{MEM}/{question['id']}", headers=h)
        assert r.status_code in (200, 204), r.text
        deletes = [o for o in _open_ops(env) if o["op"] == "delete"]
        assert len(deletes) == 1 and deletes[0]["lease_order"] == deletes[0]["created_at"]
        await env.drain()
        assert _open_ops(env) == []
