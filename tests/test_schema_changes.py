"""Physical schema-change cleanup (DESIGN §7): only cards with a matching structured dependency
are deleted, with their links and points; runs are recorded first, exactly-once, and survive a
crash between the record and the deletion. Real services, no mocks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from shared.auth import Principal
from shared.archive.schema_changes import SchemaChangeRequest

ROOT = Path(__file__).resolve().parents[1]
MEM = "/api/workspaces/acme/memory"
CHANGES = "/api/workspaces/acme/schema-changes"


def dep(database, schema=None, table=None, column=None):
    return {k: v for k, v in {"database": database, "schema": schema, "table": table,
                              "column": column}.items() if v is not None}


CARDS = {
    "orders": [dep("shop", "public", "orders")],
    "orders.id": [dep("shop", "public", "orders", "id")],
    "mixed": [dep("shop", "public", "customers"), dep("shop", "public", "orders", "status")],
    "customers": [dep("shop", "public", "customers")],
    "customers.email": [dep("shop", "public", "customers", "email")],
    "database-only": [dep("shop")],
    "schema-only": [dep("shop", "public")],
    "workspace-wide": [],
    "other-database": [dep("crm", "public", "orders")],
    "other-schema": [dep("shop", "archive", "orders")],
}


async def _seed(env, h) -> dict[str, str]:
    ids = {}
    for name, deps in CARDS.items():
        r = await env.client.post(MEM, headers=h, json={
            "family": "sql_rule", "title": f"Rule on {name}",
            "content": {"rule": f"A rule about {name} and its reporting."}, "dependencies": deps})
        assert r.status_code == 201, r.text
        ids[name] = r.json()["card"]["id"]
    # a surviving card linking to a card that will be deleted
    r = await env.client.put(f"{MEM}/{ids['customers']}", headers=h, json={
        "family": "sql_rule", "title": "Rule on customers",
        "content": {"rule": "A rule about customers and its reporting."},
        "dependencies": CARDS["customers"], "revision": 1,
        "links": [{"target": ids["orders"], "meaning": "joins"}]})
    assert r.status_code == 200
    return ids


#: the run that removes table shop.public.orders, and the cards it takes
ORDERS_RUN = {"run_id": "sync-1", "database": "shop", "schema": "public",
              "removed_tables": ["orders"], "removed_columns": []}
ORDERS_GONE = {"orders", "orders.id", "mixed"}


async def _run(env, hs, body, path=CHANGES):
    """POST a schema-change run with a worker running, waiting for its point deletions (a run
    is done only once they are)."""
    async with env.running_worker():
        return await env.client.post(f"{path}?wait=20", headers=hs, json=body)


async def _projected(env):
    """Workspace acme with the cards of :data:`CARDS`, projected. Returns (manage headers,
    schema headers, card ids by name)."""
    env.workspace("acme")
    hm, hs = env.token("acme", "memory.manage"), env.token("acme", "memory.schema")
    ids = await _seed(env, hm)
    await env.drain()
    return hm, hs, ids


async def _orders_removed(env):
    """:func:`_projected`, then :data:`ORDERS_RUN` applied (with a worker, so its point
    deletions are done). Returns (manage headers, schema headers, card ids by name, the run's
    response)."""
    hm, hs, ids = await _projected(env)
    r = await _run(env, hs, ORDERS_RUN)
    assert r.status_code == 200, r.text
    return hm, hs, ids, r


async def test_removing_orders_deletes_only_dependent_cards_and_their_links(make_env):
    async with make_env() as env:
        hm, _, ids, r = await _orders_removed(env)
        assert "idempotent-replayed" not in r.headers
        result = r.json()
        gone = ORDERS_GONE
        assert result["status"] == "done" and result["errors"] == []
        assert result["deleted"] == sorted(ids[n] for n in gone)
        assert result["removed_tables"] == ["orders"] and result["completed_at"]
        for name, cid in ids.items():
            status = (await env.client.get(f"{MEM}/{cid}", headers=hm)).status_code
            assert status == (404 if name in gone else 200), name
        # the surviving card lost its link to the deleted one, and kept its revision
        customers = (await env.client.get(f"{MEM}/{ids['customers']}", headers=hm)).json()["card"]
        assert customers["links"] == [] and customers["revision"] == 2
        assert env.scalar("SELECT count(*) FROM memory.card_dependencies WHERE card_id = ANY(%s)",
                          [uuid.UUID(ids[n][4:]) for n in gone]) == 0


async def test_the_deleted_cards_points_go_through_projection_operations(make_env):
    async with make_env() as env:
        hm, hs, ids = await _projected(env)
        # no worker: the cards are deleted, their points not yet, so the run stays open
        r = await env.client.post(CHANGES, headers=hs, json=ORDERS_RUN)
        assert r.status_code == 200, r.text
        result = r.json()
        assert (result["status"], result["phase"]) == ("cleanup_pending", "index_pending")
        assert result["deleted"] == sorted(ids[n] for n in ORDERS_GONE)
        assert result["index_pending"] == result["deleted"] and result["completed_at"] is None
        pending = (await env.client.get(f"{MEM}/pending", headers=hm)).json()
        assert sorted(o["card_id"] for o in pending["operations"] if o["op"] == "delete") == \
            result["deleted"]
        await env.drain()
        points = await env.resources.index.scroll_ids("acme")
        assert {f"mem-{p}" for p in points} == {ids[n] for n in CARDS if n not in ORDERS_GONE}
        # the same run id again finds the point deletions done and completes the run
        r = await env.client.post(CHANGES, headers=hs, json=ORDERS_RUN)
        assert r.status_code == 200 and "idempotent-replayed" not in r.headers
        assert (r.json()["status"], r.json()["phase"], r.json()["index_pending"]) == (
            "done", "done", [])
        assert r.json()["deleted"] == result["deleted"]


async def test_the_same_run_id_again_replays_its_receipt_and_deletes_nothing_twice(make_env):
    async with make_env() as env:
        _, hs, _, r = await _orders_removed(env)
        result = r.json()
        ops = env.scalar("SELECT count(*) FROM memory.projection_ops")
        deletes = env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'delete'")
        again = await env.client.post(CHANGES, headers=hs, json=ORDERS_RUN)
        assert again.status_code == 200 and again.json() == result
        assert again.headers["idempotent-replayed"] == "true"
        assert env.scalar("SELECT count(*) FROM memory.projection_ops") == ops
        assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'delete'") == deletes
        # order and duplicates do not make a new diff
        same = dict(ORDERS_RUN, removed_tables=["orders", " orders "])
        assert (await env.client.post(CHANGES, headers=hs, json=same)).json() == result
        # the same run id with other removed objects is refused
        r = await env.client.post(CHANGES, headers=hs,
                                  json=dict(ORDERS_RUN, removed_tables=["customers"]))
        assert r.status_code == 409 and r.json()["run_id"] == "sync-1"


async def test_a_removed_column_takes_only_that_columns_cards(make_env):
    async with make_env() as env:
        _, hs, ids, _ = await _orders_removed(env)
        # the table's cards survive
        r = await _run(env, hs, {
            "run_id": "sync-2", "database": "shop", "schema": "public",
            "removed_columns": [{"table": "customers", "column": "email"}]})
        assert r.status_code == 200 and r.json()["deleted"] == [ids["customers.email"]]
        left = sorted(n for n in CARDS if n not in ORDERS_GONE | {"customers.email"})
        assert left == sorted(["customers", "database-only", "schema-only", "workspace-wide",
                               "other-database", "other-schema"])
        assert env.scalar("SELECT count(*) FROM memory.cards") == len(left)
        with psycopg.connect(env.migrator_url) as conn:
            runs = conn.execute("SELECT run_id, status FROM memory.schema_change_runs "
                                "ORDER BY run_id").fetchall()
        assert runs == [("sync-1", "done"), ("sync-2", "done")]


async def test_a_crash_between_record_and_deletion_is_completed_by_the_same_run_id(make_env):
    async with make_env() as env:
        env.workspace("acme")
        hm, hs = env.token("acme", "memory.manage"), env.token("acme", "memory.schema")
        ids = await _seed(env, hm)
        run = {"run_id": "sync-9", "database": "shop", "schema": "public",
               "removed_tables": ["orders"]}
        # the process records the run, then dies before the deletion phase
        principal = Principal(workspace="acme", permissions=frozenset({"memory.schema"}),
                              actor="test:crashed")
        service = env.resources.archive().schema_changes
        row, created = await service.record(principal, "acme", SchemaChangeRequest(**run))
        assert row["status"] == "cleanup_pending" and created
        assert env.scalar("SELECT count(*) FROM memory.cards") == len(CARDS)
        # a new run for the same database/schema is refused while this one is incomplete
        r = await env.client.post(CHANGES, headers=hs, json=dict(run, run_id="sync-10"))
        assert r.status_code == 409 and r.json()["run_id"] == "sync-9"
        assert "incomplete" in r.json()["detail"]
        # another schema is independent
        r = await env.client.post(CHANGES, headers=hs, json=dict(run, run_id="arch-1",
                                                                 schema="archive"))
        assert r.status_code == 200 and r.json()["deleted"] == [ids["other-schema"]]
        # repeating the run id completes the recorded run (from what was recorded)
        r = await _run(env, hs, run)
        assert r.status_code == 200 and "idempotent-replayed" not in r.headers
        assert r.json()["status"] == "done"
        assert r.json()["deleted"] == sorted(ids[n] for n in ("orders", "orders.id", "mixed"))
        r = await env.client.post(CHANGES, headers=hs, json=dict(run, run_id="sync-10",
                                                                 removed_tables=["customers"]))
        assert r.status_code == 200
        assert r.json()["deleted"] == sorted([ids["customers"], ids["customers.email"]])


KILLED = r"""
import asyncio, json, os, sys
from shared.store import cards
from shared.archive import schema_changes
from shared.auth import Principal
from shared.store.database import Database
from shared.projection.queue import ProjectionQueue

async def main():
    db = Database(os.environ["TEST_DB_URL"], "memory")
    await db.open()
    real = cards.delete

    async def delete_then_hang(conn, card_uuid):
        await real(conn, card_uuid)
        print("deleting", flush=True)
        await asyncio.sleep(3600)  # killed here, inside the deletion transaction

    cards.delete = delete_then_hang
    principal = Principal(workspace="acme", permissions=frozenset({"memory.schema"}),
                          actor="test:killed")
    request = schema_changes.SchemaChangeRequest(**json.loads(os.environ["TEST_RUN"]))
    await schema_changes.SchemaChanges(db, ProjectionQueue(None)).apply(principal, "acme", request)

asyncio.run(main())
"""


async def test_a_process_killed_between_the_phases_leaves_a_run_that_completes(make_env):
    """The bonus test: a real process records the run, starts deleting, and is SIGKILLed."""
    async with make_env() as env:
        env.workspace("acme")
        hm, hs = env.token("acme", "memory.manage"), env.token("acme", "memory.schema")
        ids = await _seed(env, hm)
        run = {"run_id": "sync-k", "database": "shop", "schema": "public",
               "removed_tables": ["orders"]}
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
            env={**os.environ, "TEST_DB_URL": env.settings.database_url,
                 "TEST_RUN": json.dumps(run)})
        try:
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
            assert line.strip() == "deleting", proc.stderr.read() if proc.poll() is not None else line
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            proc.stdout.close()
            proc.stderr.close()
        # the deletion transaction died with the process: the run is recorded, nothing deleted
        for _ in range(100):
            with psycopg.connect(env.migrator_url) as conn:
                status = conn.execute("SELECT status FROM memory.schema_change_runs "
                                      "WHERE run_id = 'sync-k'").fetchone()
                busy = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                    "current_database() AND state LIKE 'idle in transaction%'"
                                    ).fetchone()[0]
            if busy == 0:
                break
            await asyncio.sleep(0.05)
        assert status == ("cleanup_pending",)
        assert env.scalar("SELECT count(*) FROM memory.cards") == len(CARDS)
        r = await env.client.post(CHANGES, headers=hs, json=dict(run, run_id="sync-k2"))
        assert r.status_code == 409
        r = await _run(env, hs, run)
        assert r.status_code == 200 and r.json()["status"] == "done"
        assert r.json()["deleted"] == sorted(ids[n] for n in ("orders", "orders.id", "mixed"))
        assert env.scalar("SELECT count(*) FROM memory.cards") == len(CARDS) - 3


async def test_permissions_bindings_and_bad_input(make_env):
    async with make_env() as env:
        env.workspace("acme")
        env.workspace("other")
        run = {"run_id": "r", "database": "shop", "schema": "public", "removed_tables": ["orders"]}
        for headers, status in ((env.token("acme", "memory.manage"), 403),
                                (env.token("acme", "memory.review"), 403),
                                (env.token("acme", "memory.propose"), 403),
                                (env.token("other", "memory.schema"), 404),
                                (env.token("acme", "memory.schema", database="crm"), 403),
                                (env.token("acme", "memory.schema", database="shop",
                                           db_schema="sales"), 403),
                                ({}, 401)):
            r = await env.client.post(CHANGES, headers=headers, json=run)
            assert r.status_code == status, (status, r.text)
        assert env.scalar("SELECT count(*) FROM memory.schema_change_runs") == 0
        hs = env.token("acme", "memory.schema")
        for body in (dict(run, database="  "), dict(run, removed_tables=[""]),
                     dict(run, removed_columns=[{"table": "orders"}]), dict(run, extra=1),
                     {k: v for k, v in run.items() if k != "schema"}):
            r = await env.client.post(CHANGES, headers=hs, json=body)
            assert r.status_code in (400, 422), (body, r.text)
        assert env.scalar("SELECT count(*) FROM memory.schema_change_runs") == 0
        # a NUL in the run id is refused, and the refusal is still recorded (escaped: jsonb
        # cannot hold a NUL)
        before = env.scalar("SELECT count(*) FROM memory.activity WHERE outcome LIKE 'rejected:%%'")
        r = await env.client.post(CHANGES, headers=hs, json=dict(run, run_id="r\x00"))
        assert r.status_code == 422, r.text
        assert env.scalar("SELECT count(*) FROM memory.activity "
                          "WHERE outcome LIKE 'rejected:%%'") == before + 1
        assert env.scalar("SELECT detail::text FROM memory.activity ORDER BY id DESC LIMIT 1"
                          ).count("\\\\u0000") >= 1
        bound = env.token("acme", "memory.schema", database="shop", db_schema="public")
        r = await env.client.post(CHANGES, headers=bound, json=run)
        assert r.status_code == 200 and r.json()["deleted"] == []
        with psycopg.connect(env.migrator_url) as conn:  # isolated by workspace under RLS
            conn.execute("SET ROLE memarc_runtime")
            conn.execute("SELECT set_config('memarc.workspace', 'other', false)")
            assert conn.execute("SELECT count(*) FROM memory.schema_change_runs").fetchone()[0] == 0


RECORD, CLEANUP = f"{CHANGES}/record", f"{CHANGES}/cleanup"


async def test_cleanup_of_a_run_keeps_to_the_tokens_binding(make_env):
    """``/cleanup`` names only a run id: the run's own database/schema must be inside the
    token's binding, as for the one-call form, or nothing is deleted (403)."""
    async with make_env() as env:
        hm, hs, ids = await _projected(env)
        r = await env.client.post(RECORD, headers=hs, json=ORDERS_RUN)  # an unbound token
        assert r.status_code == 201, r.text
        for binding in ({"database": "crm"}, {"database": "shop", "db_schema": "sales"}):
            other = env.token("acme", "memory.schema", **binding)
            r = await env.client.post(CLEANUP, headers=other, json={"run_id": "sync-1"})
            assert r.status_code == 403, (binding, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert env.scalar("SELECT count(*) FROM memory.cards") == len(CARDS)
            assert env.scalar("SELECT cards_deleted_at IS NULL FROM memory.schema_change_runs "
                              "WHERE run_id = 'sync-1'") is True
        own = env.token("acme", "memory.schema", database="shop", db_schema="public")
        r = await env.client.post(CLEANUP, headers=own, json={"run_id": "sync-1"})
        assert r.status_code == 200, r.text
        assert r.json()["deleted"] == sorted(ids[n] for n in ORDERS_GONE)
        assert env.scalar("SELECT count(*) FROM memory.cards") == len(CARDS) - len(ORDERS_GONE)


async def test_two_steps_record_before_the_catalog_commits_then_cleanup(make_env):
    """A catalog records the pending cleanup before it commits its own physical change
    (``/record``), then asks for the cleanup (``/cleanup``); the run stays open until the point
    deletions of its cards are done."""
    async with make_env() as env:
        hm, hs, ids = await _projected(env)
        r = await env.client.post(RECORD, headers=hs, json=ORDERS_RUN)
        assert r.status_code == 201, r.text
        assert (r.json()["status"], r.json()["phase"], r.json()["deleted"]) == (
            "cleanup_pending", "recorded", [])
        assert env.scalar("SELECT count(*) FROM memory.cards") == len(CARDS)  # nothing deleted
        again = await env.client.post(RECORD, headers=hs, json=ORDERS_RUN)
        assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
        assert again.json() == r.json()
        # the recorded run blocks the next sync of the same database/schema
        nxt = dict(ORDERS_RUN, run_id="sync-2", removed_tables=["customers"])
        r = await env.client.post(RECORD, headers=hs, json=nxt)
        assert r.status_code == 409 and r.json()["run_id"] == "sync-1"
        assert (await env.client.post(CLEANUP, headers=hs, json={"run_id": "nope"})
                ).status_code == 404
        # step 2 without a worker: cards deleted, points not yet
        r = await env.client.post(CLEANUP, headers=hs, json={"run_id": "sync-1"})
        assert r.status_code == 200, r.text
        gone = sorted(ids[n] for n in ORDERS_GONE)
        assert (r.json()["status"], r.json()["phase"]) == ("cleanup_pending", "index_pending")
        assert r.json()["deleted"] == gone and r.json()["index_pending"] == gone
        for name in ORDERS_GONE:
            assert (await env.client.get(f"{MEM}/{ids[name]}", headers=hm)).status_code == 404
        r = await env.client.post(RECORD, headers=hs, json=nxt)
        assert r.status_code == 409 and r.json()["index_pending"] == gone
        # with the worker, the same step again completes it
        r = await _run(env, hs, {"run_id": "sync-1"}, CLEANUP)
        assert r.status_code == 200
        assert (r.json()["status"], r.json()["index_pending"]) == ("done", [])
        points = await env.resources.index.scroll_ids("acme")
        assert {f"mem-{p}" for p in points} == {ids[n] for n in CARDS if n not in ORDERS_GONE}
        # the next sync goes ahead
        r = await env.client.post(RECORD, headers=hs, json=nxt)
        assert r.status_code == 201 and r.json()["phase"] == "recorded"
        r = await _run(env, hs, {"run_id": "sync-2"}, CLEANUP)
        assert r.json()["status"] == "done"
        assert r.json()["deleted"] == sorted([ids["customers"], ids["customers.email"]])


@pytest.mark.both_engines
async def test_a_failed_point_deletion_keeps_the_run_open_until_a_retry_finishes_it(make_env):
    """A real fault: the workspace's collection is replaced by one of another layout (what an
    old deployment left), so the worker cannot delete the points (``index_incompatible``). The
    run stays ``cleanup_pending`` and blocks the next sync; once ``index`` rebuilt the
    collection, a retry of the same run finishes it."""
    from helpers import make_incompatible_collection

    async with make_env() as env:
        hm, hs, ids = await _projected(env)
        await make_incompatible_collection(env.resources.index, "acme",
                                          recorded_in=env.migrator_url)
        gone = sorted(ids[n] for n in ORDERS_GONE)
        async with env.running_worker():
            r = await env.client.post(f"{CHANGES}?wait=3", headers=hs, json=ORDERS_RUN)
            assert r.status_code == 200, r.text
            assert (r.json()["status"], r.json()["phase"]) == ("cleanup_pending",
                                                               "index_pending")
            assert r.json()["deleted"] == gone and r.json()["index_pending"] == gone
            pending = (await env.client.get(f"{MEM}/pending", headers=hm)).json()["operations"]
            deletes = [o for o in pending if o["op"] == "delete"]
            assert sorted(o["card_id"] for o in deletes) == gone
            assert all(o["last_error"] for o in deletes), deletes
            said = (await env.client.get(f"{MEM}/activity", headers=hm, params={
                "verb": "project", "outcome": "index_incompatible"})).json()["activity"]
            assert sorted({a["card_id"] for a in said}) == gone  # the worker said why
            # the next sync is refused while the run is open
            r = await env.client.post(CHANGES, headers=hs, json=dict(
                ORDERS_RUN, run_id="sync-2", removed_tables=["customers"]))
            assert r.status_code == 409 and r.json()["run_id"] == "sync-1"
            assert r.json()["index_pending"] == gone
            # a retry while the fault lasts leaves it open
            r = await env.client.post(f"{CLEANUP}?wait=1", headers=hs, json={"run_id": "sync-1"})
            assert r.json()["status"] == "cleanup_pending" and r.json()["index_pending"] == gone
            # the recovery for an incompatible collection, then a retry of the same run
            r = await env.client.post(f"{MEM}/index", headers=hm)
            assert r.status_code == 202, r.text
            for _ in range(300):
                rebuild = (await env.client.get(f"{MEM}/index", headers=hm)).json()
                if rebuild["status"] in ("done", "failed"):
                    break
                await asyncio.sleep(0.1)
            assert rebuild["status"] == "done", rebuild
            r = await env.client.post(f"{CLEANUP}?wait=20", headers=hs,
                                      json={"run_id": "sync-1"})
        assert r.status_code == 200
        assert (r.json()["status"], r.json()["phase"], r.json()["index_pending"]) == (
            "done", "done", [])
        assert r.json()["deleted"] == gone  # nothing matched again
        points = await env.resources.index.scroll_ids("acme")
        assert {f"mem-{p}" for p in points} == {ids[n] for n in CARDS if n not in ORDERS_GONE}
        r = await env.client.post(CHANGES, headers=hs, json=dict(
            ORDERS_RUN, run_id="sync-2", removed_tables=["customers"]))
        assert r.status_code == 200 and r.json()["deleted"] == sorted(
            [ids["customers"], ids["customers.email"]])
