"""An evaluation run (issue 34): every case of a workspace recalled through verified recall, the
figures and misses recorded in PostgreSQL, and the comparison with the previous run.

A run reads only: it recalls each case one after the other with
:func:`shared.recall.verified.recall`, the code path of ``POST …/search`` (its filters,
verification, link expansion and ranking), with the case's leave-one-out
(:mod:`shared.evaluation.cases`): first with ``top`` = :data:`FIRST_TOP`, and again with
``top`` = :data:`TOP` only when the expected card is not among those (so a rank up to 100 is
known; the first ``top`` results of a recall do not depend on ``top`` beyond the seed count,
which grows with it, so a rank found in the second recall is the rank of a ``top`` = 100
recall). It writes no recall record (migration 026): it calls the recall itself, not
:meth:`shared.archive.cards.Archive.search`, which records the recalls callers ask, so a run of
1,587 cases adds no row to ``recall_records``. Each distinct question is embedded once per run. One recall at a time: a run weighs on
other users' recalls as the same number of ordinary recalls would, :data:`CONCURRENCY` at a time.

What a finished run records (``eval_runs``): the trigger, the model fingerprint of the
workspace's language, the projection format, the fusion profiles (and their digest), the figures
(:mod:`shared.evaluation.figures`), each miss (a case whose expected card is not first: its rank
or None for "not in the top 100", and up to :data:`ABOVE` cards ranked above it), every case's
rank (the next run's paired comparison), the paired tests against the previous finished run, and
whether one of them is a regression, and the similarity floor of each mode
(:mod:`shared.recall.floor`, from the similarities of each case's first recall). An
activity record ``evaluate`` says ``ok`` or ``regression`` (with the figures that regressed).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

import msgspec

from shared import models
from shared.auth import Principal
from shared.errors import ArchiveError, Conflict
from shared.recall import floor as similarity_floor
from shared.evaluation.cases import Case, gather
from shared.evaluation.figures import case_rank, compare, figures, worse
from shared.index.embedding import Embedder
from shared.index.engine import IndexEngine, IndexTarget
from shared.models import SearchRequest, card_id_str
from shared.privacy import DEFAULT_FILTER, PrivacyFilter
from shared.recall.fusion import FusionProfile
from shared.recall.profiles import MODE_PROFILES
from shared.recall.verified import RecallTimings, recall
from shared.store import activity, evaluations, workspaces
from shared.store.database import Database

log = logging.getLogger(__name__)

TOP = 100
FIRST_TOP = 10
#: cards ranked above a missed case's expected card that a miss records
ABOVE = 5
#: misses a run records at most (the worst ranked first)
MAX_MISSES = 2000
#: cases between two progress records (each renews the run's lease)
PROGRESS_EVERY = 50
LEASE_SECONDS = 120.0
#: recalls a run has under way at once (the index search and PostgreSQL's reads of one overlap
#: the other's Python work: a BIRD run takes about 0.6x the time of one at a time)
CONCURRENCY = 2
ACTOR = "evaluation"


def profiles_digest(profiles: Mapping[str, FusionProfile]) -> str:
    """``sha256:<hex>`` of the fusion profiles, canonical JSON (mode order and key order fixed)."""
    text = json.dumps({m: msgspec.to_builtins(p) for m, p in sorted(profiles.items())},
                      sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _request(case: Case, top: int) -> SearchRequest:
    return SearchRequest(query=case.question[:models.MAX_QUERY], top=top, mode=case.mode,
                         filters=case.filters)


class QueryCache:
    """An embedder that embeds each distinct query once (a run asks the same question in
    several cases); everything else is the wrapped embedder's."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self._memo: dict[tuple[str, str], Any] = {}

    async def embed_query(self, text: str, language: str, model: Any = None) -> Any:
        """:meth:`Embedder.embed_query`, remembered for this run."""
        key = (text, language)
        if key not in self._memo:
            self._memo[key] = await self._embedder.embed_query(text, language, model)
        return self._memo[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)


async def _release(db: Database, workspace: str, run_id: uuid.UUID) -> None:
    try:
        async with db.transaction(workspace) as conn:
            await evaluations.run_release(conn, run_id)
    except ArchiveError as exc:  # the lease expires instead, and the sweep offers it then
        log.warning("evaluation %s of %s stopped; not put back in the queue: %s", run_id,
                    workspace, exc.message)


async def execute(db: Database, index: IndexEngine, embedder: Embedder, workspace: str,
                  run_id: uuid.UUID, *, profiles: Mapping[str, FusionProfile] | None = None,
                  privacy: PrivacyFilter = DEFAULT_FILTER,
                  lease_seconds: float = LEASE_SECONDS,
                  concurrency: int = CONCURRENCY, target: IndexTarget | None = None,
                  base: uuid.UUID | None = None) -> dict[str, Any] | None:
    """Run the queued evaluation ``run_id`` of ``workspace`` (see the module docstring) and
    return its row; None when it is not claimable (done, failed, or running under a live lease
    elsewhere). A dependency that fails mid-run (index, embedder, PostgreSQL) fails the run with
    its error recorded (a failed run is never compared with). Cancelled (the worker stops), it
    puts the run back in the queue, so that the next worker start runs it again at once.

    ``target``: recall from this collection with its model instead of the workspace's index
    (a shadow rebuild's candidate, recorded as the run's ``candidate``); ``base``: the run to
    compare with instead of the previous finished one (the candidate's baseline, made just
    before on the serving index).

    :raises DatabaseUnavailable: PostgreSQL cannot be reached to claim or record the run.
    """
    profiles = dict(profiles or MODE_PROFILES)
    async with db.transaction(workspace) as conn:
        claimed = await evaluations.run_claim(conn, run_id, lease_seconds)
        if claimed is None:
            return None
        language = (await workspaces.get(conn, workspace))["language"]
        model = (target.model if target is not None
                 else workspaces.model_of(await workspaces.index_collection(conn)))
        cases, skipped = await gather(conn)
    started = time.perf_counter()
    principal = Principal(workspace=workspace, permissions=frozenset({"memory.read"}),
                          actor=ACTOR)
    ranks: dict[str, int | None] = {}
    recalls = 0
    misses: list[dict[str, Any]] = []
    samples: dict[str, dict[str, list[float]]] = {}  # mode -> similarities (floor.py)
    try:
        fingerprint = embedder.fingerprint(language, model)
        queries = QueryCache(embedder)
        timings = RecallTimings()

        async def ask(case: Case) -> None:
            nonlocal recalls
            ranked: list[str] = []
            rank = None
            for top in (FIRST_TOP, TOP):
                response = await recall(db, index, queries, principal, workspace,  # type: ignore[arg-type]
                                        _request(case, top), profile=profiles[case.mode],
                                        privacy=privacy, stand_in=case.stand_in,
                                        timings=timings, target=target)
                recalls += 1
                ranked = [r.card.id for r in response.results]
                if top == FIRST_TOP and case.source != "title":  # a title asks itself
                    expected = {card_id_str(e) for e in case.expected}
                    for r in response.results[:similarity_floor.TOP_RESULTS]:
                        if r.similarity is not None:
                            kind = "expected" if r.card.id in expected else "others"
                            samples.setdefault(case.mode, {"expected": [], "others": []})[
                                kind].append(r.similarity)
                rank = case_rank(case, ranked)
                if rank is not None:
                    break
            ranks[case.key] = rank
            if rank != 1:
                stop = (rank - 1) if rank is not None else ABOVE
                misses.append({"key": case.key, "kind": case.kind, "source": case.source,
                               "mode": case.mode, "question": case.question,
                               "filters": msgspec.to_builtins(case.filters) if case.filters else None,
                               "expected": [card_id_str(e) for e in case.expected],
                               "rank": rank, "above": ranked[:min(stop, ABOVE)]})

        for first in range(0, len(cases), PROGRESS_EVERY):
            batch = cases[first:first + PROGRESS_EVERY]
            for at in range(0, len(batch), concurrency):
                await asyncio.gather(*(ask(c) for c in batch[at:at + concurrency]))
            async with db.transaction(workspace) as conn:
                await evaluations.run_progress(conn, run_id, first + len(batch), len(cases),
                                               lease_seconds)
    except asyncio.CancelledError:  # the worker stops: the run goes back to the queue at once
        await asyncio.shield(_release(db, workspace, run_id))
        raise
    except ArchiveError as exc:
        log.warning("evaluation %s of %s failed: %s", run_id, workspace, exc.message)
        async with db.transaction(workspace) as conn:
            await evaluations.run_finish(conn, run_id, status="failed", done=len(ranks),
                                         total=len(cases), error=f"{exc.code}: {exc.message}",
                                         seconds=time.perf_counter() - started)
            await activity.record(conn, workspace, actor=ACTOR, verb="evaluate",
                                  outcome="failed", detail={"run": str(run_id),
                                                            "error": exc.message})
            return await evaluations.run_get(conn, run_id)
    figs = [msgspec.to_builtins(f) for f in figures(cases, ranks)]
    async with db.transaction(workspace, lock="exclusive") as conn:
        previous = (await evaluations.run_outcomes(conn, base) if base is not None
                    else await evaluations.previous_done(conn, run_id))
        tests = compare(cases, ranks, previous["outcomes"]) if previous else []
        regressed = [t for t in tests if t.regression]
        _order_misses(misses, previous["outcomes"] if previous else None)
        await evaluations.run_finish(
            conn, run_id, status="done", done=len(cases), total=len(cases),
            fingerprint=fingerprint, format=models.PROJECTION_FORMAT,
            profiles={m: msgspec.to_builtins(p) for m, p in sorted(profiles.items())},
            profile_digest=profiles_digest(profiles), figures={
                "figures": figs, "skipped_curated": skipped, "recalls": recalls,
                "floors": {mode: similarity_floor.choose(got["expected"], got["others"])
                           for mode, got in sorted(samples.items())},
                "stage_seconds": {k: round(v, 3) for k, v in timings.stages().items()}},
            misses=misses[:MAX_MISSES], outcomes=ranks,
            compared_with=previous["id"] if previous else None, candidate=(
                target.collection if target is not None else None),
            regressions=[msgspec.to_builtins(t) for t in tests], regression=bool(regressed),
            seconds=round(time.perf_counter() - started, 3))
        await activity.record(conn, workspace, actor=ACTOR, verb="evaluate",
                              outcome="regression" if regressed else "ok",
                              detail={"run": str(run_id), "trigger": claimed["trigger"],
                                      **({"candidate": target.collection} if target else {}),
                                      "cases": len(cases),
                                      "regressed": [f"{t.mode} {t.source} r@{t.k}: lost "
                                                    f"{t.lost}, gained {t.gained}, p={t.p:.3g}"
                                                    for t in regressed]})
        return await evaluations.run_get(conn, run_id)


def _order_misses(misses: list[dict[str, Any]], before: Mapping[str, Any] | None) -> None:
    """Give each miss its rank in the run compared with (``before``: ``{case key: rank}``;
    a case it did not have gets no ``before``) and sort, in place: the cases ranked worse than
    then first (what a regression is made of: a page that lists the worst misses would bury a
    case that fell from 1 to 2 under those never found), then the worst ranks."""
    for m in misses:
        if before is not None and m["key"] in before:
            m["before"] = before[m["key"]]
    misses.sort(key=lambda m: ("before" not in m or not worse(m["before"], m["rank"]),
                               m["rank"] is not None, -(m["rank"] or 0)))


#: how long a shadow rebuild's gate waits for another open run of the workspace to finish
GATE_WAIT_SECONDS = 600.0


async def _queue_gate_run(db: Database, workspace: str, actor: str) -> uuid.UUID:
    """A run for the gate (trigger ``shadow``), queued once no other run of the workspace is
    queued or running (one at a time; a person's run finishes first).

    :raises Conflict: another run stayed open for :data:`GATE_WAIT_SECONDS`."""
    deadline = time.monotonic() + GATE_WAIT_SECONDS
    while True:
        run_id = uuid.uuid4()
        async with db.transaction(workspace) as conn:
            if await evaluations.run_insert(conn, run_id, workspace, "shadow", actor) is not None:
                return run_id
        if time.monotonic() > deadline:
            raise Conflict("another evaluation of this workspace stayed open; the shadow "
                           "rebuild's evaluation could not run")
        await asyncio.sleep(1.0)


async def gate(db: Database, index: IndexEngine, embedder: Embedder, workspace: str,
               candidate: str, model: tuple[str, str | None] | None, *, actor: str,
               privacy: PrivacyFilter = DEFAULT_FILTER,
               profiles: Mapping[str, FusionProfile] | None = None) -> dict[str, Any]:
    """What decides a shadow rebuild's switch (:mod:`shared.projection.rebuild`): two runs on
    the same cases, one on the serving index (the baseline, an ordinary run compared with the
    run before it) and one on ``candidate`` with ``model`` (compared with the baseline, case by
    case, with the same paired test as every run: :func:`shared.evaluation.figures.compare`).
    The switch goes ahead unless the candidate regressed, or either run failed.

    :returns: ``{"switch", "baseline", "candidate", "regressed", "figures"}`` (run ids as
        strings; ``regressed``: the tests that regressed; ``figures``: both runs' r@3 per mode
        and source). :raises Conflict: another run of the workspace stayed open too long.
    """
    out: dict[str, Any] = {}
    for role, target in (("baseline", None), ("candidate", IndexTarget(collection=candidate,
                                                                       model=model))):
        run_id = await _queue_gate_run(db, workspace, actor)
        row = await execute(db, index, embedder, workspace, run_id, profiles=profiles,
                            privacy=privacy, target=target,
                            base=uuid.UUID(out["baseline"]) if target is not None else None)
        if row is None or row["status"] != "done":
            error = (row or {}).get("error") or "the run was not claimable"
            return {**out, role: str(run_id), "switch": False, "regressed": [],
                    "error": f"the {role} evaluation failed: {error}"}
        out[role] = str(run_id)
        out.setdefault("figures", {})[role] = {
            f"{f['mode']}/{f['source']}": f["r3"] for f in (row["figures"] or {}).get("figures", [])}
        if target is not None:
            regressed = [t for t in row.get("regressions") or [] if t.get("regression")]
            out.update(switch=not regressed, regressed=regressed)
    return out
