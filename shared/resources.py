"""The process resources: what one process opens once and shares, and the use cases built on them.

:class:`Resources` holds the database pool, queue, index, embedder, privacy filter and the
process's metrics; :meth:`Resources.archive` is the one construction of the archive's use cases (writer, runner,
explorer, benchmarks and tests all take theirs from it); :func:`open_index` picks the index
engine from the settings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from shared.archive.cards import Archive, metrics_outage_log
from shared.archive.recall_records import RecallRecorder, records_outage_log
from shared.config import Settings
from shared.errors import DatabaseUnavailable
from shared.index.embedding import Embedder
from shared.index.engine import IndexEngine
from shared.index.qdrant import QdrantClientEngine
from shared.metrics import Metrics
from shared.models import PROJECTION_FORMAT
from shared.privacy import PrivacyFilter
from shared.projection.queue import OutageLog, ProjectionQueue
from shared.store.database import Database
from shared.store.outbox import check_projection_format

log = logging.getLogger(__name__)


def open_index(settings: Settings) -> IndexEngine:
    """The index engine: qdrant-client for a server (``MEMARC_QDRANT_URL``); without one, the
    embedded engine chosen by ``MEMARC_INDEX_ENGINE`` (qdrant-client local mode or Qdrant Edge)."""
    if settings.embedded_qdrant and settings.index_engine == "edge":
        from shared.index.edge import QdrantEdgeEngine

        return QdrantEdgeEngine(settings)
    return QdrantClientEngine(settings)


def index_engine_name(settings: Settings) -> str:
    """The index engine :func:`open_index` opens, as the metrics name it: ``qdrant-server``,
    ``qdrant-edge`` or ``qdrant-local``."""
    if not settings.embedded_qdrant:
        return "qdrant-server"
    return "qdrant-edge" if settings.index_engine == "edge" else "qdrant-local"


@dataclass
class Resources:
    """What one process opens once and shares: database pool, queue, index, embedder, the
    privacy filter applied to everything sent to the embedder or the index, the process's
    metrics (:class:`~shared.metrics.Metrics`, a registry of its own per set of resources) and
    the log of the database outages they meet (logged once per outage, whichever archive of
    the process reads them), and the log of lost recall records (the same, for the records)."""

    settings: Settings
    db: Database
    queue: ProjectionQueue
    index: IndexEngine | None
    embedder: Embedder | None
    privacy: PrivacyFilter = field(default_factory=PrivacyFilter)
    metrics: Metrics = field(default_factory=Metrics)
    metrics_outage: OutageLog = field(default_factory=metrics_outage_log)
    records_outage: OutageLog = field(default_factory=records_outage_log)

    @classmethod
    async def open(cls, settings: Settings, *, with_index: bool = True,
                   check_schema: bool = True) -> "Resources":
        """Open the pool (and check the schema), the queue, and optionally index + embedder.

        :raises SchemaOutdated: the database is not migrated. :raises DatabaseUnavailable.
        """
        if not settings.database_url:
            raise ValueError("MEMARC_DATABASE_URL (or MEMARC_DATABASE_HOST) is not set")
        db = Database(settings.database_url, settings.db_schema,
                      max_size=settings.db_pool_size, timeout=settings.db_pool_timeout_seconds,
                      lock_timeout=settings.lock_timeout_seconds)
        await db.open()
        if check_schema:
            try:
                await db.check_schema()
                await check_projection_format(db)
            except DatabaseUnavailable as exc:
                # Start anyway: requests answer 503 until PostgreSQL is back.
                log.warning("starting without PostgreSQL: %s", exc.message)
            except Exception:
                await db.close()
                raise
        index = open_index(settings) if with_index else None
        embedder = Embedder(settings) if with_index else None
        metrics = Metrics(index_engine_name(settings) if with_index else "none", PROJECTION_FORMAT)
        return cls(settings, db, ProjectionQueue(settings.redis_url), index, embedder,
                   PrivacyFilter(max_chars=settings.privacy_max_chars), metrics)

    def archive(self) -> Archive:
        """The archive's use cases over these resources: card administration, the index
        lifecycle and recall (:class:`~shared.archive.cards.Archive`), with the session workflow
        (``.workflow``) and the schema-change cleanup (``.schema_changes``) over the same
        database and queue. Recall sends its query and filter values through :attr:`privacy`,
        the filter that projection uses (``MEMARC_PRIVACY_MAX_CHARS``), observes its stages
        in :attr:`metrics`, and records each recall a caller asks
        (:class:`~shared.archive.recall_records.RecallRecorder`: its query text only when
        ``MEMARC_RECALL_QUERY_TEXT`` is on; lost records logged in :attr:`records_outage`).
        A new, cheap object per call that holds no state of its own (only references to these
        resources and settings, the outage logs included), so it follows a
        resource replaced since; without an index or embedder, recall raises
        :class:`~shared.errors.IndexUnavailable` / :class:`~shared.errors.EmbedderUnavailable`.
        """
        recorder = RecallRecorder(self.db, self.privacy, self.metrics,
                                  query_text=self.settings.recall_query_text,
                                  outage=self.records_outage)
        return Archive(self.db, self.queue, self.index, self.embedder, privacy=self.privacy,
                       metrics=self.metrics, metrics_outage=self.metrics_outage,
                       model_root=self.settings.shadow_model_root(),
                       dense_model=self.settings.dense_model, recorder=recorder)

    async def close(self) -> None:
        """Close everything opened."""
        await self.queue.close()
        if self.index is not None:
            await self.index.close()
        await self.db.close()
