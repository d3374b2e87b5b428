"""Recall records (issue 35 part 1, migration 026, docs/usage.md): who asked what, and what
recall answered.

Every recall a caller asks through :meth:`shared.archive.cards.Archive.search` (the HTTP search,
the CLI through it, the MCP recall tools, the explorer's recall page) is recorded by
:meth:`RecallRecorder.record` once its answer is computed: the workspace, the principal's
actor, the workflow session, the mode, ``top``, families and filters, the result cards in rank
order with their scores, the hits verification dropped, and the time of each stage. The query
is stored as the privacy filter leaves it (:mod:`shared.privacy`), and only when
``MEMARC_RECALL_QUERY_TEXT`` is on; its digest (:func:`query_digest`) always. Filter values go
through the same filter.

The record is one INSERT in a transaction of its own, without the workspace lock, after the
recall's own transactions have ended. When PostgreSQL refuses it or cannot be reached, the
recall answers all the same with ``recall_id`` None, ``memarc_recall_records_lost_total``
counts it, and the outage is logged once. Recalls that no caller asked write none: an
evaluation run recalls through :func:`shared.recall.verified.recall` directly, and the review
page's neighbours pass ``record=False``.
"""

from __future__ import annotations

import hashlib
import logging
import unicodedata
import uuid
from typing import Any

import msgspec

from shared.auth import Principal
from shared.errors import InvalidInput, RecordRefused, Unavailable
from shared.metrics import Metrics
from shared.models import MAX_QUERY, Filters, RecallResponse, SearchRequest, clean_session_id
from shared.models import parse_card_id
from shared.privacy import PrivacyFilter
from shared.projection.queue import OutageLog
from shared.store import recall_records
from shared.store.database import Database

log = logging.getLogger(__name__)


def records_outage_log() -> OutageLog:
    """The log of lost recall records (a warning when records start being lost, info when one
    is written again): one per process, which :class:`~shared.resources.Resources` holds."""
    return OutageLog(log, "recall records are written again")


def query_digest(text: str) -> str:
    """``sha256:<hex>`` of ``text`` normalised: Unicode NFKC, case folded, each run of
    whitespace one space, none at the ends (the same question asked twice has one digest)."""
    normalised = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return "sha256:" + hashlib.sha256(normalised.encode("utf-8")).hexdigest()


def _filters(privacy: PrivacyFilter, filters: Filters | None) -> dict[str, Any]:
    """The request's filters as given (unset ones left out), each text through ``privacy``."""
    given = msgspec.to_builtins(filters) if filters is not None else {}
    return {name: ([privacy.redact(v) for v in value] if isinstance(value, list)
                   else privacy.redact(value)) for name, value in given.items()}


class RecallRecorder:
    """Writes the record of a recall (see the module docstring) over ``db``, filtering its texts
    through ``privacy`` and counting records written and lost in ``metrics``.

    :param query_text: keep the filtered query text (``MEMARC_RECALL_QUERY_TEXT``), else its
        digest only. :param outage: where lost records are logged (default: a log of its own).
    """

    def __init__(self, db: Database, privacy: PrivacyFilter, metrics: Metrics, *,
                 query_text: bool = True, outage: OutageLog | None = None) -> None:
        self.db, self.privacy, self.metrics = db, privacy, metrics
        self.query_text = query_text
        self.outage = outage or records_outage_log()

    def values(self, principal: Principal, req: SearchRequest, response: RecallResponse,
               stages: dict[str, float], seconds: float) -> dict[str, Any]:
        """The record's columns (``stages`` and ``seconds`` in seconds, stored in ms).

        :raises PrivacyFilterFailed: the privacy filter refused the query or a filter value.
        """
        text = self.privacy.redact(req.query)
        ids = [parse_card_id(r.card.id) for r in response.results]
        return {
            "actor": principal.actor, "mode": req.mode, "top": req.top,
            "session": clean_session_id(req.session, "session") if req.session else None,
            "families": list(req.family) if req.family else None,
            "filters": _filters(self.privacy, req.filters),
            "query_text": text[:MAX_QUERY] if self.query_text else None,
            "query_digest": query_digest(text),
            "card_ids": ids, "scores": [r.score for r in response.results],
            "excluded": response.excluded,
            "timings": {**{stage: round(s * 1000, 3) for stage, s in stages.items()},
                        "total": round(seconds * 1000, 3)},
        }

    async def record(self, principal: Principal, workspace: str, req: SearchRequest,
                     response: RecallResponse, stages: dict[str, float],
                     seconds: float) -> RecallResponse:
        """``response`` with the id of its new record, written in a transaction of its own; or
        unchanged (``recall_id`` None) when PostgreSQL refused the record or could not be
        reached: the loss is counted (``memarc_recall_records_lost_total``) and logged once per
        outage, and the recall answers all the same.

        ``stages``: the recall's seconds by stage; ``seconds``: the whole recall's.
        """
        record_id = uuid.uuid4()
        try:
            values = self.values(principal, req, response, stages, seconds)
            async with self.db.transaction(workspace) as conn:
                await recall_records.insert(conn, record_id, workspace, values)
        except (RecordRefused, Unavailable, InvalidInput) as exc:
            self.metrics.observe_recall_record(False)
            self.outage.failed("a recall of workspace %s answered without its record: %s",
                               workspace, exc.message)
            return response
        self.metrics.observe_recall_record(True)
        self.outage.succeeded()
        return msgspec.structs.replace(response, recall_id=str(record_id))
