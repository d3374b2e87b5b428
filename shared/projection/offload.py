"""The projection's pure-Python CPU work, off the event loop (issue 25, case 2).

Under ``memarc up`` the writer, the worker and the explorer share one process and one event
loop, so whatever the projection computes on that loop, the API and recall wait for. Embedding
already runs in worker threads (onnxruntime releases the GIL). Building a card's documents does
not: the privacy filter is ~20 ``re.sub`` passes over every projected text, 0.3-0.5 s for a text
of 120,000 characters on this machine, and one of those C calls holds the GIL for up to 130 ms.

So the documents (:func:`~shared.projection.documents.projected_document`, privacy filter
included) are built in **one child process** (a bounded pool of one worker, started on first
use through ``forkserver``: no fork of a process that runs threads). Threads were measured and
are not enough: with the filter in a thread the event loop still waited up to 208 ms per GIL
hand-over (p95 148 ms), against 44 ms (p95 19 ms) with the child process, and 3.3 s with the
filter on the loop (8 texts of 120,000 characters; ``bench/loop_latency.py`` measures the
whole archive). The cards and the filter cross to the child pickled (a few MB for a batch of
long cards, milliseconds); one worker keeps the filter's throughput where it was (it ran
serially on the loop before) while the loop stays free.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from shared import models
from shared.errors import PrivacyFilterFailed
from shared.models import Card
from shared.privacy import PrivacyFilter
from shared.projection.documents import projected_document

#: A card's documents: the text of each named vector and the point payload.
Document = tuple[dict[str, str], dict[str, Any]]

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def documents_sync(cards: list[Card], privacy: PrivacyFilter,
                   linked: Mapping[uuid.UUID, list[str]],
                   projection_format: int | None = None) -> list[Document | str]:
    """Each card's :func:`~shared.projection.documents.projected_document`, in order, or the
    privacy filter's error message (``PrivacyFilterFailed.message``) for a card it refused.
    ``linked``: the questions of the solved cards linking to each card, by card id;
    ``projection_format``: the format the payloads record, when not this process's
    :data:`shared.models.PROJECTION_FORMAT` (the caller's, which records the projections)."""
    out: list[Document | str] = []
    for card in cards:
        try:
            texts, pl = projected_document(card, privacy, linked.get(uuid.UUID(card.id[4:])))
        except PrivacyFilterFailed as exc:
            out.append(exc.message)
            continue
        if projection_format is not None:
            pl["format"] = projection_format
        out.append((texts, pl))
    return out


def _ignore_interrupts() -> None:
    """The document worker's start: Ctrl+C in a terminal reaches the whole process group, and
    the parent (``memarc up``) stops its work and then this worker itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _document_pool() -> ProcessPoolExecutor:
    """The process's pool of one document worker, created on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(max_workers=1, initializer=_ignore_interrupts,
                                        mp_context=multiprocessing.get_context("forkserver"))
        return _pool


def _drop_pool(broken: ProcessPoolExecutor) -> None:
    """Forget a pool whose worker died (killed, out of memory): the next call starts another."""
    global _pool
    with _pool_lock:
        if _pool is broken:
            _pool = None
    broken.shutdown(wait=False, cancel_futures=True)


async def documents(cards: list[Card], privacy: PrivacyFilter,
                    linked: Mapping[uuid.UUID, list[str]] | None = None) -> list[Document | str]:
    """:func:`documents_sync` in the document worker process, awaited without blocking the
    event loop (the payloads record this process's projection format). A worker that died is replaced and the call made once more.

    :raises BrokenProcessPool: the worker died twice in a row (the projection then gives its
        operations back, as for any engine failure).
    """
    loop = asyncio.get_running_loop()
    args = (cards, privacy, linked or {}, models.PROJECTION_FORMAT)
    pool = _document_pool()
    try:
        return await loop.run_in_executor(pool, documents_sync, *args)
    except BrokenProcessPool:
        _drop_pool(pool)
    return await loop.run_in_executor(_document_pool(), documents_sync, *args)
