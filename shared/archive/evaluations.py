"""The recall evaluation's use cases (issue 34, ``docs/evaluation.md``): curated cases, runs
queued for the worker, their history; ``memory.manage`` for all of them.

A run is queued here (``eval_runs``, one queued or running per workspace) and enqueued after
commit as an arq job (:data:`~shared.projection.queue.EVALUATE_JOB`); the worker runs it
(:func:`shared.evaluation.run.execute`), and the sweep re-enqueues a run whose job was lost.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

import msgspec

from shared.archive.activity import audited
from shared.archive.polling import poll
from shared.auth import Principal
from shared.errors import Conflict, InvalidInput, NotFound
from shared.evaluation.cases import CaseWrite, CuratedCase, case_values, curated_view
from shared.evaluation.figures import Comparison, Figure, worse
from shared.models import card_id_str, parse_card_id
from shared.projection.queue import ProjectionQueue
from shared.store import activity, cards, evaluations, workspaces
from shared.store.database import Database

#: what started a run (``manual``: a person, through the API, CLI or administration)
Trigger = Literal["manual", "import", "first", "model", "format", "profile", "rebuild",
                  "schedule", "retry", "shadow"]


#: one mode and source's figures, and one paired test against the run before
EvaluationFigure, EvaluationTest = Figure, Comparison


class EvaluationMiss(msgspec.Struct):
    """A case whose expected card was not ranked first: its rank (None: not in the top 100)
    and up to five cards ranked above it; ``before``: its rank in the run compared with (None:
    not in the top 100 then; absent: a case that run did not have), and ``worse`` when it is
    ranked worse now (a run lists those first)."""

    key: str
    kind: str
    source: str
    mode: str
    question: str
    filters: dict[str, Any] | None
    expected: list[str]
    rank: int | None
    above: list[str]
    before: int | None | msgspec.UnsetType = msgspec.UNSET
    worse: bool = False

    def __post_init__(self) -> None:
        self.worse = self.before is not msgspec.UNSET and worse(self.before, self.rank)


class EvaluationFloor(msgspec.Struct, kw_only=True):
    """The similarity floor a run chose for one mode (:mod:`shared.recall.floor`): the
    ``floor`` (a cosine similarity; None with fewer than 50 expected cards), the expected and
    other cards' similarities it was chosen from (those in each case's top 5), how many of each
    lie below it, and the ``quantile`` it was chosen at."""

    floor: float | None
    expected: int
    others: int
    expected_below: int
    others_below: int
    quantile: float


class EvaluationRun(msgspec.Struct, kw_only=True):
    """An evaluation run: ``status`` queued, running (``done`` of ``total`` cases), done or
    failed (``error``); once done, what it ran with (``fingerprint``, ``format``,
    ``profiles``), its ``figures``, ``tests`` against the run it was ``compared_with``,
    ``regression`` when one of them regressed, and (on the run's own page) its ``misses``."""

    id: str
    status: str
    trigger: str
    requested_by: str
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    done: int = 0
    total: int | None = None
    seconds: float | None = None
    fingerprint: str | None = None
    format: int | None = None
    profiles: dict[str, Any] | None = None
    figures: list[EvaluationFigure] = []
    #: the similarity floor of each mode (recall's ``below_floor``)
    floors: dict[str, EvaluationFloor] = {}
    recalls: int | None = None
    skipped_curated: int = 0
    compared_with: str | None = None
    tests: list[EvaluationTest] = []
    regression: bool | None = None
    error: str | None = None
    misses: list[EvaluationMiss] | None = None
    #: a shadow rebuild's candidate run: the collection it recalled from (not the serving one)
    candidate: str | None = None


class EvaluationRuns(msgspec.Struct):
    """A page of runs, newest first, and how many there are."""

    runs: list[EvaluationRun]
    total: int


class CuratedCases(msgspec.Struct):
    """The workspace's curated cases, oldest first."""

    cases: list[CuratedCase]
    total: int


def run_view(row: dict[str, Any]) -> EvaluationRun:
    """A stored run as :class:`EvaluationRun`."""
    summary = row.get("figures") or {}
    return EvaluationRun(
        id=str(row["id"]), status=row["status"], trigger=row["trigger"],
        requested_by=row["requested_by"], created_at=row["created_at"],
        started_at=row.get("started_at"), finished_at=row.get("finished_at"),
        done=row.get("done") or 0, total=row.get("total"), seconds=row.get("seconds"),
        fingerprint=row.get("fingerprint"), format=row.get("format"),
        profiles=row.get("profiles"),
        figures=msgspec.convert(summary.get("figures", []), list[EvaluationFigure]),
        floors=msgspec.convert(summary.get("floors") or {}, dict[str, EvaluationFloor]),
        recalls=summary.get("recalls"), skipped_curated=summary.get("skipped_curated", 0),
        compared_with=str(row["compared_with"]) if row.get("compared_with") else None,
        tests=msgspec.convert(row.get("regressions") or [], list[EvaluationTest]),
        regression=row.get("regression"), error=row.get("error"),
        candidate=row.get("candidate"),
        misses=(msgspec.convert(row["misses"], list[EvaluationMiss])
                if row.get("misses") is not None else None))


def _uuid(value: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(f"no {what} {value!r} in this workspace") from None


class Evaluations:
    """Curated cases and evaluation runs of a workspace (``memory.manage``)."""

    def __init__(self, db: Database, queue: ProjectionQueue) -> None:
        self.db = db
        self.queue = queue

    # ---- runs ----

    @audited("evaluate")
    async def start(self, principal: Principal, workspace: str, *, wait: float = 0.0,
                    trigger: Trigger = "manual") -> EvaluationRun:
        """Queue an evaluation run and enqueue it for the worker after commit; with ``wait``
        (seconds, ≤ 30) wait for it to finish. Returns the run (queued, running or finished).

        :raises Conflict: a run of this workspace is already queued or running (its id in
            ``run``). :raises NotFound / Forbidden: principal.
        """
        principal.require(workspace, "memory.manage")
        run_id = uuid.uuid4()
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            row = await evaluations.run_insert(conn, run_id, workspace, trigger, principal.actor)
            if row is None:
                active, _ = await evaluations.runs(conn, 1, 0)
                raise Conflict("an evaluation of this workspace is already queued or running",
                               run=str(active[0]["id"]) if active else None)
            await activity.record(conn, workspace, actor=principal.actor, verb="evaluate",
                                  outcome="queued", detail={"run": str(run_id),
                                                            "trigger": trigger})
        await self.queue.enqueue_evaluation(workspace, run_id)
        if wait > 0:
            return await poll(lambda: self._read(workspace, run_id),
                              lambda r: r.status in ("done", "failed"), wait)
        return await self._read(workspace, run_id)

    async def _read(self, workspace: str, run_id: uuid.UUID) -> EvaluationRun:
        async with self.db.transaction(workspace, read_only=True) as conn:
            row = await evaluations.run_get(conn, run_id)
        if row is None:
            raise NotFound(f"no evaluation {run_id} in this workspace")
        return run_view(row)

    async def run(self, principal: Principal, workspace: str, run_id: str) -> EvaluationRun:
        """One run with its misses.

        :raises NotFound: no such run in this workspace (another workspace's included).
        """
        principal.require(workspace, "memory.manage")
        return await self._read(workspace, _uuid(run_id, "evaluation"))

    async def runs(self, principal: Principal, workspace: str, *, limit: int = 20,
                   offset: int = 0) -> EvaluationRuns:
        """Runs newest first (without their misses) and their total.

        :raises InvalidInput: limit outside 1..500 or a negative offset.
        """
        principal.require(workspace, "memory.manage")
        if not 1 <= limit <= 500 or offset < 0:
            raise InvalidInput("limit must be 1..500 and offset ≥ 0", field="limit")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            rows, total = await evaluations.runs(conn, limit, offset)
        return EvaluationRuns(runs=[run_view(r) for r in rows], total=total)

    async def titles(self, principal: Principal, workspace: str,
                     card_ids: list[str]) -> dict[str, str]:
        """``{card id: title}`` of those of ``card_ids`` that are cards of the workspace now
        (a page names a run's cards by their titles; a card deleted since is absent)."""
        principal.require(workspace, "memory.manage")
        ids = [u for u in (parse_card_id(c) for c in dict.fromkeys(card_ids)) if u is not None]
        async with self.db.transaction(workspace, read_only=True) as conn:
            found = await cards.get_many(conn, ids)
        return {card.id: card.title for card in found.values()}

    # ---- curated cases ----

    async def cases(self, principal: Principal, workspace: str) -> CuratedCases:
        """The curated cases, oldest first."""
        principal.require(workspace, "memory.manage")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            rows = await evaluations.cases(conn)
        return CuratedCases(cases=[curated_view(r) for r in rows], total=len(rows))

    async def _check_expected(self, conn: Any, values: dict[str, Any]) -> None:
        found = await cards.get_many(conn, values["expected"])
        missing = [card_id_str(c) for c in values["expected"] if c not in found]
        if missing:
            raise InvalidInput(f"no card {', '.join(missing)} in this workspace",
                               field="expected")

    async def case(self, principal: Principal, workspace: str, case_id: str) -> CuratedCase:
        """One curated case.

        :raises NotFound: no such case in this workspace (another workspace's included).
        """
        principal.require(workspace, "memory.manage")
        cid = _uuid(case_id, "case")
        async with self.db.transaction(workspace, read_only=True) as conn:
            await workspaces.get(conn, workspace)
            row = await evaluations.case_get(conn, cid)
        if row is None:
            raise NotFound(f"no case {case_id!r} in this workspace")
        return curated_view(row)

    @audited("case-create")
    async def create_case(self, principal: Principal, workspace: str,
                          body: CaseWrite) -> CuratedCase:
        """Store a curated case.

        :raises InvalidInput: a blank question, or an expected card that is not one of this
            workspace's cards (422; nothing written).
        """
        principal.require(workspace, "memory.manage")
        values = case_values(body, principal)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            await workspaces.get(conn, workspace)
            await self._check_expected(conn, values)
            case_id = uuid.uuid4()
            row = await evaluations.case_insert(conn, workspace, case_id, principal.actor, values)
            await activity.record(conn, workspace, actor=principal.actor, verb="case-create",
                                  outcome="ok", detail={"case": str(case_id)})
        assert row is not None
        return curated_view(row)

    @audited("case-update")
    async def update_case(self, principal: Principal, workspace: str, case_id: str,
                          body: CaseWrite) -> CuratedCase:
        """Replace a curated case's fields.

        :raises NotFound: no such case. :raises InvalidInput: as :meth:`create_case`.
        """
        principal.require(workspace, "memory.manage")
        cid = _uuid(case_id, "case")
        values = case_values(body, principal)
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            if await evaluations.case_get(conn, cid) is None:
                raise NotFound(f"no case {case_id!r} in this workspace")
            await self._check_expected(conn, values)
            row = await evaluations.case_update(conn, cid, values)
            assert row is not None  # under the workspace lock
            await activity.record(conn, workspace, actor=principal.actor, verb="case-update",
                                  outcome="ok", detail={"case": str(cid)})
        return curated_view(row)

    @audited("case-delete")
    async def delete_case(self, principal: Principal, workspace: str, case_id: str) -> None:
        """Delete a curated case.

        :raises NotFound: no such case.
        """
        principal.require(workspace, "memory.manage")
        cid = _uuid(case_id, "case")
        async with self.db.transaction(workspace, lock="exclusive") as conn:
            if not await evaluations.case_delete(conn, cid):
                raise NotFound(f"no case {case_id!r} in this workspace")
            await activity.record(conn, workspace, actor=principal.actor, verb="case-delete",
                                  outcome="ok", detail={"case": str(cid)})
