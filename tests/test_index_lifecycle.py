"""Index lifecycle (DESIGN §3-4): leases, failures, retries, format upgrades, tombstones, rebuild."""

from __future__ import annotations

import asyncio
import time
import uuid

import msgspec
import psycopg
import pytest
from helpers import index_point, make_incompatible_collection

from shared.index.edge import QdrantEdgeEngine
from shared.index.qdrant import QdrantClientEngine
from shared import models
from shared.projection.project import project_operations
from shared.store import outbox

pytestmark = pytest.mark.both_engines

BASE = "/api/workspaces/acme/memory"


def _rule(title: str, text: str, **kw) -> dict:
    return {"family": "sql_rule", "title": title, "content": {"rule": text}, **kw}


async def _create(env, h, n=3):
    cards = []
    for i in range(n):
        r = await env.client.post(BASE, headers=h, json=_rule(
            f"Rule {i} about invoices", f"Invoices are issued on day {i + 1} of the month."))
        assert r.status_code == 201
        cards.append(r.json()["card"])
    return cards


async def _search(env, h, query="when are invoices issued", **kw):
    r = await env.client.post(f"{BASE}/search", headers=h,
                              json={"query": query, "mode": "rules", "top": 20, **kw})
    assert r.status_code == 200, r.text
    return r.json()


async def test_an_expired_lease_is_reclaimed_and_completed_with_the_current_state(make_env):
    async with make_env(lease_seconds=1) as env:
        env.workspace("acme")
        h = env.token("acme")
        card = (await _create(env, h, 1))[0]
        # a worker leases the operation and dies before completing it
        async with env.resources.db.transaction("acme") as conn:
            assert len(await outbox.lease(conn, "acme", None, batch=True, limit=10,
                                          lease_seconds=1)) == 1
        # meanwhile the card changes
        r = await env.client.put(f"{BASE}/{card['id']}", headers=h, json=_rule(
            "Rule 0 about invoices", "Invoices are issued on the last day of the month.", revision=1))
        assert r.status_code == 200
        ops = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
        assert [o["status"] for o in ops] == ["running", "pending"]
        await asyncio.sleep(1.2)
        await env.drain()
        assert (await env.client.get(f"{BASE}/pending", headers=h)).json()["total"] == 0
        res = await _search(env, h, "invoices issued last day of the month")
        assert res["results"][0]["card"]["revision"] == 2
        points = await env.resources.index.scroll_ids("acme")
        assert points[uuid.UUID(card["id"][4:])]["revision"] == 2


async def test_failures_are_counted_then_failed_until_retried(make_env):
    async with make_env(max_attempts=2) as env:
        env.workspace("acme")
        h = env.token("acme")
        card = (await _create(env, h, 1))[0]
        dead = QdrantClientEngine(msgspec.structs.replace(env.settings,
                                                          qdrant_url="http://127.0.0.1:1"))
        for _ in range(3):
            await project_operations(env.resources.db, dead, env.resources.embedder, "acme", None,
                                     max_attempts=2)
        ops = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
        assert len(ops) == 1 and ops[0]["status"] == "failed" and ops[0]["attempts"] == 2
        assert "unreachable" in ops[0]["last_error"]
        shown = (await env.client.get(f"{BASE}/{card['id']}", headers=h)).json()
        assert shown["card"]["index_status"] == "failed"
        # never dropped silently: a failed operation is not picked up again by the sweep
        await env.drain()
        assert (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"][0]["status"] == "failed"
        r = await env.client.post(f"{BASE}/{card['id']}/retry", headers=h)
        assert r.status_code == 202 and r.json()["operations"] == [ops[0]["id"]]
        await env.drain()
        assert (await env.client.get(f"{BASE}/pending", headers=h)).json()["total"] == 0
        await dead.close()


async def test_a_retry_for_a_deleted_card_deletes_the_point_and_never_restores(make_env):
    async with make_env(redis_url="redis://127.0.0.1:1/0") as env:  # no worker at delete time
        env.workspace("acme")
        h = env.token("acme")
        card = (await _create(env, h, 1))[0]
        await project_operations(env.resources.db, env.resources.index, env.resources.embedder,
                                 "acme", None)
        r = await env.client.delete(f"{BASE}/{card['id']}", headers=h)
        assert r.status_code == 200
        cid = uuid.UUID(card["id"][4:])
        assert cid in await env.resources.index.scroll_ids("acme")  # tombstone still pending
        assert (await _search(env, h))["results"] == []  # but never returned
        r = await env.client.post(f"{BASE}/{card['id']}/retry", headers=h)
        assert r.status_code == 202
        await project_operations(env.resources.db, env.resources.index, env.resources.embedder,
                                 "acme", None)
        assert cid not in await env.resources.index.scroll_ids("acme")
        assert (await env.client.get(f"{BASE}/{card['id']}", headers=h)).status_code == 404
        assert (await env.client.get(f"{BASE}/pending", headers=h)).json()["total"] == 0


async def test_raising_the_projection_format_makes_old_projections_pending(make_env, monkeypatch):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 3)
        await env.drain()
        assert len((await _search(env, h))["results"]) == 3
        monkeypatch.setattr(models, "PROJECTION_FORMAT", models.PROJECTION_FORMAT + 1)
        shown = (await env.client.get(f"{BASE}/{cards[0]['id']}", headers=h)).json()
        assert shown["card"]["index_status"] == "pending"
        res = await _search(env, h)
        assert res["results"] == [] and res["excluded"] == 3
        # retry upgrades one card; index upgrades the rest
        await env.client.post(f"{BASE}/{cards[0]['id']}/retry", headers=h)
        await env.drain()
        assert [x["card"]["id"] for x in (await _search(env, h))["results"]] == [cards[0]["id"]]
        r = await env.client.post(f"{BASE}/index", headers=h)
        assert r.status_code == 202
        await env.drain()
        row = (await env.client.get(f"{BASE}/index/{r.json()['id']}", headers=h)).json()
        assert row["status"] == "done" and row["summary"]["written"] == 3
        assert len((await _search(env, h))["results"]) == 3
        # the runtime refuses to start when the code's format was not recorded by a migration
        from shared.errors import SchemaOutdated

        with pytest.raises(SchemaOutdated, match="memarc migrate"):
            await outbox.check_projection_format(env.resources.db)


async def _rebuild(env, h) -> dict:
    """Request a rebuild through the API, run the worker, return the finished rebuild's row."""
    r = await env.client.post(f"{BASE}/index", headers=h)
    assert r.status_code == 202, r.text
    await env.drain()
    return (await env.client.get(f"{BASE}/index/{r.json()['id']}", headers=h)).json()


async def test_rebuild_recovers_an_incompatible_collection_and_drops_orphans(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 3)
        await env.drain()
        index = env.resources.index
        # an orphan point (no card) in the current collection
        await index_point(env, dict(cards[0], id=f"mem-{uuid.uuid4()}"))
        # replace the collection by one without the BM25 vector (as an old deployment had it)
        await make_incompatible_collection(index, "acme")
        r = await env.client.post(f"{BASE}/search", headers=h, json={"query": "invoices"})
        assert r.status_code == 503 and r.json()["code"] == "index_incompatible"

        r = await env.client.post(f"{BASE}/index", headers=h)
        assert r.status_code == 202 and r.json()["status"] == "queued"
        await env.drain()
        row = (await env.client.get(f"{BASE}/index", headers=h)).json()
        assert row["status"] == "done", row
        assert row["summary"]["cards"] == 3 and row["summary"]["written"] == 3
        res = await _search(env, h)
        assert sorted(x["card"]["id"] for x in res["results"]) == sorted(c["id"] for c in cards)
        points = await index.scroll_ids("acme")
        assert set(points) == {uuid.UUID(c["id"][4:]) for c in cards}


async def test_a_rebuild_requested_while_one_is_queued_is_refused_and_each_outcome_recorded(
        make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await _create(env, h, 3)
        await env.drain()
        r = await env.client.post(f"{BASE}/index", headers=h)
        assert r.status_code == 202 and r.json()["status"] == "queued"
        again = await env.client.post(f"{BASE}/index", headers=h)
        assert again.status_code == 409
        await env.drain()
        assert (await _rebuild(env, h))["status"] == "done"
        with psycopg.connect(env.migrator_url) as conn:
            verbs = [r[0] for r in conn.execute(
                "SELECT outcome FROM memory.activity WHERE verb = 'index' ORDER BY id")]
        # each request (queued, or rejected while one runs), then each completed rebuild
        assert verbs == ["queued", "rejected:conflict", "ok", "queued", "ok"]


async def test_a_second_rebuild_replaces_the_aliased_collection_atomically(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await _create(env, h, 3)
        await env.drain()
        index = env.resources.index
        first = await _rebuild(env, h)
        assert first["status"] == "done"
        row = await _rebuild(env, h)
        alias = index.collection("acme")
        assert row["status"] == "done"
        assert row["summary"]["replaced"] == first["collection"]
        assert row["summary"]["replaced"].startswith(alias + "__")
        assert row["summary"]["replaced"] != row["collection"]
        assert row["collection"].startswith(alias + "__")
        assert await index.scroll_ids("acme", row["summary"]["replaced"]) == {}
        assert len((await _search(env, h))["results"]) == 3
        assert await index.physical_collection("acme") == row["collection"]
        if isinstance(index, QdrantEdgeEngine):  # the pointer file names the new shard
            assert not (index.root / row["summary"]["replaced"]).exists()


async def test_cards_written_during_a_rebuild_end_up_current(make_env):
    """A card updated and one created while the rebuild reads: both current after the switch."""
    from shared.projection.rebuild import rebuild_index

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 3)
        await env.drain()
        calls = {"n": 0}

        async def interfere(collection: str) -> None:
            calls["n"] += 1
            if calls["n"] == 1:  # after the first batch was read and written
                r = await env.client.put(f"{BASE}/{cards[1]['id']}", headers=h, json=_rule(
                    "Rule 1 about invoices", "Invoices are issued every Friday.", revision=1))
                assert r.status_code == 200
                r = await env.client.post(BASE, headers=h, json=_rule(
                    "Credit notes", "Credit notes reverse an invoice."))
                assert r.status_code == 201

        r = await env.client.post(f"{BASE}/index", headers=h)
        rid = uuid.UUID(r.json()["id"])
        await rebuild_index(env.resources.db, env.resources.index, env.resources.embedder,
                            "acme", rid, on_batch_written=interfere)
        assert calls["n"] == 1
        await env.drain()  # the writes' own jobs (and the queued job of the finished rebuild)
        row = (await env.client.get(f"{BASE}/index/{rid}", headers=h)).json()
        assert row["status"] == "done" and row["summary"]["caught_up"] >= 2
        status = (await env.client.get(f"{BASE}/status", headers=h)).json()
        assert status["cards"] == status["current"] == 4
        res = await _search(env, h, "invoices issued every Friday")
        assert res["results"][0]["card"]["revision"] == 2
        assert (await env.client.get(f"{BASE}/pending", headers=h)).json()["total"] == 0


async def _advisory_lock_waiters(env) -> int:
    """How many sessions of the test's database wait for an advisory lock."""
    async with await psycopg.AsyncConnection.connect(env.migrator_url) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND wait_event = 'advisory'")
        return (await cur.fetchone())[0]


async def _assert_audit_clean(env) -> None:
    from shared.projection.reconciliation import audit

    report = await audit(env.resources.db, env.resources.index, "acme")
    found = (report.orphan, report.missing, report.stale, report.misplaced)
    assert found == ([], [], [], []), report
    assert report.pending == 0 and report.current == report.cards, report


async def test_writes_issued_at_the_switch_wait_for_it_and_end_up_projected(make_env):
    """Issue 14: a delete, an update and a create issued concurrently at the moment between the
    rebuild's last catch-up and its switch wait for the switch (it holds the writes' lock), then
    go through at once; after a drain nothing is orphaned, missing or stale. (Before the fix the
    delete committed there, the switch completed its operation and its point stayed behind.)"""
    from shared.projection.rebuild import rebuild_index

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 3)
        await env.drain()
        writes: dict[str, asyncio.Task] = {}
        moment: dict[str, float] = {}

        async def write_now(collection: str) -> None:
            writes["delete"] = asyncio.create_task(
                env.client.delete(f"{BASE}/{cards[0]['id']}", headers=h))
            writes["update"] = asyncio.create_task(env.client.put(
                f"{BASE}/{cards[1]['id']}", headers=h, json=_rule(
                    "Rule 1 about invoices", "Invoices are issued every Friday.", revision=1)))
            writes["create"] = asyncio.create_task(env.client.post(BASE, headers=h, json=_rule(
                "Credit notes", "Credit notes reverse an invoice.")))
            # until the three wait for the lock (or, without it, have committed)
            deadline = time.monotonic() + 30
            while not all(t.done() for t in writes.values()) and time.monotonic() < deadline:
                if await _advisory_lock_waiters(env) >= 3:
                    break
                await asyncio.sleep(0.05)
            moment["blocked"] = sum(not t.done() for t in writes.values())
            moment["released"] = time.monotonic()

        r = await env.client.post(f"{BASE}/index", headers=h)
        rid = uuid.UUID(r.json()["id"])
        row = await rebuild_index(env.resources.db, env.resources.index, env.resources.embedder,
                                  "acme", rid, before_switch=write_now)
        assert row["status"] == "done", row
        responses = await asyncio.gather(*writes.values())
        waited = time.monotonic() - moment["released"]
        assert [x.status_code for x in responses] == [200, 200, 201], [x.text for x in responses]
        await env.drain()  # the writes' own jobs, projected into the new collection

        await _assert_audit_clean(env)
        points = await env.resources.index.scroll_ids("acme")
        created = responses[2].json()["card"]
        assert uuid.UUID(cards[0]["id"][4:]) not in points
        assert points[uuid.UUID(cards[1]["id"][4:])]["revision"] == 2
        assert uuid.UUID(created["id"][4:]) in points
        assert len(points) == 3
        # they waited for the switch, and not much longer than it (nothing left to catch up)
        assert moment["blocked"] == 3
        assert waited < 10, waited
        res = await _search(env, h, "invoices issued every Friday")
        assert res["results"][0]["card"]["revision"] == 2


async def test_writes_go_on_during_a_rebuild_and_wait_only_for_a_short_switch(make_env):
    """Issue 14: updates issued one after another for the whole rebuild all answer, none waits
    long (the switch holds the writes' lock only for the catch-up of what was written since the
    previous pass, and takes the projection lock before it: no deadlock with jobs or writes),
    and the last revision ends up projected."""
    from shared.projection.rebuild import rebuild_index

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 12)
        await env.drain()
        card, latencies, done = cards[5], [], asyncio.Event()
        state = {"revision": 1}

        async def keep_writing() -> None:
            while not done.is_set():
                t0 = time.monotonic()
                r = await env.client.put(f"{BASE}/{card['id']}", headers=h, json=_rule(
                    "Rule 5 about invoices", f"Invoices are issued on day {state['revision']}.",
                    revision=state["revision"]))
                latencies.append(time.monotonic() - t0)
                assert r.status_code == 200, r.text
                state["revision"] = r.json()["card"]["revision"]
                await asyncio.sleep(0.01)

        async def start_writing(collection: str) -> None:
            writer.append(asyncio.create_task(keep_writing()))
            await asyncio.sleep(0.3)  # writes during the first pass too

        writer: list[asyncio.Task] = []
        r = await env.client.post(f"{BASE}/index", headers=h)
        rid = uuid.UUID(r.json()["id"])
        row = await asyncio.wait_for(rebuild_index(
            env.resources.db, env.resources.index, env.resources.embedder, "acme", rid,
            on_batch_written=start_writing), 120)
        await asyncio.sleep(0.2)  # and after the switch
        done.set()
        await asyncio.wait_for(writer[0], 30)
        assert row["status"] == "done" and row["summary"]["caught_up"] >= 1, row
        assert len(latencies) >= 5 and max(latencies) < 3, latencies
        await env.drain()
        await _assert_audit_clean(env)
        points = await env.resources.index.scroll_ids("acme")
        assert points[uuid.UUID(card["id"][4:])]["revision"] == state["revision"]


async def test_a_switch_waiting_for_a_projection_job_does_not_hold_up_writes(make_env):
    """Issue 14: the switch takes the projection lock before the writes' lock, so while it waits
    for a projection job in flight a write still answers at once (the other order would make
    every write wait for the job too); when the job ends the switch completes."""
    from shared.projection.rebuild import rebuild_index

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 3)
        await env.drain()
        job_ends = asyncio.Event()
        holding = asyncio.Event()

        async def job_in_flight() -> None:  # what a projection job holds while it projects
            async with env.resources.db.transaction("acme") as conn:
                await outbox.lock_for_projection(conn, "acme", [uuid.uuid4()])
                holding.set()
                await job_ends.wait()

        job = asyncio.create_task(job_in_flight())
        await asyncio.wait_for(holding.wait(), 30)
        r = await env.client.post(f"{BASE}/index", headers=h)
        rid = uuid.UUID(r.json()["id"])
        rebuild = asyncio.create_task(rebuild_index(
            env.resources.db, env.resources.index, env.resources.embedder, "acme", rid))
        try:
            deadline = time.monotonic() + 60
            while await _advisory_lock_waiters(env) < 1:  # the switch waits for the job
                assert not rebuild.done() and time.monotonic() < deadline
                await asyncio.sleep(0.05)
            t0 = time.monotonic()
            r = await asyncio.wait_for(env.client.put(
                f"{BASE}/{cards[2]['id']}", headers=h, json=_rule(
                    "Rule 2 about invoices", "Invoices are issued on the last day.", revision=1)),
                10)
            assert r.status_code == 200 and time.monotonic() - t0 < 3
            assert not rebuild.done()
        finally:
            job_ends.set()
            await job
        row = await asyncio.wait_for(rebuild, 60)
        assert row["status"] == "done", row
        await env.drain()
        await _assert_audit_clean(env)
        points = await env.resources.index.scroll_ids("acme")
        assert points[uuid.UUID(cards[2]["id"][4:])]["revision"] == 2


async def test_audit_finds_missing_stale_orphan_and_misplaced_points_and_repairs(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 4)
        await env.drain()
        index = env.resources.index
        ids = [uuid.UUID(c["id"][4:]) for c in cards]

        await index.delete("acme", [ids[0]])                      # missing
        await index_point(env, cards[1], ids[1], revision=7)               # stale
        orphan = uuid.uuid4()
        await index_point(env, cards[2], orphan)                           # orphan
        misplaced = uuid.uuid4()
        await index_point(env, cards[2], misplaced, workspace="other")     # misplaced
        r = await env.client.put(f"{BASE}/{cards[3]['id']}", headers=h, json=_rule(
            "Rule 3 about invoices", "Invoices are issued on Mondays.", revision=1))  # pending
        assert r.status_code == 200

        report = (await env.client.get(f"{BASE}/audit", headers=h)).json()
        assert report["missing"] == [cards[0]["id"]] and report["stale"] == [cards[1]["id"]]
        assert report["orphan"] == [f"mem-{orphan}"] and report["misplaced"] == [f"mem-{misplaced}"]
        assert report["pending"] == 1 and report["current"] == 1 and report["queued"] == []

        r = await env.client.post(f"{BASE}/audit/repair", headers=h)
        assert r.status_code == 202 and len(r.json()["queued"]) == 4
        await env.drain()
        report = (await env.client.get(f"{BASE}/audit", headers=h)).json()
        assert report["missing"] == report["stale"] == report["orphan"] == report["misplaced"] == []
        assert report["current"] == 4 and report["points"] == 4
        res = await _search(env, h)
        assert sorted(x["card"]["id"] for x in res["results"]) == sorted(c["id"] for c in cards)


async def test_a_burst_of_updates_to_one_card_never_records_an_older_revision(make_env):
    """Issue 7: arq with max_jobs=4 in one process, 30 quick updates of one card while the worker
    runs. The recorded projection's revision never goes down, and the end state is the last
    revision everywhere (PostgreSQL record, point payload, recall content)."""

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        card = (await _create(env, h, 1))[0]
        seen: list[int] = []

        def recorded() -> int:
            with psycopg.connect(env.migrator_url) as conn:
                row = conn.execute("SELECT revision FROM memory.projections WHERE card_id = %s",
                                   [uuid.UUID(card["id"][4:])]).fetchone()
            return row[0] if row else 0

        async with env.running_worker(max_jobs=4, poll_delay=0.01):
            revision = card["revision"]
            for i in range(30):
                r = await env.client.put(f"{BASE}/{card['id']}", headers=h, json=_rule(
                    "Rule 0 about invoices", f"Invoices are issued on day {i + 2}.",
                    revision=revision))
                assert r.status_code == 200, r.text
                revision = r.json()["card"]["revision"]
                seen.append(await asyncio.to_thread(recorded))
                await asyncio.sleep(0.01 * (i % 3))
            for _ in range(400):
                if await asyncio.to_thread(recorded) == revision:
                    break
                await asyncio.sleep(0.05)
        seen.append(await asyncio.to_thread(recorded))
        assert seen == sorted(seen), seen          # never an older revision after a newer one
        assert seen[-1] == revision == 31
        points = await env.resources.index.scroll_ids("acme")
        assert points[uuid.UUID(card["id"][4:])]["revision"] == revision
        res = await _search(env, h, "on which day are invoices issued")
        assert res["results"][0]["card"]["content"]["rule"] == "Invoices are issued on day 31."


async def test_an_interrupted_rebuild_is_queued_again_and_leaves_no_collection(make_env):
    """A graceful stop cancels a running rebuild: it goes back to `queued` at once (not `running`
    until its lease expires), its half-built collection is dropped, and the next worker run
    completes it."""
    from shared.projection.rebuild import rebuild_index

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 3)
        await env.drain()
        index = env.resources.index
        started = asyncio.Event()
        targets = []

        async def stall(collection: str) -> None:
            targets.append(collection)
            started.set()
            await asyncio.sleep(3600)

        r = await env.client.post(f"{BASE}/index", headers=h)
        rid = uuid.UUID(r.json()["id"])
        task = asyncio.create_task(rebuild_index(env.resources.db, index, env.resources.embedder,
                                                 "acme", rid, on_batch_written=stall))
        await asyncio.wait_for(started.wait(), 60)
        row = (await env.client.get(f"{BASE}/index/{rid}", headers=h)).json()
        assert row["status"] == "running"
        half_built = targets[0]
        assert set(await index.scroll_ids("acme", half_built)) == {uuid.UUID(c["id"][4:]) for c in cards}
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        row = (await env.client.get(f"{BASE}/index/{rid}", headers=h)).json()
        assert row["status"] == "queued" and row["done"] == 0, row
        assert await index.scroll_ids("acme", half_built) == {}
        if isinstance(index, QdrantEdgeEngine):
            assert not (index.root / half_built).exists()
        await env.drain()  # the worker's start-up sweep re-enqueues the queued rebuild
        row = (await env.client.get(f"{BASE}/index/{rid}", headers=h)).json()
        assert row["status"] == "done" and row["summary"]["written"] == 3, row
        res = await _search(env, h)
        assert sorted(x["card"]["id"] for x in res["results"]) == sorted(c["id"] for c in cards)


async def test_a_large_rebuild_optimizes_its_collection_out_of_process(make_env):
    """The rebuild's optimize step (HNSW, ``OPTIMIZE_MIN_CARDS`` lowered to 1 here): on Qdrant
    Edge a child process optimizes the private shard, which is reopened afterwards; the switched
    collection answers recall as before."""
    from shared.projection.rebuild import rebuild_index

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 3)
        await env.drain()
        r = await env.client.post(f"{BASE}/index", headers=h)
        rid = uuid.UUID(r.json()["id"])
        row = await rebuild_index(env.resources.db, env.resources.index, env.resources.embedder,
                                  "acme", rid, optimize_min_cards=1)
        assert row["status"] == "done", row
        assert isinstance(row["summary"]["optimized"], bool)
        res = await _search(env, h)
        assert sorted(x["card"]["id"] for x in res["results"]) == sorted(c["id"] for c in cards)
        assert set(await env.resources.index.scroll_ids("acme")) == {
            uuid.UUID(c["id"][4:]) for c in cards}


async def test_jobs_that_died_with_their_worker_are_offered_again_under_ids_of_their_own(make_env):
    """Issue 14: a worker killed mid-job leaves the job's arq keys in Redis, and arq keeps its
    in-progress key for the longest function timeout plus 10 s (six hours: the rebuild job's).
    The sweep offers a leased operation or rebuild whose lease expired under an attempt's own
    job id, so the next worker runs it at once instead of hours later. Here the dead worker is
    reproduced by its leftovers: the arq job and in-progress keys of the first attempt, and the
    PostgreSQL rows leased with an expired lease."""
    from arq.constants import in_progress_key_prefix

    from shared.projection.queue import PROJECT_JOB, REBUILD_JOB, job_id, rebuild_job_id

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 2)  # their jobs are queued: these are the dead attempts
        r = await env.client.post(f"{BASE}/index", headers=h)
        rid = uuid.UUID(r.json()["id"])
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            ops = [row[0] for row in conn.execute(
                "UPDATE memory.projection_ops SET status = 'running', attempts = 1, "
                "lease_expires_at = now() - interval '1 second' RETURNING id")]
            conn.execute("UPDATE memory.index_rebuilds SET status = 'running', started_at = now(), "
                         "lease_expires_at = now() - interval '1 second' WHERE id = %s", [rid])
        from arq import create_pool

        from shared.projection.queue import QUEUE_NAME, redis_settings

        pool = await create_pool(redis_settings(env.settings.redis_url), default_queue_name=QUEUE_NAME)
        try:
            dead = [job_id(op) for op in ops] + [rebuild_job_id(rid)]
            for jid in dead:  # what a SIGKILL leaves: queued job, marked in progress for hours
                await pool.psetex(in_progress_key_prefix + jid, 6 * 3600 * 1000, b"1")
            assert await pool.enqueue_job(PROJECT_JOB, "acme", ops[0], _job_id=job_id(ops[0])) is None
            assert await pool.enqueue_job(REBUILD_JOB, "acme", str(rid), _job_id=rebuild_job_id(rid)) is None
            queued_before = {x.decode() for x in await pool.zrange(QUEUE_NAME, 0, -1)}
            assert set(dead) <= queued_before
            # a worker (not a burst one: the dead jobs stay queued and "in progress"); its
            # start-up sweep offers the restarts
            async with env.running_worker():
                for _ in range(600):
                    row = (await env.client.get(f"{BASE}/index/{rid}", headers=h)).json()
                    left = env.scalar("SELECT count(*) FROM memory.projection_ops "
                                      "WHERE status <> 'done'")
                    if row["status"] == "done" and left == 0:
                        break
                    await asyncio.sleep(0.1)
            queued_after = {x.decode() for x in await pool.zrange(QUEUE_NAME, 0, -1)
                            if not x.startswith(b"cron:")}  # the next sweep may be queued
            assert queued_after == set(dead)  # only the dead attempts are left, still "in progress"
        finally:
            await pool.aclose()
        assert row["status"] == "done" and row["summary"]["written"] == 2, row
        attempts = env.scalar("SELECT min(attempts) FROM memory.projection_ops WHERE id = ANY(%s)", ops)
        assert left == 0 and attempts == 2
        res = await _search(env, h)
        assert sorted(x["card"]["id"] for x in res["results"]) == sorted(c["id"] for c in cards)


class _CountingCreation:
    """Test seam: the real engine, whose ``ensure_collection`` counts the calls in progress
    (and holds each for 0.3 s first, as a Qdrant server's create + alias round trips take), so
    that a test sees whether two projection jobs could create a workspace's collection at once.
    There is no Qdrant server here, whose alias would then keep one collection of the two."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.calls = 0
        self.inside = 0
        self.most_inside = 0

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    async def ensure_collection(self, *args, **kwargs):
        self.calls += 1
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        try:
            await asyncio.sleep(0.3)
            return await self._inner.ensure_collection(*args, **kwargs)
        finally:
            self.inside -= 1


async def test_concurrent_first_projections_create_one_collection(make_env):
    """Two projection jobs of a workspace without a collection (two workers, or one with
    ``worker_jobs`` 2) create it one at a time: the first under the workspace's
    collection-creation lock, the second then finds it made and writes into the same one."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 2)
        with psycopg.connect(env.migrator_url) as conn:
            op_ids = [i for (i,) in conn.execute(
                "SELECT id FROM memory.projection_ops WHERE status = 'pending' ORDER BY id")]
        assert len(op_ids) == 2
        res = env.resources
        counting = _CountingCreation(res.index)
        reports = await asyncio.gather(*(project_operations(
            res.db, counting, res.embedder, "acme", op_id, batch=False) for op_id in op_ids))
        assert [r.upserted for r in reports] == [1, 1], reports
        # both found no collection; the second waited for the first's creation to commit
        assert counting.most_inside == 1 and counting.calls in (1, 2), vars(counting)
        found = {x["card"]["id"] for x in (await _search(env, h))["results"]}
        assert found == {c["id"] for c in cards}


class _SlowEmbedder:
    """The test's real embedder, after ``seconds`` of waiting in every ``embed_texts`` call (a
    batch on a machine too busy to embed it within one lease); ``started`` is set on the first
    call."""

    def __init__(self, embedder, seconds: float):
        self._embedder, self._seconds, self.started = embedder, seconds, asyncio.Event()

    async def embed_texts(self, *args, **kwargs):
        self.started.set()
        await asyncio.sleep(self._seconds)
        return await self._embedder.embed_texts(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._embedder, name)


async def test_a_projection_slower_than_its_lease_keeps_its_operations(make_env):
    """A projection job whose batch takes longer than its lease (lease 1 s, embedding held 3 s)
    renews the leases of its operations, so no second worker reclaims and projects them again
    meanwhile; the job then completes them on their first attempt. Before the renewal the
    second worker's claim took all three (their lease had expired) and the job's work was
    repeated."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = await _create(env, h, 3)
        slow = _SlowEmbedder(env.resources.embedder, 3.0)
        task = asyncio.create_task(project_operations(
            env.resources.db, env.resources.index, slow, "acme", None, lease_seconds=1))
        await asyncio.wait_for(slow.started.wait(), 60)
        for _ in range(5):  # 2.5 s of the 3 s stall, beyond the 1 s lease
            await asyncio.sleep(0.5)
            assert env.scalar("SELECT bool_and(lease_expires_at > now()) FROM "
                              "memory.projection_ops WHERE status = 'running'") is True
            async with env.resources.db.transaction("acme") as conn:  # a second worker's claim
                assert await outbox.lease(conn, "acme", None, batch=True, limit=10,
                                          lease_seconds=1) == []
        report = await asyncio.wait_for(task, 60)
        assert (report.leased, report.upserted, report.failed) == (3, 3, 0), report
        assert env.scalar("SELECT array_agg(DISTINCT status || ':' || attempts) FROM "
                          "memory.projection_ops") == ["done:1"]
        found = {x["card"]["id"] for x in (await _search(env, h))["results"]}
        assert found == {c["id"] for c in cards}


async def test_a_lease_another_worker_took_over_is_not_renewed(make_env):
    """The renewal extends a lease only on the attempt it was taken with: once a second worker
    has claimed the expired operations (one more attempt), the first job's renewal extends
    nothing, and the second worker's lease stays as it took it."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await _create(env, h, 2)
        async with env.resources.db.transaction("acme") as conn:
            first = await outbox.lease(conn, "acme", None, batch=True, limit=10, lease_seconds=1)
            assert await outbox.renew(conn, first, 1) == 2  # still held: renewed
        await asyncio.sleep(1.2)
        async with env.resources.db.transaction("acme") as conn:
            second = await outbox.lease(conn, "acme", None, batch=True, limit=10,
                                        lease_seconds=60)
        assert sorted(o["attempts"] for o in second) == [2, 2]
        async with env.resources.db.transaction("acme") as conn:
            assert await outbox.renew(conn, first, 1) == 0
        assert env.scalar("SELECT bool_and(lease_expires_at > now() + interval '30 seconds') "
                          "FROM memory.projection_ops") is True


async def test_a_rebuild_keeps_its_lease_while_it_records_no_progress(make_env):
    """A rebuild that records no progress for longer than its lease (a long optimize step or
    catch-up; here a stalled hook after the first batch, lease 1 s) keeps renewing it, so the
    sweep never takes it for abandoned and no second worker claims it."""
    from shared.projection.rebuild import rebuild_index
    from shared.store import rebuilds

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await _create(env, h, 3)
        await env.drain()
        started = asyncio.Event()

        async def stall(collection: str) -> None:
            started.set()
            await asyncio.sleep(3.0)

        r = await env.client.post(f"{BASE}/index", headers=h)
        rid = uuid.UUID(r.json()["id"])
        task = asyncio.create_task(rebuild_index(
            env.resources.db, env.resources.index, env.resources.embedder, "acme", rid,
            lease_seconds=1, on_batch_written=stall))
        await asyncio.wait_for(started.wait(), 60)
        for _ in range(5):  # 2.5 s of stall, beyond the 1 s lease
            await asyncio.sleep(0.5)
            live = env.scalar("SELECT lease_expires_at > now() FROM memory.index_rebuilds "
                              "WHERE id = %s", rid)
            assert live is True
            async with env.resources.db.transaction("acme") as conn:  # a second worker's claim
                assert await rebuilds.claim(conn, rid, 1) is None
        row = await asyncio.wait_for(task, 60)
        assert row["status"] == "done", row
