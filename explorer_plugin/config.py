"""The explorer's settings: the ``memarc-explorer`` block of Datasette's ``plugins`` metadata.

```json
{"plugins": {"memarc-explorer": {
    "database_url": {"$env": "MEMARC_DATABASE_URL"},
    "schema": "memory",
    "workspaces": {"alice": ["acme"], "bob": "*"}
}}}
```

- ``database_url``: libpq URL of the login the explorer connects with (default: the
  ``MEMARC_DATABASE_URL`` environment, with ``MEMARC_DATABASE_PASSWORD_FILE``). Not needed when
  the runner hands the explorer its shared resources (``datasette.memarc_resources``).
- ``schema``: PostgreSQL schema of the archive (default ``MEMARC_DB_SCHEMA``, else ``memory``).
- ``admin_url``: the writer's administration pages (``http://host:8000/admin``): card, list
  and pending pages link there to edit, delete and retry (default ``MEMARC_ADMIN_URL``; unset:
  the pages say where editing happens).
- ``workspaces``: actor id -> list of workspace ids, or ``"*"`` for every workspace. The root actor
  (``datasette --root``) sees every workspace; an actor not mapped sees none (unless another
  plugin grants the ``memarc-view-workspace`` permission).

Read when needed (start-up and requests), never at import time.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shared.config import load_settings

PLUGIN_NAME = "memarc-explorer"
ALL = "*"


class ConfigError(ValueError):
    """The ``memarc-explorer`` plugin configuration is not valid."""


class ExplorerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Resolved plugin settings (``database_url`` / ``schema`` as configured, None when unset)."""

    database_url: str | None
    schema: str | None
    #: actor id -> workspace ids; ``None`` means every workspace
    workspaces: dict[str, frozenset[str] | None]
    #: the writer's administration pages, linked from the explorer's (None: not configured)
    admin_url: str | None = None

    def workspaces_of(self, actor_id: str) -> frozenset[str] | None:
        """The workspaces mapped to an actor id: a set (empty when unmapped), or None for all."""
        return self.workspaces.get(actor_id, frozenset())

    def connection(self) -> tuple[str | None, str]:
        """``(database URL, schema)``: the configured values, else the environment's
        (``MEMARC_DATABASE_URL`` with ``MEMARC_DATABASE_PASSWORD_FILE``, ``MEMARC_DB_SCHEMA``,
        default schema ``memory``)."""
        if self.database_url is not None and self.schema is not None:
            return self.database_url, self.schema
        settings = load_settings()
        return self.database_url or settings.database_url, self.schema or settings.db_schema


class _Raw(msgspec.Struct, forbid_unknown_fields=True):
    database_url: str | None = None
    schema: str | None = None
    workspaces: dict[str, str | list[str]] = {}
    admin_url: str | None = None


def load(datasette: Any) -> ExplorerConfig:
    """The plugin configuration of ``datasette``.

    :raises ConfigError: unknown keys or a malformed ``workspaces`` mapping.
    """
    raw_value = datasette.plugin_config(PLUGIN_NAME) or {}
    try:
        raw = msgspec.convert(raw_value, _Raw)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"plugins.{PLUGIN_NAME}: {exc}") from exc
    workspaces: dict[str, frozenset[str] | None] = {}
    for actor_id, value in raw.workspaces.items():
        if isinstance(value, str):
            if value != ALL:
                raise ConfigError(f"plugins.{PLUGIN_NAME}.workspaces.{actor_id}: expected a list "
                                  f"of workspace ids or {ALL!r}, got {value!r}")
            workspaces[actor_id] = None
        else:
            workspaces[actor_id] = None if ALL in value else frozenset(value)
    return ExplorerConfig(database_url=raw.database_url or None, schema=raw.schema or None,
                          workspaces=workspaces,
                          admin_url=(raw.admin_url or load_settings().admin_url or "").rstrip("/")
                          or None)
