"""Outages that start and end while the processes run (issue 14), with real processes.

- Redis: a ``redis-server`` of the test's own (never the machine's shared one) under a running
  ``memarc up``, SIGKILLed and restarted on the same port: saves stay 2xx with
  ``index_status: pending``, recall is correct or a 503 with a code, administration answers,
  ``/readyz`` and ``status`` name the queue as down, the process never exits, and once Redis is
  back every pending operation completes within the sweep interval plus the lease and the audit
  finds nothing to repair.
- PostgreSQL: a cluster of the test's own (``initdb`` into the test's folder) under a running
  ``memarc up``, stopped and started again: every route answers 503 ``database_unavailable``
  (never a 500, never a hang; the first one within about 0.3 s), the process stays up, and
  afterwards everything works again without a restart. The same under ``memarc writer`` +
  ``memarc worker`` as two processes (both stay up, the worker leases the open operations again).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
from helpers import ROOT, free_port, model_env, skip_or_fail, stop_process

pytestmark = pytest.mark.slow  # real processes, tens of seconds: still part of `make test`

#: sweep interval and lease of the processes under test (as the SIGKILL test sets them)
SWEEP_SECONDS, LEASE_SECONDS = 1, 3
#: every HTTP call of these tests is bounded: a hang is a failure, not a stuck run
TIMEOUT = httpx.Timeout(15.0)
BASE = "/api/workspaces/acme/memory"


def _wait_for(what: str, check, seconds: float, alive: subprocess.Popen | None = None,
              log: Path | None = None):
    """Poll ``check()`` until it returns a truthy value (returned) or ``seconds`` pass (fail);
    ``alive`` must not exit meanwhile."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            value = check()
        except (httpx.HTTPError, psycopg.OperationalError, OSError):
            value = None
        if value:
            return value
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"the process exited ({alive.returncode}) while waiting for "
                                 f"{what}: {log.read_text()[-3000:] if log else ''}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds} s"
                                 + (f"\n{log.read_text()[-3000:]}" if log else ""))
        time.sleep(0.2)


@contextmanager
def memarc_up(env_vars: dict[str, str], log: Path
              ) -> Iterator[tuple[subprocess.Popen, httpx.Client, httpx.Client]]:
    """``memarc up`` as a child process (its own session) on free ports, with a client on its
    writer once ``/healthz`` answers and one on its explorer signed in as the root actor (the
    sign-in link it prints); stopped (SIGTERM, then SIGKILL) on the way out."""
    import json
    import re

    port, explorer_port = free_port(), free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "writer.cli", "up", "--port", str(port), "--explorer-port",
             str(explorer_port)], cwd=ROOT, env=env_vars, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=TIMEOUT) as client, \
                httpx.Client(base_url=f"http://127.0.0.1:{explorer_port}", timeout=TIMEOUT) as explorer:
            _wait_for("memarc up answering", lambda: client.get("/healthz").status_code == 200,
                      120, proc, log)
            sign_in = json.loads(re.search(r'"explorer_sign_in": (".*?")', log.read_text()).group(1))
            _wait_for("the explorer's sign-in", lambda: explorer.get(sign_in).status_code in (200, 302),
                      30, proc, log)
            yield proc, client, explorer
    finally:
        stop_process(proc)


def _explorer_list(explorer: httpx.Client) -> httpx.Response:
    return explorer.get("/-/memory/acme.json")


def _up_env(tmp_path: Path, **values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMARC_")}
    env.update(model_env())
    env.update({"MEMARC_DATA_DIR": str(tmp_path / "up"), "MEMARC_LEASE_SECONDS": str(LEASE_SECONDS),
                "MEMARC_SWEEP_SECONDS": str(SWEEP_SECONDS), "MEMARC_LOG_LEVEL": "WARNING",
                "MEMARC_INDEX_ENGINE": os.environ.get("MEMARC_TEST_INDEX_ENGINE", "edge")})
    env.update(values)
    return env


def _redis_server(port: int, folder: Path, log: Path) -> subprocess.Popen:
    exe = shutil.which("redis-server")
    if exe is None:
        skip_or_fail("needs redis-server on PATH (an outage needs a Redis process of the test's own)")
    folder.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(folder)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    import redis

    def pong() -> bool:
        try:
            with redis.Redis(port=port, socket_timeout=1) as r:
                return bool(r.ping())
        except redis.exceptions.ConnectionError:
            return False

    _wait_for("redis-server answering", pong, 10, proc, log)
    return proc


def _open_ops(url: str) -> int:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        return conn.execute("SELECT count(*) FROM memory.projection_ops WHERE status <> 'done'"
                            ).fetchone()[0]


def _recall(client: httpx.Client, h: dict[str, str], query: str) -> list[dict] | None:
    """The recall's cards, or None for a 503 with a code (anything else fails)."""
    r = client.post(f"{BASE}/search", headers=h, json={"query": query, "top": 5})
    if r.status_code == 503:
        assert r.json().get("code"), r.text
        return None
    assert r.status_code == 200, r.text
    return [x["card"] for x in r.json()["results"]]


def _acme(make_env) -> tuple[dict[str, str], str, str]:
    """Workspace ``acme`` in the test's database (``make_env``'s, on the shared PostgreSQL):
    headers with a token, the owner's URL and the runtime URL for the processes under test."""
    import asyncio

    async def setup():
        async with make_env() as env:
            env.workspace("acme")
            return env.token("acme"), env.migrator_url, env.settings.database_url

    return asyncio.run(setup())


def _card(title: str, rule: str) -> dict:
    return {"family": "sql_rule", "title": title, "content": {"rule": rule}}


def test_redis_outage_under_memarc_up(make_env, tmp_path):
    """Redis killed and restarted under a running ``memarc up``."""
    h, migrator_url, database_url = _acme(make_env)
    rport = free_port()
    redis_log = tmp_path / "redis.log"
    redis_proc = _redis_server(rport, tmp_path / "redis", redis_log)
    log = tmp_path / "up.log"
    env_vars = _up_env(tmp_path, MEMARC_DATABASE_URL=database_url,
                       MEMARC_MIGRATOR_DATABASE_URL=migrator_url,
                       MEMARC_REDIS_URL=f"redis://127.0.0.1:{rport}/0")
    try:
        with memarc_up(env_vars, log) as (proc, client, explorer):
            r = client.get("/readyz")
            assert r.status_code == 200 and r.json()["dependencies"]["queue"] == "up", r.text
            r = client.post(BASE, headers=h, json=_card("Fiscal year", "The fiscal year starts in April."))
            assert r.status_code == 201, r.text
            first = r.json()["card"]
            _wait_for("the first card projected", lambda: _open_ops(migrator_url) == 0, 60, proc, log)
            assert first["id"] in [c["id"] for c in _recall(client, h, "fiscal year April")]

            redis_proc.kill()
            redis_proc.wait(10)
            # saves commit and say the projection is pending; recall is correct or a coded 503
            r = client.post(BASE, headers=h, json=_card("Churn", "Churn counts customers lost per month."))
            assert r.status_code == 201 and r.json()["index_status"] == "pending", r.text
            second = r.json()["card"]
            r = client.put(f"{BASE}/{first['id']}", headers=h, json={
                **_card("Fiscal year", "The fiscal year starts in October, not April."),
                "revision": first["revision"]})
            assert r.status_code == 200 and r.json()["index_status"] == "pending", r.text
            time.sleep(2 * SWEEP_SECONDS + 1)  # the worker meets the outage (poll loop, sweep)
            assert proc.poll() is None, log.read_text()[-3000:]
            hits = _recall(client, h, "fiscal year")
            if hits is not None:  # the old point of the updated card is never served as current
                assert all(c["content"]["rule"] != "The fiscal year starts in April." for c in hits)
            # administration answers, and readiness and status name the queue as down
            r = client.get(BASE, headers=h)
            assert r.status_code == 200 and r.json()["total"] == 2, r.text
            r = client.get(f"{BASE}/{second['id']}", headers=h)
            assert r.status_code == 200, r.text
            r = _explorer_list(explorer)  # the explorer keeps answering
            assert r.status_code == 200 and len(r.json()["cards"]) == 2, r.text[:500]
            r = client.get("/readyz")
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "degraded" and r.json()["dependencies"]["queue"] == "down", r.text
            r = client.get(f"{BASE}/status", headers=h)
            assert r.status_code == 200 and r.json()["dependencies"]["queue"] == "down", r.text
            assert r.json()["open_operations"] >= 2
            r = client.get(f"{BASE}/pending", headers=h)
            assert r.status_code == 200, r.text
            r = client.get(f"{BASE}/audit", headers=h)  # the embedded index needs no Redis
            assert r.status_code == 200 and r.json()["pending"] == 2, r.text
            assert proc.poll() is None, log.read_text()[-3000:]

            redis_proc = _redis_server(rport, tmp_path / "redis", redis_log)
            started = time.monotonic()
            # every pending operation completes within the sweep interval plus the lease (and
            # the worker's reconnection backoff, at most a few seconds)
            _wait_for("pending operations completed", lambda: _open_ops(migrator_url) == 0,
                      SWEEP_SECONDS + LEASE_SECONDS + 10, proc, log)
            took = time.monotonic() - started
            hits = _recall(client, h, "customers lost per month")
            assert hits is not None and second["id"] in [c["id"] for c in hits]
            hits = _recall(client, h, "fiscal year October")
            assert hits is not None
            assert [c["content"]["rule"] for c in hits if c["id"] == first["id"]] == [
                "The fiscal year starts in October, not April."]
            r = client.get(f"{BASE}/audit", headers=h)
            assert r.status_code == 200, r.text
            a = r.json()
            assert a["pending"] == 0 and a["missing"] == a["stale"] == a["orphan"] == a["misplaced"] == []
            assert a["current"] == a["cards"] == a["points"] == 2
            r = client.get("/readyz")
            assert r.json() == {"status": "ready", "dependencies": {"database": "up", "queue": "up"}}
            assert proc.poll() is None, log.read_text()[-3000:]
            print(f"pending operations completed {took:.1f} s after Redis came back")
        text = log.read_text()
        # one warning per outage, not one per job or poll
        assert text.count("projection queue connection lost") == 1, text[-3000:]
    finally:
        if redis_proc.poll() is None:
            redis_proc.kill()
            redis_proc.wait(10)


PG_BIN = Path("/usr/lib/postgresql/15/bin")
#: what the worker logs (once) when PostgreSQL goes away (shared/worker.py)
PG_OUTAGE_LOGGED = "projection and the sweep wait for it"


class PostgresCluster:
    """A PostgreSQL cluster of the test's own: ``initdb`` into a folder (as the ``postgres``
    user when the test runs as root: initdb and postgres refuse root), started and stopped with
    ``pg_ctl`` on a loopback port."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = folder, port
        self.data = folder / "data"
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *argv: str) -> None:
        r = subprocess.run([*self._as, *argv], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (argv, r.stdout[-2000:], r.stderr[-2000:])

    def init(self) -> None:
        """initdb (trust authentication, superuser ``postgres``, no fsync: a test's cluster)."""
        if not (PG_BIN / "initdb").exists():
            skip_or_fail(f"needs PostgreSQL's initdb in {PG_BIN} (a cluster of the test's own)")
        if self._as and shutil.which("runuser") is None:
            skip_or_fail("running as root needs runuser to run initdb as the postgres user")
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._as:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run(str(PG_BIN / "initdb"), "-A", "trust", "-U", "postgres", "--no-sync",
                  "-D", str(self.data))

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "log"),
                  "-w", "-t", "30", "-o",
                  f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off",
                  "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions terminated; ``immediate``: a crash)."""
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "30",
                  "stop")

    def running(self) -> bool:
        """True when the server's postmaster is running."""
        return (self.data / "postmaster.pid").exists()


def _pg_folder() -> Path:
    """A new folder for a cluster outside pytest's temporary folders (those are private to the
    user running the tests; the ``postgres`` user must own this one)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="memarc-outage-pg-"))


def _calls(client: httpx.Client, h: dict[str, str], card: dict) -> dict[str, httpx.Response]:
    """One request per route family the outage must not break."""
    cid = card["id"]
    return {
        "list": client.get(BASE, headers=h),
        "show": client.get(f"{BASE}/{cid}", headers=h),
        "create": client.post(BASE, headers=h, json=_card("During", "Written during the outage.")),
        "update": client.put(f"{BASE}/{cid}", headers=h, json={
            **_card(card["title"], "Changed during the outage."), "revision": card["revision"]}),
        "delete": client.delete(f"{BASE}/{cid}", headers=h),
        "retry": client.post(f"{BASE}/{cid}/retry", headers=h),
        "search": client.post(f"{BASE}/search", headers=h, json={"query": "fiscal year"}),
        "feedback": client.post(f"{BASE}/recalls/{uuid.uuid4()}/feedback", headers=h,
                                json={"cards": [{"card_id": cid, "verdict": "helpful"}]}),
        "recalls": client.get(f"{BASE}/recalls", headers=h),
        "status": client.get(f"{BASE}/status", headers=h),
        "pending": client.get(f"{BASE}/pending", headers=h),
        "activity": client.get(f"{BASE}/activity", headers=h),
        "audit": client.get(f"{BASE}/audit", headers=h),
        "index": client.get(f"{BASE}/index", headers=h),
        "import": client.post(f"{BASE}/import", headers={**h, "Content-Type": "application/x-ndjson"},
                              content=b'{"key": "k", "family": "sql_rule", "title": "I", '
                                      b'"content": {"rule": "Imported."}}'),
        "readyz": client.get("/readyz"),
    }


def test_postgresql_outage_under_memarc_up(redis_url, tmp_path):
    """PostgreSQL stopped (fast, then immediate) and started again under a running ``memarc up``."""
    from shared.store.bootstrap import create_token, create_workspace

    pg = PostgresCluster(_pg_folder(), free_port())
    log = tmp_path / "up.log"
    env_vars = _up_env(tmp_path, MEMARC_DATABASE_URL=pg.url, MEMARC_MIGRATOR_DATABASE_URL=pg.url,
                       MEMARC_REDIS_URL=redis_url)
    try:
        pg.init()
        pg.start()
        with memarc_up(env_vars, log) as (proc, client, explorer):
            _wait_for("migrated and ready", lambda: client.get("/readyz").status_code == 200, 60,
                      proc, log)
            create_workspace(pg.url, "memory", "acme", "en")
            h = {"Authorization": "Bearer " + create_token(pg.url, "memory", "acme",
                                                           ["memory.manage"])["token"]}
            r = client.post(BASE, headers=h, json=_card("Fiscal year", "The fiscal year starts in April."))
            assert r.status_code == 201, r.text
            card = r.json()["card"]
            _wait_for("the card projected", lambda: _open_ops(pg.url) == 0, 60, proc, log)
            for n, mode in enumerate(("fast", "immediate")):
                pg.stop(mode)
                started = time.monotonic()
                answers = _calls(client, h, card)
                took = time.monotonic() - started
                wrong = {route: (r.status_code, r.text[:300]) for route, r in answers.items()
                         if r.status_code != 503 or r.json().get("code") != "database_unavailable"}
                assert wrong == {}, (mode, wrong)
                r = _explorer_list(explorer)  # the explorer answers too, with the same code
                assert r.status_code == 503 and r.json()["code"] == "database_unavailable", r.text[:500]
                # fail fast: the first request finds the server gone by a direct probe after
                # 0.3 s of pool wait (it waited the pool's whole 5 s before), the others are
                # refused at once
                assert took < 3, f"{len(answers)} requests took {took:.1f} s with PostgreSQL down"
                print(f"PostgreSQL stopped ({mode}): {len(answers)} routes answered 503 "
                      f"database_unavailable in {took:.1f} s")
                time.sleep(2 * SWEEP_SECONDS)  # the worker's sweep meets the outage too
                assert proc.poll() is None, log.read_text()[-3000:]
                assert client.get("/healthz").status_code == 200

                pg.start()
                # everything works again without a restart: the pool reconnects by itself
                _wait_for("the list answering again",
                          lambda: client.get(BASE, headers=h).status_code == 200, 20, proc, log)
                r = client.put(f"{BASE}/{card['id']}", headers=h, json={
                    **_card("Fiscal year", f"The fiscal year starts in month {n + 10}."),
                    "revision": card["revision"]})
                assert r.status_code == 200, r.text
                card = r.json()["card"]
                r = client.post(BASE, headers=h, json=_card(f"After {mode}", f"Written after the {mode} stop."))
                assert r.status_code == 201, r.text
                _wait_for("pending operations completed", lambda: _open_ops(pg.url) == 0,
                          SWEEP_SECONDS + LEASE_SECONDS + 10, proc, log)
                hits = _recall(client, h, f"fiscal year month {n + 10}")
                assert hits is not None
                assert [c["revision"] for c in hits if c["id"] == card["id"]] == [card["revision"]]
                r = client.get(BASE, headers=h)
                assert r.status_code == 200 and r.json()["total"] == 2 + n, r.text
                r = _explorer_list(explorer)
                assert r.status_code == 200 and len(r.json()["cards"]) == 2 + n, r.text[:500]
                r = client.get(f"{BASE}/audit", headers=h)
                a = r.json()
                assert r.status_code == 200 and a["pending"] == 0, r.text
                assert a["missing"] == a["stale"] == a["orphan"] == a["misplaced"] == [], a
            assert proc.poll() is None, log.read_text()[-3000:]
        text = log.read_text()
        # the worker says so once per outage (not a traceback per sweep, every second)
        assert text.count("projection and the sweep wait for it") == 2, text[-3000:]
        assert "cron:sweep failed" not in text and "project_operation failed" not in text, text[-3000:]
    finally:
        if pg.running():
            pg.stop("immediate")
        shutil.rmtree(pg.folder, ignore_errors=True)


@contextmanager
def _process(argv: list[str], env_vars: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "writer.cli", *argv], cwd=ROOT,
                                env=env_vars, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield proc
    finally:
        stop_process(proc)


def _attempts(url: str, card_id: str) -> int:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT max(attempts) FROM memory.projection_ops WHERE card_id = %s",
                           [card_id[4:]]).fetchone()
    return row[0] or 0


@contextmanager
def _writer_and_worker(env_vars: dict[str, str], tmp_path: Path, owner_url: str,
                       h: dict[str, str]) -> Iterator[tuple[subprocess.Popen, subprocess.Popen,
                                                             httpx.Client, dict]]:
    """``memarc writer`` and ``memarc worker`` as two processes (logs ``writer.log`` and
    ``worker.log`` in ``tmp_path``) with a client on the writer, once it is ready, a first card
    saved (pending: no index server) and its operation leased by the worker (read with the
    owner's URL); yields ``(writer, worker, client, first card)``, both stopped on the way out."""
    port = free_port()
    wlog, klog = tmp_path / "writer.log", tmp_path / "worker.log"
    with _process(["writer", "--port", str(port)], env_vars, wlog) as writer, \
            _process(["worker"], env_vars, klog) as worker, \
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=TIMEOUT) as client:
        _wait_for("the writer ready", lambda: client.get("/readyz").status_code == 200,
                  60, writer, wlog)
        r = client.post(BASE, headers=h, json=_card("Fiscal year", "The fiscal year starts in April."))
        assert r.status_code == 201 and r.json()["index_status"] == "pending", r.text
        first = r.json()["card"]
        _wait_for("the worker leasing the first operation",
                  lambda: _attempts(owner_url, first["id"]) >= 1, 60, worker, klog)
        yield writer, worker, client, first


def test_redis_outage_under_separate_writer_and_worker(make_env, tmp_path):
    """Redis killed and restarted under ``memarc writer`` + ``memarc worker`` as two processes.

    Separate processes need a Qdrant server and the machine has none: ``MEMARC_QDRANT_URL``
    names a closed port, so projections fail (and stay open) while the queue itself is what is
    tested: the worker reconnects by itself and leases the operations saved during the outage,
    logging the lost connection once."""
    h, migrator_url, database_url = _acme(make_env)
    rport = free_port()
    redis_log = tmp_path / "redis.log"
    redis_proc = _redis_server(rport, tmp_path / "redis", redis_log)
    env_vars = _up_env(tmp_path, MEMARC_DATABASE_URL=database_url,
                       MEMARC_MIGRATOR_DATABASE_URL=migrator_url,
                       MEMARC_REDIS_URL=f"redis://127.0.0.1:{rport}/0",
                       MEMARC_QDRANT_URL=f"http://127.0.0.1:{free_port()}",
                       MEMARC_MAX_ATTEMPTS="1000")
    wlog, klog = tmp_path / "writer.log", tmp_path / "worker.log"
    try:
        with _writer_and_worker(env_vars, tmp_path, migrator_url, h) as (writer, worker, client,
                                                                         first):

            redis_proc.kill()
            redis_proc.wait(10)
            r = client.post(BASE, headers=h, json=_card("Churn", "Churn counts customers lost per month."))
            assert r.status_code == 201 and r.json()["index_status"] == "pending", r.text
            second = r.json()["card"]
            hits = _recall(client, h, "churn")  # no index server: a 503 with a code
            assert hits is None or second["id"] not in [c["id"] for c in hits]
            r = client.get(BASE, headers=h)
            assert r.status_code == 200 and r.json()["total"] == 2, r.text
            r = client.get("/readyz")
            assert r.status_code == 200 and r.json()["dependencies"]["queue"] == "down", r.text
            r = client.get(f"{BASE}/status", headers=h)
            assert r.status_code == 200 and r.json()["dependencies"]["queue"] == "down", r.text
            time.sleep(3 * SWEEP_SECONDS + 1)  # several polls, sweeps and backoff turns
            assert writer.poll() is None, wlog.read_text()[-3000:]
            assert worker.poll() is None, klog.read_text()[-3000:]
            assert _attempts(migrator_url, second["id"]) == 0

            redis_proc = _redis_server(rport, tmp_path / "redis", redis_log)
            _wait_for("the worker leasing the operation saved during the outage",
                      lambda: _attempts(migrator_url, second["id"]) >= 1,
                      SWEEP_SECONDS + LEASE_SECONDS + 10, worker, klog)
            r = client.get("/readyz")
            assert r.json()["dependencies"]["queue"] == "up", r.text
            assert writer.poll() is None and worker.poll() is None
            # a worker stopped while Redis is gone exits cleanly, within its grace
            redis_proc.kill()
            redis_proc.wait(10)
            time.sleep(1)
            os.killpg(worker.pid, signal.SIGTERM)
            assert worker.wait(30) == 0, klog.read_text()[-3000:]
            assert "Traceback" not in klog.read_text(), klog.read_text()[-3000:]
        text = klog.read_text()
        # once per outage (two outages), not once per job or poll
        assert text.count("projection queue connection lost") == 2, text[-3000:]
        assert text.count("Connect call failed") <= 3, text[-3000:]
    finally:
        if redis_proc.poll() is None:
            redis_proc.kill()
            redis_proc.wait(10)


async def test_the_writer_logs_a_queue_outage_once_and_its_end(tmp_path):
    """Issue 14: while Redis is down every save is still a success (pending), and the writer's
    queue logs the outage once, not once per save; the first enqueue after Redis is back logs
    the end, and a second outage is logged again. A redis-server of the test's own is killed
    and started again on the same port."""
    import logging

    from shared.projection.queue import ProjectionQueue

    port = free_port()
    proc = _redis_server(port, tmp_path / "redis", tmp_path / "redis.log")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("shared.projection.queue")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    queue = ProjectionQueue(f"redis://127.0.0.1:{port}/0")
    try:
        assert await queue.enqueue("acme", [1])

        def warnings() -> list[str]:
            return [r.getMessage() for r in records if r.levelno >= logging.WARNING]

        for outage in (1, 2):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            assert [await queue.enqueue("acme", [10 * outage + i]) for i in range(4)] == [False] * 4
            assert not await queue.enqueue_rebuild("acme", "r")
            assert len(warnings()) == outage, warnings()  # once per outage, not per save
            assert "logged once until the queue answers again" in warnings()[-1]
            proc = _redis_server(port, tmp_path / "redis", tmp_path / "redis.log")
            assert await queue.enqueue("acme", [100 + outage])
            assert [r.getMessage() for r in records].count("projection queue reachable again") == outage
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        await queue.close()
        stop_process(proc)


def test_postgresql_outage_under_separate_writer_and_worker(redis_url, tmp_path):
    """PostgreSQL stopped (fast, then immediate) and started again under ``memarc writer`` +
    ``memarc worker`` as two processes.

    The writer answers every route 503 ``database_unavailable`` while PostgreSQL is down, the
    first request within about a second (the pool's checkout probes the server after 0.3 s
    instead of waiting the whole pool timeout); both processes stay up, the worker logs each
    outage once, and afterwards everything works again without a restart: saves commit and the
    worker leases every open operation, the ones saved before the outage too.

    Separate processes need a Qdrant server and the machine has none: ``MEMARC_QDRANT_URL``
    names a closed port (as in the Redis test above), so projections fail and stay open and the
    audit answers 503 ``index_unavailable``; that they complete and the audit finds nothing is
    checked under ``memarc up`` (:func:`test_postgresql_outage_under_memarc_up`)."""
    from shared.store.bootstrap import create_token, create_workspace

    pg = PostgresCluster(_pg_folder(), free_port())
    env_vars = _up_env(tmp_path, MEMARC_DATABASE_URL=pg.url, MEMARC_MIGRATOR_DATABASE_URL=pg.url,
                       MEMARC_REDIS_URL=redis_url,
                       MEMARC_QDRANT_URL=f"http://127.0.0.1:{free_port()}",
                       MEMARC_MAX_ATTEMPTS="1000")
    wlog, klog = tmp_path / "writer.log", tmp_path / "worker.log"
    try:
        pg.init()
        pg.start()
        # one login for both (a throwaway cluster): accepted explicitly
        r = subprocess.run([sys.executable, "-m", "writer.cli", "migrate", "--allow-runtime-login"],
                           cwd=ROOT, env=env_vars, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        create_workspace(pg.url, "memory", "acme", "en")
        h = {"Authorization": "Bearer " + create_token(pg.url, "memory", "acme",
                                                       ["memory.manage"])["token"]}
        with _writer_and_worker(env_vars, tmp_path, pg.url, h) as (writer, worker, client, card):
            for n, mode in enumerate(("fast", "immediate")):
                pg.stop(mode)
                t0 = time.monotonic()
                first = client.get(BASE, headers=h)
                first_took = time.monotonic() - t0
                assert first.status_code == 503, first.text
                answers = _calls(client, h, card)
                took = time.monotonic() - t0
                answers["first list"] = first
                wrong = {route: (r.status_code, r.text[:300]) for route, r in answers.items()
                         if r.status_code != 503 or r.json().get("code") != "database_unavailable"}
                assert wrong == {}, (mode, wrong)
                # fail fast: the first request after the server went away, and all the others
                assert first_took < 2.0, f"the first request took {first_took:.2f} s"
                assert took < 8, f"{len(answers)} requests took {took:.1f} s with PostgreSQL down"
                print(f"PostgreSQL stopped ({mode}) under writer + worker: first request 503 in "
                      f"{first_took:.2f} s, {len(answers)} routes 503 database_unavailable in "
                      f"{took:.2f} s")
                # the worker notices (its sweep, or a job, meets the outage: bounded, as its two
                # job slots may be busy embedding on a loaded machine) and logs it once, not once
                # per sweep over the next several sweeps
                _wait_for("the worker logging the outage",
                          lambda: klog.read_text().count(PG_OUTAGE_LOGGED) == n + 1, 30, worker,
                          klog)
                time.sleep(3 * SWEEP_SECONDS)
                assert klog.read_text().count(PG_OUTAGE_LOGGED) == n + 1, klog.read_text()[-3000:]
                assert writer.poll() is None, wlog.read_text()[-3000:]
                assert worker.poll() is None, klog.read_text()[-3000:]
                assert client.get("/healthz").status_code == 200

                pg.start()
                _wait_for("the list answering again",
                          lambda: client.get(BASE, headers=h).status_code == 200, 20, writer, wlog)
                before = _attempts(pg.url, card["id"])
                r = client.put(f"{BASE}/{card['id']}", headers=h, json={
                    **_card("Fiscal year", f"The fiscal year starts in month {n + 10}."),
                    "revision": card["revision"]})
                assert r.status_code == 200 and r.json()["index_status"] == "pending", r.text
                card = r.json()["card"]
                r = client.post(BASE, headers=h, json=_card(f"After {mode}", f"Written after the {mode} stop."))
                assert r.status_code == 201, r.text
                after = r.json()["card"]
                r = client.get(BASE, headers=h)
                assert r.status_code == 200 and r.json()["total"] == 2 + n, r.text
                r = client.get("/readyz")
                assert r.status_code == 200 and r.json()["dependencies"]["database"] == "up", r.text
                # the worker works again without a restart: it leases the operations saved
                # after the outage and retries the open one saved before it
                _wait_for("the worker leasing the operation saved after the outage",
                          lambda: _attempts(pg.url, after["id"]) >= 1,
                          SWEEP_SECONDS + LEASE_SECONDS + 10, worker, klog)
                _wait_for("the worker retrying the operation saved before the outage",
                          lambda: _attempts(pg.url, card["id"]) > before,
                          SWEEP_SECONDS + LEASE_SECONDS + 10, worker, klog)
                r = client.get(f"{BASE}/audit", headers=h)  # no index server: a 503 with its code
                assert r.status_code == 503 and r.json()["code"] == "index_unavailable", r.text
            assert writer.poll() is None, wlog.read_text()[-3000:]
            assert worker.poll() is None, klog.read_text()[-3000:]
        text = klog.read_text()
        # the worker says so once per outage (not a traceback per poll or sweep)
        assert text.count(PG_OUTAGE_LOGGED) == 2, text[-3000:]
        assert "cron:sweep failed" not in text, text[-3000:]
        assert "Traceback" not in wlog.read_text(), wlog.read_text()[-3000:]
    finally:
        if pg.running():
            pg.stop("immediate")
        shutil.rmtree(pg.folder, ignore_errors=True)
