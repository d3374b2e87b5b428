"""Recall evaluations in the browser (issue 34): the history as a chart, the latest run's
figures per mode and source with their paired tests, its misses with links to the cards
involved, a Run button (``memory.manage``), and a run's own page.

The regression banner of the card list (the front page) comes from :func:`latest_summary`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, Parameter

from shared.archive.cards import Archive
from shared.errors import Conflict, InvalidInput, NoPreviousIndex, NotFound
from shared.evaluation.cases import CaseWrite
from shared.evaluation.chart import history_svg
from shared.models import ShadowRequest, convert
from shared.validation_words import plain_message
from writer.routes.admin.pages import (Person, Urls, provide_archive, provide_person, recorded,
                                       render, see_other)
from writer.routes.params import WorkspaceId

DEPS = {"person": Provide(provide_person), "archive": Provide(provide_archive)}
Text = Annotated[str | None, Parameter(max_length=60)]
#: runs the history shows; misses the workspace's page lists (a run's own page: up to 500)
HISTORY, MISSES_SHOWN, RUN_MISSES_SHOWN = 30, 25, 500
MODES = ("solved", "search", "rules")


def _builtins(value: Any) -> Any:
    return msgspec.to_builtins(value, builtin_types=(datetime,))


async def latest_summary(archive: Archive, person: Person) -> dict[str, Any] | None:
    """The latest finished run (``run``) and whether one is under way (``active``), for the
    front page's banner; None without ``memory.manage`` or before any run."""
    if not person.can_manage:
        return None
    page = await archive.evaluations.runs(person.principal, person.workspace, limit=5)
    runs = _builtins(page.runs)
    done = next((r for r in runs if r["status"] == "done" and r["candidate"] is None), None)
    active = next((r for r in runs if r["status"] in ("queued", "running")), None)
    if done is None and active is None:
        return None
    return {"run": done, "active": active}


def _tests_by_figure(run: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The paired test a figures row shows, by (mode, source): the regressed one with the
    smallest p when a cutoff regressed (an r@1 regression is not hidden behind r@3), else r@3."""
    shown: dict[tuple[str, str], dict[str, Any]] = {}
    for t in run.get("tests", []):
        row = (t["mode"], t["source"])
        held = shown.get(row)
        if held is None or (t["regression"] and (not held["regression"] or t["p"] < held["p"])) \
                or (not held["regression"] and not t["regression"] and t["k"] == 3):
            shown[row] = t
    return shown


async def _titled_misses(archive: Archive, person: Person, run: dict[str, Any],
                         shown: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    misses = (run.get("misses") or [])[:shown]
    for m in misses:
        # the explorer's recall page asks the same question with the same filters
        m["explain"] = {"q": m["question"][:500], "mode": m["mode"], "top": 10,
                        **{k: v for k, v in (m.get("filters") or {}).items()
                           if isinstance(v, str)}}
    ids = [c for m in misses for c in (*m["expected"], *m["above"])]
    titles = await archive.evaluations.titles(person.principal, person.workspace, ids)
    return misses, titles


@get("/workspaces/{workspace_id:str}/evaluations", dependencies=DEPS)
async def evaluations_page(person: NamedDependency[Person], archive: NamedDependency[Archive],
                           workspace_id: FromPath[WorkspaceId], queued: FromQuery[Text] = None,
                           busy: FromQuery[Text] = None, case_added: FromQuery[Text] = None,
                           case_deleted: FromQuery[Text] = None,
                           case_saved: FromQuery[Text] = None,
                           index: FromQuery[Text] = None) -> Response:
    """The workspace's evaluations: the history chart (r@3), the latest finished run's figures
    and misses, every run of the history, and Run (``memory.manage``); the index and model
    recall serves, the latest rebuild, and the shadow rebuild's form (another model folder,
    switched in only when its evaluation is not worse), Switch back and Drop previous."""
    if not person.can_manage:
        return render("read_only.html", person)
    return await _evaluations(person, archive, workspace_id, queued=queued, busy=busy,
                              case_added=case_added, case_deleted=case_deleted,
                              case_saved=case_saved,
                              index_outcome=INDEX_OUTCOMES.get(index or ""))


async def _evaluations(person: Person, archive: Archive, workspace_id: str, *,
                       status: int = 200, shadow_error: str | None = None,
                       shadow_path: str = "", **outcomes: Any) -> Response:
    """The workspace's evaluation page (``outcomes``: the banners after an action;
    ``shadow_error``/``shadow_path``: the shadow form refused as typed)."""
    page = await archive.evaluations.runs(person.principal, workspace_id, limit=HISTORY)
    runs = _builtins(page.runs)
    serving = [r for r in runs if r["candidate"] is None]  # a shadow's candidate is no history
    latest = next((r for r in serving if r["status"] == "done"), None)
    active = next((r for r in runs if r["status"] in ("queued", "running")), None)
    misses, titles = [], {}
    if latest is not None:
        full = _builtins(await archive.evaluations.run(person.principal, workspace_id,
                                                       latest["id"]))
        latest = full
        misses, titles = await _titled_misses(archive, person, full, MISSES_SHOWN)
    cases = _builtins((await archive.evaluations.cases(person.principal, workspace_id)).cases)
    titles.update(await archive.evaluations.titles(
        person.principal, workspace_id, [c for case in cases for c in case["expected"]]))
    state = _builtins(await archive.index_state(person.principal, workspace_id))
    try:
        rebuild = _builtins(await archive.rebuild_status(person.principal, workspace_id))
    except NotFound:
        rebuild = None
    return render("evaluations.html", person, status=status, runs=runs, total=page.total,
                  latest=latest, active=active, chart=history_svg(serving), misses=misses,
                  titles=titles, tests=_tests_by_figure(latest) if latest else {},
                  run_page=False, cases=cases, index_state=state, rebuild=rebuild,
                  model_root=archive.model_root, shadow_error=shadow_error,
                  shadow_path=shadow_path, **{"queued": None, "busy": None, "case_added": None,
                                              "case_deleted": None, "case_saved": None,
                                              "index_outcome": None,
                                              **outcomes})


@get("/workspaces/{workspace_id:str}/evaluations/{run_id:str}", dependencies=DEPS)
async def evaluation_page(person: NamedDependency[Person], archive: NamedDependency[Archive],
                          workspace_id: FromPath[WorkspaceId],
                          run_id: FromPath[Annotated[str, Parameter(max_length=40)]]) -> Response:
    """One run: its figures, tests and misses (404 for another workspace's run)."""
    if not person.can_manage:
        return render("read_only.html", person)
    run = _builtins(await archive.evaluations.run(person.principal, workspace_id, run_id))
    misses, titles = await _titled_misses(archive, person, run, RUN_MISSES_SHOWN)
    return render("evaluations.html", person, runs=[], total=0, latest=run, active=None,
                  chart="", misses=misses, titles=titles, tests=_tests_by_figure(run),
                  queued=None, busy=None, run_page=True, cases=[], case_added=None,
                  case_deleted=None, case_saved=None, index_state=None, rebuild=None,
                  index_outcome=None,
                  model_root=None)


@post("/workspaces/{workspace_id:str}/evaluations/run", dependencies=DEPS,
      opt={"activity": None})
async def run_evaluation(person: NamedDependency[Person], archive: NamedDependency[Archive],
                         workspace_id: FromPath[WorkspaceId]) -> Response:
    """Queue a run (the worker runs it) and come back to the page, which says so."""
    try:
        run = await archive.evaluations.start(person.principal, workspace_id)
    except Conflict as exc:
        return see_other(Urls(workspace_id).evaluations(busy=str(exc.extra.get("run") or "")))
    return see_other(Urls(workspace_id).evaluations(queued=run.id))


#: what the page says after an index action (``?index=``)
INDEX_OUTCOMES = {
    "shadow": ("ok", "Shadow rebuild queued: the worker builds the new index, evaluates it "
                     "against the serving one and switches only if it is not worse. Reload this "
                     "page to follow it."),
    "back": ("ok", "Switch back queued: the previous index is caught up and switched in."),
    "dropped": ("ok", "Previous index dropped."),
    "busy": ("pending", "A rebuild of this workspace is already queued or running."),
    "none": ("failed", "There is no previous index (only a shadow switch keeps one)."),
}


@post("/workspaces/{workspace_id:str}/index/shadow", dependencies=DEPS,
      opt={"activity": None})
async def shadow_rebuild(request: Request, person: NamedDependency[Person],
                         archive: NamedDependency[Archive],
                         workspace_id: FromPath[WorkspaceId]) -> Response:
    """Queue a shadow rebuild with the form's model folder (``model_path``, under the model
    root; ``force``: switch whatever the evaluation says); a bad folder comes back as the page
    with the error (422, nothing queued)."""
    form = await request.form()
    path = str(form.get("model_path") or "").strip()
    try:
        shadow = convert({"model_path": path or None, "force": form.get("force") == "on"},
                         ShadowRequest)  # the API's bounds
        await archive.start_rebuild(person.principal, workspace_id, shadow)
    except Conflict:
        return see_other(Urls(workspace_id).evaluations(index="busy"))
    except InvalidInput as exc:
        return await _evaluations(person, archive, workspace_id, status=422,
                                  shadow_error=plain_message(exc.message), shadow_path=path[:1000])
    return see_other(Urls(workspace_id).evaluations(index="shadow"))


@post("/workspaces/{workspace_id:str}/index/switch-back", dependencies=DEPS,
      opt={"activity": None})
async def switch_back(person: NamedDependency[Person], archive: NamedDependency[Archive],
                      workspace_id: FromPath[WorkspaceId]) -> Response:
    """Queue the switch back to the previous index."""
    try:
        await archive.start_rebuild(person.principal, workspace_id, restore=True)
    except NoPreviousIndex:
        return see_other(Urls(workspace_id).evaluations(index="none"))
    except Conflict:
        return see_other(Urls(workspace_id).evaluations(index="busy"))
    return see_other(Urls(workspace_id).evaluations(index="back"))


@post("/workspaces/{workspace_id:str}/index/drop-previous", dependencies=DEPS,
      opt={"activity": None})
async def drop_previous(person: NamedDependency[Person], archive: NamedDependency[Archive],
                        workspace_id: FromPath[WorkspaceId]) -> Response:
    """Drop the previous index (no switch back afterwards)."""
    try:
        await archive.drop_previous_index(person.principal, workspace_id)
    except NoPreviousIndex:
        return see_other(Urls(workspace_id).evaluations(index="none"))
    except Conflict:
        return see_other(Urls(workspace_id).evaluations(index="busy"))
    return see_other(Urls(workspace_id).evaluations(index="dropped"))


def _case_form(question: str = "", mode: str = "search", database: str = "",
               expected: list[str] | None = None, match: str = "any", note: str = "",
               error: str | None = None) -> dict[str, Any]:
    return {"question": question, "mode": mode if mode in MODES else "search",
            "database": database, "expected": "\n".join(expected or []), "match": match,
            "note": note, "error": error}


@get("/workspaces/{workspace_id:str}/evaluation-cases/new", dependencies=DEPS)
async def new_case(person: NamedDependency[Person], workspace_id: FromPath[WorkspaceId],
                   question: FromQuery[Annotated[str | None, Parameter(max_length=2000)]] = None,
                   mode: FromQuery[Annotated[str | None, Parameter(max_length=20)]] = None,
                   database: FromQuery[Annotated[str | None, Parameter(max_length=200)]] = None,
                   expected: FromQuery[Annotated[list[str] | None, Parameter(
                       max_items=20)]] = None) -> Response:
    """The form of a new curated case, filled from the address (a card's page or the explorer's
    recall page link here with the question, the mode, the database and the expected cards)."""
    if not person.can_manage:
        return render("read_only.html", person)
    return render("case_form.html", person, form=_case_form(
        question or "", mode or "search", database or "", [e[:60] for e in expected or []]),
        modes=MODES)


CaseId = Annotated[str, Parameter(max_length=40)]


@get("/workspaces/{workspace_id:str}/evaluation-cases/{case_id:str}/edit", dependencies=DEPS)
async def edit_case(person: NamedDependency[Person], archive: NamedDependency[Archive],
                    workspace_id: FromPath[WorkspaceId], case_id: FromPath[CaseId]) -> Response:
    """The form of a stored curated case (404: no such case in this workspace)."""
    if not person.can_manage:
        return render("read_only.html", person)
    case = await archive.evaluations.case(person.principal, workspace_id, case_id)
    form = _case_form(case.question, case.mode, (case.filters.database or "")
                      if case.filters else "", case.expected, case.match, case.note or "")
    return render("case_form.html", person, form={**form, "id": case.id}, modes=MODES)


@post("/workspaces/{workspace_id:str}/evaluation-cases/{case_id:str}", dependencies=DEPS,
      opt={"activity": None})
async def update_case(request: Request, person: NamedDependency[Person],
                      archive: NamedDependency[Archive], workspace_id: FromPath[WorkspaceId],
                      case_id: FromPath[CaseId]) -> Response:
    """Replace the case's fields with the form's, as :func:`create_case` stores a new one."""
    return await _save_case(request, person, archive, workspace_id, case_id)


@post("/workspaces/{workspace_id:str}/evaluation-cases", dependencies=DEPS,
      opt={"activity": None})
async def create_case(request: Request, person: NamedDependency[Person],
                      archive: NamedDependency[Archive],
                      workspace_id: FromPath[WorkspaceId]) -> Response:
    """Store the case of the form and go to the evaluation page; a refused case shows the form
    again as typed, with the reason (422, nothing written)."""
    return await _save_case(request, person, archive, workspace_id, None)


async def _save_case(request: Request, person: Person, archive: Archive, workspace_id: str,
                     case_id: str | None) -> Response:
    """The case form's save: a new case (``case_id`` None) or the stored one replaced."""
    data = await request.form()
    values = {k: str(data.get(k) or "")[:4000] for k in
              ("question", "mode", "database", "expected", "match", "note")}
    expected = [line.strip() for line in values["expected"].replace(",", "\n").splitlines()
                if line.strip()]
    form = {**_case_form(values["question"], values["mode"], values["database"].strip(),
                         expected, values["match"], values["note"]), "id": case_id}
    verb = "case-create" if case_id is None else "case-update"
    try:
        body = await recorded(archive, person, workspace_id, verb, lambda: convert(
            {"question": values["question"], "mode": values["mode"], "expected": expected,
             "match": values["match"] or "any", "note": values["note"] or None,
             "filters": {"database": values["database"].strip()}
             if values["database"].strip() else None}, CaseWrite))
        if case_id is None:
            case = await archive.evaluations.create_case(person.principal, workspace_id, body)
        else:
            case = await archive.evaluations.update_case(person.principal, workspace_id,
                                                         case_id, body)
    except InvalidInput as exc:
        form["error"] = plain_message(exc.message)
        return render("case_form.html", person, status=422, form=form, modes=MODES)
    if case_id is None:
        return see_other(Urls(workspace_id).evaluations(case_added=case.id))
    return see_other(Urls(workspace_id).evaluations(case_saved=case.id))


@post("/workspaces/{workspace_id:str}/evaluation-cases/{case_id:str}/delete", dependencies=DEPS,
      opt={"activity": None})
async def delete_case(person: NamedDependency[Person], archive: NamedDependency[Archive],
                      workspace_id: FromPath[WorkspaceId],
                      case_id: FromPath[Annotated[str, Parameter(max_length=40)]]) -> Response:
    """Delete a curated case and come back to the evaluation page."""
    await archive.evaluations.delete_case(person.principal, workspace_id, case_id)
    return see_other(Urls(workspace_id).evaluations(case_deleted="1"))


HANDLERS = [evaluations_page, evaluation_page, run_evaluation, new_case, create_case,
            edit_case, update_case, delete_case, shadow_rebuild, switch_back, drop_previous]
