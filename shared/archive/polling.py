"""The one deadline poll of the use cases: a call's ``wait`` (seconds, at most
:data:`~shared.models.MAX_WAIT_SECONDS`) for the worker, as a card's projection
(:class:`~shared.archive.cards.Archive`) or a schema-change run's point deletions
(:class:`~shared.archive.schema_changes.SchemaChanges`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from shared.models import MAX_WAIT_SECONDS

T = TypeVar("T")

#: seconds between two reads of a poll
POLL_INTERVAL_SECONDS = 0.1


async def poll(read: Callable[[], Awaitable[T]], done: Callable[[T], bool],
               seconds: float) -> T:
    """Call ``read`` every :data:`POLL_INTERVAL_SECONDS` until ``done`` holds for what it
    returned or ``seconds`` (clamped to 0..``MAX_WAIT_SECONDS``) have passed; returns the last
    read. ``read`` runs at least once; what it raises propagates."""
    deadline = time.monotonic() + min(max(seconds, 0.0), MAX_WAIT_SECONDS)
    while True:
        result = await read()
        if done(result) or time.monotonic() >= deadline:
            return result
        await asyncio.sleep(POLL_INTERVAL_SECONDS)
