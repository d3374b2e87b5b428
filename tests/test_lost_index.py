"""An index that knows it lost something (issue 25 case 1, DESIGN §4, migration 022).

The engine's files of a workspace's collection are removed, under a stopped archive (the engine
closed, then opened again as a restart does) and under a running one (the engine open, a worker
running). PostgreSQL records which collection holds the valid projections, so:

- recall answers 503 ``index_unavailable`` until the collection is rebuilt, and every 200 it
  gives meanwhile holds every card (polled during the healing: never a silent partial 200,
  which is what a fresh collection made for one new card gave before);
- the worker notices by itself (its start-up and periodic check, and a projection job), voids
  the recorded projections (the cards show as pending), and rebuilds the collection under a new
  name; afterwards ``/status`` and the audit agree: every card current, nothing missing.

The same with a real ``memarc up`` process: ``tests/test_lost_index_up.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from shared.index.edge import QdrantEdgeEngine

BASE = "/api/workspaces/acme/memory"
CARDS = 6


def _rule(i: int) -> dict:
    return {"family": "sql_rule", "title": f"Rule {i} about invoices",
            "content": {"rule": f"Invoices of region {i} are issued on day {i + 1}."}}


async def _recall(env, h) -> tuple[int, dict]:
    r = await env.client.post(f"{BASE}/search", headers=h,
                              json={"query": "when are invoices issued", "top": 50})
    return r.status_code, r.json()


async def _remove_engine_files(env, stop: bool = False) -> str:
    """Remove the files of workspace ``acme``'s collection from the engine's storage (after
    closing the engine with ``stop``, as a stopped archive): the Qdrant Edge shard folder (its
    pointer file stays, as when a shard is deleted by hand), or the whole storage folder of
    qdrant-client's local mode (which recreates a collection whose folder alone is gone, empty,
    under the same name). Returns the collection's physical name."""
    index = env.resources.index
    physical = await index.physical_collection("acme")
    assert physical is not None
    if stop:
        await index.close()  # it opens again on its next call, as a restart does
    if isinstance(index, QdrantEdgeEngine):
        shutil.rmtree(Path(env.settings.data_dir) / "edge" / physical)
    else:
        shutil.rmtree(env.settings.resolved_qdrant_path())
    return physical


async def _heal_while_polling(env, h, ids: set[str], seconds: float = 120) -> dict[int, int]:
    """Poll recall until it answers 200 with every card in ``ids``; every answer meanwhile is a
    503 ``index_unavailable`` or a 200 holding every card. Returns ``{status: count}``."""
    seen: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    while True:
        status, body = await _recall(env, h)
        seen[status] = seen.get(status, 0) + 1
        if status == 200:
            got = {x["card"]["id"] for x in body["results"]}
            assert got == ids, (f"a partial 200: {len(got & ids)} of {len(ids)} cards, "
                                f"excluded={body['excluded']}")
            return seen
        assert status == 503 and body["code"] == "index_unavailable", body
        assert time.monotonic() < deadline, f"recall still 503 after {seconds} s: {body}"
        await asyncio.sleep(0.2)


async def _status_and_audit_agree(env, h, n: int) -> None:
    status = (await env.client.get(f"{BASE}/status", headers=h)).json()
    assert status["cards"] == status["current"] == n and status["open_operations"] == 0, status
    audit = (await env.client.get(f"{BASE}/audit", headers=h)).json()
    assert audit["cards"] == audit["current"] == audit["points"] == n, audit
    assert audit["pending"] == 0 and audit["missing"] == audit["stale"] == [], audit


async def _projected_cards(env, h) -> set[str]:
    ids = set()
    for i in range(CARDS):
        r = await env.client.post(BASE, headers=h, json=_rule(i))
        assert r.status_code == 201, r.text
        ids.add(r.json()["card"]["id"])
    await env.drain()
    status, body = await _recall(env, h)
    assert status == 200 and {x["card"]["id"] for x in body["results"]} == ids
    return ids


@pytest.mark.both_engines
async def test_files_removed_under_a_stopped_archive_heal_on_the_next_start(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        ids = await _projected_cards(env, h)
        lost = await _remove_engine_files(env, stop=True)
        # restarted (the engine reopens on its next call): recall knows before any worker runs
        status, body = await _recall(env, h)
        assert status == 503 and body["code"] == "index_unavailable", body
        # a new card before the worker runs (its job used to make a fresh, one-card collection)
        r = await env.client.post(BASE, headers=h, json=_rule(CARDS))
        assert r.status_code == 201, r.text
        ids.add(r.json()["card"]["id"])
        async with env.running_worker():
            seen = await _heal_while_polling(env, h, ids)
        assert await env.resources.index.physical_collection("acme") != lost
        await _status_and_audit_agree(env, h, CARDS + 1)
        assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'index-lost'") == 1
        print(f"recall answers while healing: {seen}")


async def test_a_shard_removed_under_a_running_archive_heals_without_an_operator(
        make_env, monkeypatch):
    monkeypatch.setattr("shared.worker.INDEX_CHECK_SECONDS", 1.0, raising=False)
    async with make_env(index_engine="edge") as env:
        env.workspace("acme")
        h = env.token("acme")
        ids = await _projected_cards(env, h)
        async with env.running_worker():
            lost = await _remove_engine_files(env)
            status, body = await _recall(env, h)
            assert status == 503 and body["code"] == "index_unavailable", body
            r = await env.client.post(BASE, headers=h, json=_rule(CARDS))
            assert r.status_code == 201, r.text
            ids.add(r.json()["card"]["id"])
            seen = await _heal_while_polling(env, h, ids)
        assert await env.resources.index.physical_collection("acme") not in (None, lost)
        await _status_and_audit_agree(env, h, CARDS + 1)


async def test_the_worker_voids_the_projections_of_a_lost_collection_and_queues_one_rebuild(
        make_env):
    """What the recovery writes, step by step, before any rebuild runs: the cards show as
    pending in /status and in the audit (they agree), one rebuild is queued however often the
    loss is seen, and a projection job leaves its operations pending instead of making a new
    collection."""
    from shared.projection import recovery
    from shared.projection.project import project_operations

    async with make_env(index_engine="edge") as env:
        env.workspace("acme")
        h = env.token("acme")
        await _projected_cards(env, h)
        res = env.resources
        assert await recovery.verify(res.db, res.index, "acme") == recovery.OK
        await _remove_engine_files(env)
        assert await recovery.verify(res.db, res.index, "acme") == recovery.REBUILDING
        assert await recovery.verify(res.db, res.index, "acme") == recovery.REBUILDING
        assert env.scalar("SELECT count(*) FROM memory.index_rebuilds") == 1
        assert env.scalar("SELECT collection FROM memory.index_collections") is None
        status = (await env.client.get(f"{BASE}/status", headers=h)).json()
        assert status["current"] == 0 and status["open_operations"] == CARDS, status
        audit = (await env.client.get(f"{BASE}/audit", headers=h)).json()
        assert audit["pending"] == CARDS and audit["missing"] == [], audit
        report = await project_operations(res.db, res.index, res.embedder, "acme", None)
        assert report.leased == 0 and "being rebuilt" in report.errors[0], report
        assert await res.index.physical_collection("acme") is None  # nothing made afresh
        status, body = await _recall(env, h)
        assert status == 503 and "being rebuilt" in body["detail"], body
        await env.drain()  # the queued rebuild
        assert await recovery.verify(res.db, res.index, "acme") == recovery.OK
        await _status_and_audit_agree(env, h, CARDS)


async def test_a_collection_made_before_the_record_is_adopted_only_if_it_holds_every_card(
        make_env):
    """A workspace projected before migration 022 has no recorded collection: its collection is
    recorded as it is, unless a card recorded as projected has no point in it (a collection
    made afresh after a loss, as the old code did), which is then a lost one."""
    from shared.projection import recovery

    async with make_env(index_engine="edge") as env:
        env.workspace("acme")
        h = env.token("acme")
        await _projected_cards(env, h)
        res = env.resources
        physical = await res.index.physical_collection("acme")
        env.scalar("DELETE FROM memory.index_collections RETURNING 1")
        assert await recovery.verify(res.db, res.index, "acme") == recovery.ADOPT
        assert env.scalar("SELECT collection FROM memory.index_collections") == physical
        env.scalar("DELETE FROM memory.index_collections RETURNING 1")
        one = env.scalar("SELECT card_id FROM memory.projections LIMIT 1")
        await res.index.delete("acme", [one])
        assert await recovery.verify(res.db, res.index, "acme") == recovery.REBUILDING
        await env.drain()
        await _status_and_audit_agree(env, h, CARDS)
