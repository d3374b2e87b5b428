"""The explorer's connections: the runner's shared resources, or a pool opened on first use.

In the single-process default (``memarc up``), and in ``memarc explorer`` with a Qdrant server,
the runner sets ``datasette.memarc_resources`` (a :class:`shared.resources.Resources`): the
explorer then uses its database pool and, for the recall page, the archive it builds
(:meth:`~shared.resources.Resources.archive`: its index, embedder and privacy filter). Without
them a standalone explorer browses only: it opens its own :class:`shared.store.database.Database`
lazily, on the first request, in the serving event loop (Datasette 0.65 has no shutdown hook: the
pool lives until the process exits; :func:`close` exists for tests and embedding hosts).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from shared.archive.cards import Archive
from shared.archive.feedback import Feedback
from shared.errors import DatabaseUnavailable, Unavailable
from shared.store.database import Database

from . import config

_STATE_ATTR = "_memarc_explorer_state"

#: What the recall page says when this process has no index or embedder.
INDEX_NOT_AVAILABLE = ("The search index is not available in this process (start `memarc up`, "
                       "or configure MEMARC_QDRANT_URL).")
#: What the pages say of feedback when this explorer runs without the runner's resources.
FEEDBACK_NOT_AVAILABLE = ("Feedback is not available in this process: it runs with the archive "
                          "(start `memarc up`, or `memarc explorer` with MEMARC_QDRANT_URL).")


@dataclass
class _State:
    db: Database | None = None
    schema_checked: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _state(datasette: Any) -> _State:
    state = getattr(datasette, _STATE_ATTR, None)
    if state is None:
        state = _State()
        setattr(datasette, _STATE_ATTR, state)
    return state


def _shared(datasette: Any) -> Any:
    return getattr(datasette, "memarc_resources", None)


async def database(datasette: Any) -> Database:
    """The database to read from: the runner's pool, else this explorer's own pool, opened and
    its schema checked on first use.

    :raises DatabaseUnavailable: no database URL is configured, or PostgreSQL cannot be reached.
    :raises SchemaOutdated: the archive schema is missing or outdated.
    """
    shared = _shared(datasette)
    if shared is not None:
        return shared.db
    state = _state(datasette)
    if state.db is not None and state.schema_checked:
        return state.db
    async with state.lock:
        if state.db is None:
            url, schema = config.load(datasette).connection()
            if not url:
                raise DatabaseUnavailable(
                    "the explorer has no database: set MEMARC_DATABASE_URL or "
                    f"plugins.{config.PLUGIN_NAME}.database_url")
            db = Database(url, schema)
            await db.open()
            state.db = db
        if not state.schema_checked:
            await state.db.check_schema()
            state.schema_checked = True
        return state.db


def search_archive(datasette: Any) -> Archive | None:
    """The archive whose recall the recall page calls (the process's resources, with their index,
    embedder and privacy filter), or None when this process has no index or embedder (the page
    then says so)."""
    shared = _shared(datasette)
    if shared is None or shared.index is None or shared.embedder is None:
        return None
    return shared.archive()


def feedback(datasette: Any) -> Feedback:
    """Feedback on recalls and the records of recalls, over the process's resources (no index
    needed): the recall page's buttons write through it, the record and card pages read.

    :raises Unavailable: this explorer runs without the runner's resources (it only browses).
    """
    shared = _shared(datasette)
    if shared is None:
        raise Unavailable(FEEDBACK_NOT_AVAILABLE)
    return shared.archive().feedback


async def close(datasette: Any) -> None:
    """Close the pool this explorer opened itself (never the runner's shared resources)."""
    state = getattr(datasette, _STATE_ATTR, None)
    if state is not None and state.db is not None:
        db, state.db, state.schema_checked = state.db, None, False
        await db.close()
