"""Test helpers shared by the test modules: the test archive (:class:`Env`), servers on loopback
and the CLI against them, index points written behind the archive's back, catalogue row counts,
and skips that CI refuses.

Test modules import these directly (``from helpers import ...``); ``conftest.py`` holds only the
fixtures and pytest hooks, and imports from here what they need.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import msgspec
import psycopg
import pytest
from litestar import Litestar

from shared.config import Settings
from shared.worker import build_worker, stop_worker
from shared.resources import Resources
from shared.store.bootstrap import create_token, create_workspace

#: the repository's root folder
ROOT = Path(__file__).resolve().parents[1]
#: the team's offline model copies (``../shared/models``), used when present
SHARED_MODELS = ROOT.parent / "shared" / "models"
#: the embedded index engines a ``both_engines`` test runs on
ENGINES = ("edge", "local")


def with_database(url: str, dbname: str) -> str:
    """``url`` (a PostgreSQL URL) with its database name replaced by ``dbname``."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


#: the Redis database each test flushes when neither setting names one
DEFAULT_TEST_REDIS_DB = 9


def redis_test_url(url: str, db: str | None = None) -> str:
    """The URL of the Redis database the tests use, from ``MEMARC_TEST_REDIS_URL`` (``url``) and
    ``MEMARC_TEST_REDIS_DB`` (``db``, may be unset).

    The URL may name the database itself, as a path (``redis://host:6379/15``) or a ``db`` query
    parameter (``redis://host:6379?db=15``, ``unix:///run/redis.sock?db=15``): it is honoured,
    and ``MEMARC_TEST_REDIS_DB``, when also set, must name the same one. Otherwise the database
    is ``MEMARC_TEST_REDIS_DB``, else :data:`DEFAULT_TEST_REDIS_DB`. Credentials and other query
    parameters are kept. The answer names the database once: a path for ``redis://`` and
    ``rediss://``, ``?db=`` for ``unix://``.

    :raises ValueError: an unsupported scheme, a database that is not a number 0..65535, or
        two different databases named (the message says which settings and how to fix them).
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"MEMARC_TEST_REDIS_URL {url!r}: the scheme must be redis://, rediss:// "
                         "or unix://")
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [v for k, v in query if k == "db"]
    path = parts.path
    if parts.scheme != "unix" and path.strip("/"):
        named.append(path.strip("/"))
        path = ""
    if db is not None and db.strip():
        named.append(db.strip())
    for value in named:
        if not (value.isascii() and value.isdigit() and int(value) <= 65535):
            raise ValueError(f"MEMARC_TEST_REDIS_URL {url!r} / MEMARC_TEST_REDIS_DB {db!r}: "
                             f"{value!r} is not a Redis database number (redis://host:6379/15)")
    numbers = sorted({int(v) for v in named})
    if len(numbers) > 1:
        raise ValueError(f"MEMARC_TEST_REDIS_URL {url!r} and MEMARC_TEST_REDIS_DB {db!r} name "
                         f"different Redis databases ({', '.join(map(str, numbers))}): give the "
                         "number in one of them, or the same number in both")
    number = numbers[0] if numbers else DEFAULT_TEST_REDIS_DB
    rest = [(k, v) for k, v in query if k != "db"]
    if parts.scheme == "unix":
        return f"unix://{parts.netloc}{path}?{urlencode([*rest, ('db', str(number))])}"
    return urlunsplit((parts.scheme, parts.netloc, f"/{number}", urlencode(rest), ""))


def xdist_worker() -> int:
    """This process's pytest-xdist worker number (``gw3`` → 3), 0 outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


#: Redis servers have 16 databases unless configured otherwise
REDIS_DATABASES = 16


def worker_redis_url(url: str, worker: int) -> str:
    """The Redis database of xdist worker ``worker``: the database of ``url`` (as
    :func:`redis_test_url` answers it) plus ``worker``, so that parallel workers never flush
    each other's database (worker 0 keeps the URL as it is).

    :raises ValueError: the shifted number is past the server's 16 databases."""
    if worker == 0:
        return url
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if parts.scheme == "unix":
        number = int(dict(query)["db"]) + worker
        rest = [(k, v) for k, v in query if k != "db"]
        shifted = f"unix://{parts.netloc}{parts.path}?{urlencode([*rest, ('db', str(number))])}"
    else:
        number = int(parts.path.strip("/")) + worker
        shifted = urlunsplit((parts.scheme, parts.netloc, f"/{number}", parts.query, ""))
    if number >= REDIS_DATABASES:
        raise ValueError(f"xdist worker {worker} would use Redis database {number}: give "
                         f"MEMARC_TEST_REDIS_DB a number of at most {REDIS_DATABASES - 1 - worker}"
                         " (each worker uses the next one)")
    return shifted


def model_env() -> dict[str, str]:
    """Model settings (``MEMARC_DENSE_MODEL_PATH``, ``MEMARC_BM25_MODEL_PATH``): the
    environment's, else the team's offline copies when present, else none (fastembed
    downloads)."""
    env = {}
    for key, folder in (("MEMARC_DENSE_MODEL_PATH", "all-MiniLM-L6-v2-onnx"),
                        ("MEMARC_BM25_MODEL_PATH", "bm25")):
        value = os.environ.get(key) or (str(SHARED_MODELS / folder)
                                        if (SHARED_MODELS / folder).exists() else "")
        if value:
            env[key] = value
    return env


@dataclass
class Env:
    """One test's archive (what ``async with make_env() as env`` gives): its settings, its
    process resources, the writer app and an HTTP client on it (in-process ASGI transport), and
    the database owner's URL (``migrator_url``, no row-level security)."""

    settings: Settings
    resources: Resources
    client: httpx.AsyncClient
    migrator_url: str
    app: Litestar

    def workspace(self, name: str, language: str = "en") -> None:
        """Create workspace ``name`` (as the migrator, like ``memarc workspace``)."""
        create_workspace(self.migrator_url, "memory", name, language)

    def scalar(self, query: str, *params: Any) -> Any:
        """The first column of the first row of ``query``, as the database owner (no RLS)."""
        with psycopg.connect(self.migrator_url) as conn:
            return conn.execute(query, params).fetchone()[0]

    def rows(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Every row of ``query``, as the database owner (no RLS)."""
        with psycopg.connect(self.migrator_url) as conn:
            return conn.execute(query, params).fetchall()

    def no_automatic_evaluations(self) -> None:
        """The worker queues no evaluation run of its own (``MEMARC_EVAL_EVERY_HOURS=0``): the
        runs a test sees are the ones it asked for (an automatic run takes the workspace's one
        open run and writes activity and runs of its own)."""
        self.resources.settings = msgspec.structs.replace(self.resources.settings,
                                                          eval_every_hours=0.0)

    def token(self, workspace: str, *permissions: str, **kw: Any) -> dict[str, str]:
        """Headers with a new bearer token of ``workspace`` (default permission
        ``memory.manage``; ``kw`` as :func:`shared.store.bootstrap.create_token`)."""
        perms = list(permissions) or ["memory.manage"]
        tok = create_token(self.migrator_url, "memory", workspace, perms, **kw)["token"]
        return {"Authorization": f"Bearer {tok}"}

    async def drain(self, max_jobs: int = 2) -> None:
        """Run a burst worker until the queue is empty (its start-up sweep re-enqueues pending
        operations and queued rebuilds first)."""
        worker = build_worker(self.resources, burst=True, max_jobs=max_jobs, poll_delay=0.05)
        try:
            await worker.main()
        finally:
            await worker.close()

    @asynccontextmanager
    async def running_worker(self, **kw: Any) -> AsyncIterator[Any]:
        """A worker (not a burst one: it keeps polling) running in the background for the
        block, then stopped as ``memarc worker`` stops (:func:`stop_worker`); ``kw`` as
        :func:`build_worker` (``poll_delay`` 0.05 unless given)."""
        worker = build_worker(self.resources, **{"poll_delay": 0.05, **kw})
        task = asyncio.create_task(worker.async_run())
        try:
            yield worker
        finally:
            await stop_worker(worker)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def skip_or_fail(reason: str) -> None:
    """Skip a test whose environment is missing (no chromium, no datasets folder, PostgreSQL
    only over a socket), or fail it when ``MEMARC_NO_SKIP`` is set: ``.ci/run`` sets it, so in CI
    every test runs or the run is red."""
    if os.environ.get("MEMARC_NO_SKIP"):
        pytest.fail(f"MEMARC_NO_SKIP is set, but: {reason}")
    pytest.skip(reason)


async def index_point(env: Env, card_json: dict[str, Any], pid: uuid.UUID | None = None,
                      **payload_overrides: Any) -> uuid.UUID:
    """Write a point straight into the workspace ``acme``'s index, bypassing PostgreSQL (a
    ghost, forged or misplaced point), with real embeddings of every named vector of the card
    (as the projection builds them); ``pid`` defaults to the card's own id. Returns the point id."""
    from shared.models import Card
    from shared.projection.project import build_points

    card = Card(**{**card_json, "dependencies": [], "links": [], "source": None})
    point = (await build_points(env.resources.embedder, [card], "en"))[0]
    pid = pid or uuid.UUID(card.id[4:])
    await env.resources.index.upsert("acme", [msgspec.structs.replace(
        point, id=pid, payload={**point.payload, **payload_overrides})])
    return pid


async def make_incompatible_collection(index: Any, workspace: str, dimension: int = 384,
                                      recorded_in: str | None = None) -> None:
    """Replace the workspace collection by one without the BM25 vector and with a dense vector
    of ``dimension`` (an old deployment's), on either embedded engine, through their public
    interface only. ``recorded_in``: a migrator URL; the new collection is then recorded as the
    workspace's (migration 022), as an old deployment's own collection would be, so that the
    worker sees an incompatible layout to wait on (``memarc index``) and not a replaced collection
    to rebuild by itself. The engines:

    - Qdrant Edge: a legacy shard ``<name>__legacy`` next to the engine's shards, switched in
      with :meth:`~shared.index.edge.QdrantEdgeEngine.switch_collection`;
    - qdrant-client local mode: a collection named like the workspace itself (as collections
      were before aliases), created by a client of our own on the engine's storage while the
      engine is closed (it reopens on its next call).
    """
    from shared.index.edge import QdrantEdgeEngine

    await index.drop(workspace)
    if isinstance(index, QdrantEdgeEngine):
        import qdrant_edge as qe

        physical = f"{index.collection(workspace)}__legacy"
        folder = index.root / physical / "shard"
        folder.mkdir(parents=True)
        qe.EdgeShard.create(str(folder), qe.EdgeConfig(vectors={
            "dense": qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)})).close()
        await index.switch_collection(workspace, physical)
    else:
        from qdrant_client import QdrantClient
        from qdrant_client import models as qm

        await index.close()  # releases the storage lock; the engine reopens on its next call

        def create() -> None:
            client = QdrantClient(path=index.settings.resolved_qdrant_path())
            try:
                client.create_collection(index.collection(workspace), vectors_config={
                    "dense": qm.VectorParams(size=dimension, distance=qm.Distance.COSINE)})
            finally:
                client.close()

        await asyncio.to_thread(create)
    if recorded_in is not None:
        physical = await index.physical_collection(workspace)
        with psycopg.connect(recorded_in, autocommit=True) as conn:
            conn.execute("INSERT INTO memory.index_collections (workspace_id, collection) "
                         "VALUES (%s, %s) ON CONFLICT (workspace_id) DO UPDATE SET "
                         "collection = excluded.collection, recorded_at = now()",
                         [workspace, physical])


def stop_process(proc: Any, grace: float = 20.0) -> None:
    """Stop a child process started in its own session (``start_new_session=True``) with its
    whole process group: SIGTERM, then SIGKILL after ``grace`` seconds; a no-op once it exited."""
    import signal
    import subprocess

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def free_port() -> int:
    """A free TCP port on loopback (free when asked; a server binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def start_server(app: Any, lifespan: str = "off") -> tuple[Any, asyncio.Task, str]:
    """Serve an ASGI app with uvicorn on a free loopback port in this event loop (no lifespan by
    default: the app's resources belong to the caller; ``lifespan="on"`` runs it, e.g. for the
    writer's MCP session manager); returns ``(server, task, base_url)`` for :func:`stop_server`."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan=lifespan))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    return server, task, f"http://127.0.0.1:{port}"


async def stop_server(server: Any, task: asyncio.Task) -> None:
    """Stop a server started by :func:`start_server` and wait until it has shut down."""
    server.should_exit = True
    await task


def archive_tables(conn: psycopg.Connection, schema: str = "memory") -> list[str]:
    """Every ordinary or partitioned table of the archive schema, from the catalogue, by name."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname", [schema])
    return [r[0] for r in rows]


def archive_row_counts(conn: psycopg.Connection, schema: str = "memory") -> dict[str, int]:
    """Row count of every table of the archive schema, ``{table: rows}`` (as the connection's
    role: a superuser sees every workspace)."""
    from psycopg import sql

    tables = archive_tables(conn, schema)
    query = sql.SQL("SELECT {}").format(sql.SQL(", ").join(
        sql.SQL("(SELECT count(*) FROM {}.{})").format(sql.Identifier(schema), sql.Identifier(t))
        for t in tables))
    return dict(zip(tables, conn.execute(query).fetchone()))


def row_changes(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The tables whose row count differs between two :func:`archive_row_counts`, with the
    difference (``after - before``)."""
    return {t: after[t] - before[t] for t in after if after[t] != before[t]}


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    """Run ``memarc *argv`` (in a thread: its HTTP client blocks) with the output captured by
    ``capsys``; returns (exit code, standard output parsed as JSON or None when empty, the last
    line of standard error or "")."""
    from writer.cli import main

    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out = capsys.readouterr()
    return (code, json.loads(out.out) if out.out.strip() else None,
            (out.err.strip().splitlines() or [""])[-1])


@asynccontextmanager
async def live_writer(make_env: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                      *permissions: str, settings: dict[str, Any] | None = None
                      ) -> AsyncIterator[Env]:
    """An archive (``make_env(**settings)``) with workspace ``acme`` whose writer serves on
    loopback, and ``MEMARC_URL`` / ``MEMARC_TOKEN`` set for the CLI (a token of ``acme`` with
    ``permissions``, default ``memory.manage``), and ``MEMARC_STATE_DIR`` (the summaries
    ``memarc summary`` remembers) a folder of its own; the server stops on the way out."""
    import tempfile

    from writer.app import create_app

    async with make_env(**(settings or {})) as env:
        env.workspace("acme")
        token = env.token("acme", *permissions)["Authorization"].split()[1]
        server, task, url = await start_server(create_app(env.settings, env.resources))
        monkeypatch.setenv("MEMARC_URL", url)
        monkeypatch.setenv("MEMARC_TOKEN", token)
        with tempfile.TemporaryDirectory(prefix="memarc-state-") as state:
            monkeypatch.setenv("MEMARC_STATE_DIR", state)
            try:
                yield env
            finally:
                await stop_server(server, task)
