"""Shared set-up of the benchmarks: a fresh archive database, an embedded index, imported cards.

PostgreSQL comes from ``MEMARC_BENCH_DATABASE_URL`` (a superuser URL), else
``MEMARC_TEST_DATABASE_URL``, else ``postgresql://postgres@127.0.0.1:5432/postgres``. The index
is qdrant-client's local mode in a temporary folder (or ``MEMARC_QDRANT_URL``). Models come from
``MEMARC_DENSE_MODEL_PATH`` / ``MEMARC_BM25_MODEL_PATH`` or ``../shared/models``.
``MEMARC_BENCH_PREFIX`` (default empty) is put before every database name, so that two sessions
running the same benchmark on one server do not drop each other's databases.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from shared.archive.cards import Archive
from shared.auth import Principal
from shared.config import load_settings
from shared.models import ImportCard
from shared.projection.project import project_operations
from shared.resources import Resources
from shared.store.bootstrap import create_workspace
from shared.store.migrations import migrate

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT.parent / "shared" / "models"
#: the BIRD mini-dev questions (the team folder's datasets), which the latency benchmarks ask
BIRD_QUESTIONS = ROOT.parent / "shared" / "datasets" / "bird_minidev" / "mini_dev_postgresql.json"


def latency_summary(latencies: list[float], digits: int = 2) -> dict[str, float]:
    """``{p50_ms, p95_ms, recalls}`` of latencies in seconds (milliseconds, ``digits``
    decimals)."""
    ms = sorted(x * 1000 for x in latencies)
    return {"p50_ms": round(statistics.median(ms), digits),
            "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], digits), "recalls": len(ms)}


def admin_url() -> str:
    return (os.environ.get("MEMARC_BENCH_DATABASE_URL") or os.environ.get("MEMARC_TEST_DATABASE_URL")
            or "postgresql://postgres@127.0.0.1:5432/postgres")


def model_env() -> dict[str, str]:
    env = {}
    for key, folder in (("MEMARC_DENSE_MODEL_PATH", "all-MiniLM-L6-v2-onnx"),
                        ("MEMARC_BM25_MODEL_PATH", "bm25")):
        value = os.environ.get(key) or (str(MODELS / folder) if (MODELS / folder).exists() else "")
        if value:
            env[key] = value
    if os.environ.get("MEMARC_QDRANT_URL"):
        env["MEMARC_QDRANT_URL"] = os.environ["MEMARC_QDRANT_URL"]
    return env


@dataclass
class BenchArchive:
    archive: Archive
    resources: Resources
    principal: Principal
    workspace: str
    db_url: str
    seconds_to_project: float

    async def close(self) -> None:
        await self.resources.close()


async def build(name: str, cards: list[ImportCard], workspace: str = "bench") -> BenchArchive:
    """A fresh database ``memarc_bench_<name>`` with ``cards`` imported and fully projected."""
    base = admin_url()
    dbname = f"memarc_bench_{os.environ.get('MEMARC_BENCH_PREFIX', '')}{name}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    p = urlsplit(base)
    url = urlunsplit((p.scheme, p.netloc, "/" + dbname, p.query, p.fragment))
    migrate(url, "memory", runtime_login=p.username)
    create_workspace(url, "memory", workspace, "en")
    tmp = tempfile.mkdtemp(prefix=f"memarc-bench-{name}-")
    settings = load_settings(model_env(), database_url=url, migrator_database_url=url,
                             data_dir=tmp, collection_prefix=f"bench_{name}_")
    resources = await Resources.open(settings, with_index=True)
    resources.embedder.load(("en",))
    archive = resources.archive()
    principal = Principal(workspace=workspace, permissions=frozenset({"memory.manage"}),
                          actor="bench")
    if cards:  # an empty import is refused (422 no cards); an empty archive imports nothing
        await archive.transfer.import_cards(principal, workspace, cards)
    started = time.perf_counter()
    while True:
        report = await project_operations(resources.db, resources.index, resources.embedder,
                                          workspace, None)
        if report.errors:
            raise RuntimeError(report.errors[0])
        if report.leased == 0:
            break
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")  # planner statistics, as autovacuum would gather them
    return BenchArchive(archive, resources, principal, workspace, url,
                        time.perf_counter() - started)
