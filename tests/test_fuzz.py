"""Schemathesis against the writer's own OpenAPI document (DESIGN §8, issue 8).

Every operation of ``/schema/openapi.json`` is called over real HTTP (uvicorn on loopback) with
schema-conforming (positive) and schema-violating (negative) requests, with a valid token of the
workspace and with hostile ones (the ``Authorization`` header Schemathesis generates from the
security scheme, often none; a well-formed unknown token; another workspace's; too few
permissions: a reader, and the reviewer gate's two sides, a proposing-only and a reviewing-only
token). For
each response:

- no 5xx;
- every response has the shape the OpenAPI document gives for its status (Schemathesis'
  ``response_schema_conformance``; errors are documented as problem details);
- every 4xx is an RFC 9457 problem-details body (``application/problem+json`` with ``type``,
  ``title``, ``status`` equal to the HTTP status, ``detail`` and ``code``);
- a rejected request writes nothing: the row count of every table of the archive schema
  (enumerated from the catalogue) is unchanged, except at most one new ``activity`` row (the
  rejection's own record);
- hostile tokens get exactly 401 (generated, garbage), 404 (another workspace) or 403 (too few
  permissions) on the routes they may not use.

Card ids are respelled (issue 14): in about half of the requests (and in the first, simplest,
example of each operation) every place that takes a card id
(the ``card_id`` path parameter, list ``q`` and the activity filter, link targets, search
exclusions, proposals' ``card_id``) gets a spelling from :func:`id_spellings` (the workspace's
real cards in any case and with surrounding whitespace, without the prefix, with another
prefix, with a broken UUID, another workspace's card), and link and exclusion lists get
duplicate references (one card twice, in two spellings): the archive must answer them 2xx or
4xx, never 5xx, and a rejected one writes nothing.

``?wait`` is pinned to 0: no projection worker runs here, so a generated ``wait=30`` would only
sleep. The bounded run (``test_fuzz_every_operation``) is part of ``make test``; the long run is
``test_fuzz_long`` (marker ``fuzz_long``, excluded by default): ``make fuzz`` or
``pytest -m fuzz_long``, scaled by ``MEMARC_FUZZ_EXAMPLES`` (default 200 per operation and mode).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import schemathesis
from helpers import archive_row_counts, row_changes, start_server, stop_server
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import response_schema_conformance

from writer.app import create_app

WS = "wa"
CARD = {"family": "sql_rule", "title": "Revenue excludes refunds",
        "content": {"rule": "Sum orders.amount where orders.status <> 'refunded'."},
        "concepts": ["revenue"],
        "dependencies": [{"database": "shop", "schema": "public", "table": "orders"}]}
PROPOSAL = {"key": "p1", "kind": "addition", "decisions": [{"id": "d1", "status": "approved"}],
            "family": "domain_clarification", "title": "Churned customer",
            "content": {"definition": "No order in the last 180 days."}}
SECOND = {"family": "domain_clarification", "title": "Lapsed customer",
          "content": {"definition": "No order in the last year."}}
PROBLEM_FIELDS = {"type", "title", "status", "detail", "code"}
#: Routes a memory.read token may use (recall, feedback on a recall, counts); every other one
#: answers it 403.
READ_ROUTES = {("POST", "/api/workspaces/{workspace_id}/memory/search"),
               ("POST", "/api/workspaces/{workspace_id}/memory/recalls/{recall_id}/feedback"),
               ("GET", "/api/workspaces/{workspace_id}/memory/status")}
PUBLIC_ROUTES = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")}
_S = "/api/workspaces/{workspace_id}/sessions/{session_id}"
#: The reviewer gate: the routes a memory.propose token and a memory.review token may use.
PROPOSE_ROUTES = {("POST", f"{_S}/proposals"), ("GET", f"{_S}/summary"),
                  ("POST", f"{_S}/decisions"), ("GET", f"{_S}/decisions")}
REVIEW_ROUTES = {("GET", f"{_S}/summary"), ("POST", f"{_S}/review"), ("POST", f"{_S}/solved-index"),
                 ("GET", f"{_S}/decisions")}
# a reviewer sees whether the cards a review applied are indexed yet (not retry them)
REVIEW_ROUTES |= {("GET", "/api/workspaces/{workspace_id}/memory/pending")}
# the sessions waiting for review: listed for the reviewer and for the proposer (its own work)
_SESSIONS = ("GET", "/api/workspaces/{workspace_id}/sessions")
PROPOSE_ROUTES |= {_SESSIONS}
REVIEW_ROUTES |= {_SESSIONS}
#: The routes each token kind of the hostile runs may use (every other one answers it 403).
ALLOWED_ROUTES = {"read": READ_ROUTES, "propose": PROPOSE_ROUTES, "review": REVIEW_ROUTES}


async def _seed(env) -> dict[str, Any]:
    """Workspaces wa and wb with cards, a session, a rebuild; tokens of every kind."""
    env.workspace("wa")
    env.workspace("wb")
    # every permission, the reviewer gate's two included (explicitly: nothing creates it so)
    full = env.token(WS, "memory.manage", "memory.propose", "memory.review", "memory.schema")
    other = env.token("wb", "memory.manage", "memory.propose", "memory.review", "memory.schema")
    cards = []
    for h, ws, body in ((full, "wa", CARD), (other, "wb", CARD), (full, "wa", SECOND)):
        r = await env.client.post(f"/api/workspaces/{ws}/memory", json=body, headers=h)
        assert r.status_code == 201, r.text
        cards.append(r.json()["card"]["id"])
        if body is SECOND:
            continue
        r = await env.client.post(f"/api/workspaces/{ws}/sessions/s1/proposals",
                                  json={"proposals": [PROPOSAL]}, headers=h)
        assert r.status_code == 201, r.text
    r = await env.client.post(f"/api/workspaces/{WS}/memory/index", headers=full)
    assert r.status_code == 202, r.text
    return {"full": full, "other": other, "read": env.token(WS, "memory.read"),
            "propose": env.token(WS, "memory.propose"), "review": env.token(WS, "memory.review"),
            "garbage": {"Authorization": "Bearer mat_" + "x" * 43}, "generated": {},
            "pins": {"workspace_id": WS, "card_id": cards[0], "session_id": "s1",
                     "rebuild_id": r.json()["id"]},
            # the workspace's cards, then another workspace's
            "cards": (cards[0], cards[2], cards[1])}


# ---- card id spellings and duplicate references (issue 14) ----

#: whitespace that may surround an id (``str.strip`` removes all of it)
PADDING = " \t\n\r\x0b\x0c\u00a0\u2003"


def _mixed_case(text: str, upper: list[bool]) -> str:
    return "".join(c.upper() if u else c for c, u in zip(text, upper))


def _other_spelling(card_id: str) -> st.SearchStrategy[str]:
    """``card_id`` in upper or mixed case (prefix too) inside whitespace: the same card."""
    return st.builds(lambda left, upper, right: left + _mixed_case(card_id, upper) + right,
                     st.text(PADDING, min_size=1, max_size=3),
                     st.lists(st.booleans(), min_size=len(card_id), max_size=len(card_id)).map(
                         lambda bits: [not b for b in bits]),  # the simplest: all upper case
                     st.text(PADDING, max_size=3))


def id_spellings(card_id: str) -> st.SearchStrategy[str]:
    """Spellings of ``card_id`` (``mem-<uuid>``): itself, or in any case with surrounding
    whitespace (the same card); near misses that are no card id (no prefix, another prefix, a
    UUID without hyphens, one character short, long or not hex, an inner space, the prefix
    alone); a card that does not exist. The same card is the likelier."""
    raw = card_id.removeprefix("mem-")
    misses = st.sampled_from([raw, raw.upper(), f"MEM_{raw}", f"mem:{raw}", f"card-{raw}",
                              f"mem-{raw.replace('-', '')}", f"mem-{raw[:-1]}", f"mem-{raw}0",
                              f"mem-{raw[:-1]}g", f"mem- {raw}", f"mem-{{{raw}}}", "mem-", ""])
    unknown = st.builds(lambda u: f"mem-{u}", st.uuids())
    return st.one_of(st.just(card_id), _other_spelling(card_id), _other_spelling(card_id),
                     misses, unknown)


def _references(cards: tuple[str, ...]) -> st.SearchStrategy[list[str]]:
    """A list of card references, most often with one card twice (as given and in another
    spelling, or two :func:`id_spellings`), among 0..2 more :func:`id_spellings` of ``cards``,
    in any order. Hypothesis starts from the simplest: the first card as given, then upper case
    inside a space."""
    one = st.sampled_from(cards).flatmap(id_spellings)
    twice = st.sampled_from(cards).flatmap(lambda c: st.one_of(
        st.tuples(st.just(c), _other_spelling(c)), st.tuples(id_spellings(c), id_spellings(c))))
    return st.one_of(st.tuples(twice, st.lists(one, max_size=2)).map(lambda p: [*p[0], *p[1]]),
                     st.lists(one, min_size=1, max_size=4)).flatmap(st.permutations)


def _respell_body(body: Any, data: st.DataObject, cards: tuple[str, ...]) -> Any:
    """``body`` with every card reference respelled: ``links`` (their targets, from
    :func:`_references`), ``exclude`` (likewise) and a string ``card_id``, at any depth
    (proposals, review edits). A card or proposal body is more often than not replaced by a valid
    one first (:data:`CARD`, :data:`PROPOSAL`), so that the references reach the checks and
    writes behind the content's validation."""
    if isinstance(body, list):
        return [_respell_body(item, data, cards) for item in body]
    if not isinstance(body, dict):
        return body
    out = {k: _respell_body(v, data, cards) for k, v in body.items()}
    if "family" in out and "content" in out and not data.draw(st.booleans(), label="generated"):
        if "key" in out or "decisions" in out:
            out = {**PROPOSAL, "key": data.draw(st.sampled_from(["p2", "p3", "p1"]), label="key")}
        else:
            out = {**CARD, **{k: v for k, v in out.items() if k == "revision"}}
        out["links"] = []
    if isinstance(out.get("links"), list):
        out["links"] = [{"target": target, "meaning": "fuzz"}
                        for target in data.draw(_references(cards), label="links")]
    if isinstance(out.get("exclude"), list):
        out["exclude"] = data.draw(_references(cards), label="exclude")
    if isinstance(out.get("card_id"), str):
        out["card_id"] = data.draw(st.sampled_from(cards).flatmap(id_spellings), label="card_id")
    return out


def respell(case: Any, data: st.DataObject, cards: tuple[str, ...]) -> None:
    """In about half of the cases (and in the simplest), every place of ``case`` that takes a card id
    gets one of :func:`id_spellings` of ``cards`` (the path's ``card_id``, the query's ``q`` and
    ``card_id``, the body's references: :func:`_respell_body`)."""
    if data.draw(st.booleans(), label="as generated"):
        return
    spelling = st.sampled_from(cards).flatmap(id_spellings)
    if isinstance(case.path_parameters, dict) and "card_id" in case.path_parameters:
        # (an empty segment would be another route: ``GET .../memory/`` is the list)
        case.path_parameters["card_id"] = data.draw(spelling.filter(bool), label="path card_id")
    names = {p.name for p in case.operation.query} & {"q", "card_id"}
    if names:
        query = case.query if isinstance(case.query, dict) else {}
        for name in sorted(names):
            query[name] = data.draw(spelling, label=f"query {name}")
        case.query = query
    if isinstance(case.body, (dict, list)):
        case.body = _respell_body(case.body, data, cards)


def _route(operation: Any) -> tuple[str, str]:
    return operation.method.upper(), operation.path


def _check(operation: Any, response: Any, before: dict[str, int], after: dict[str, int],
           expect: int | None) -> None:
    method, path = _route(operation)
    where = f"{method} {path} -> {response.status_code}: {response.text[:500]}"
    assert response.status_code < 500, where
    if expect is not None:
        assert response.status_code == expect, where
    if response.status_code < 400:
        return
    assert response.headers["content-type"][0].startswith("application/problem+json"), where
    body = response.json()
    assert PROBLEM_FIELDS <= set(body), where
    assert body["status"] == response.status_code and body["code"], where
    changed = row_changes(before, after)
    assert changed in ({}, {"activity": 1}), (where, changed)


def _fuzz(schema: Any, base_url: str, headers: dict[str, str], pins: dict[str, str],
          counts: Callable[[], dict[str, int]], *, mode: GenerationMode, examples: int,
          cards: tuple[str, ...],
          expect: Callable[[tuple[str, str]], int | None] = lambda route: None,
          derandomize: bool = True) -> int:
    """Fuzz every operation of ``schema``, card references respelled (:func:`respell`) from
    ``cards``; returns the number of responses per status class."""
    statuses: Counter[str] = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        route = _route(operation)
        if route in PUBLIC_ROUTES:
            continue
        names = {p.name for p in operation.path_parameters}
        strategy = operation.as_strategy(
            generation_mode=mode, path_parameters={k: v for k, v in pins.items() if k in names})

        @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=strategy, data=st.data())
        def run(case: Any, data: st.DataObject) -> None:
            respell(case, data, cards)
            if isinstance(case.query, dict) and "wait" in case.query:
                case.query["wait"] = 0
            before = counts()
            response = case.call(base_url=base_url, headers=headers, timeout=60)
            statuses[f"{response.status_code // 100}xx"] += 1
            _check(operation, response, before, counts(), expect(route))
            # successes and errors have the documented shape (errors: problem details)
            case.validate_response(response, checks=[response_schema_conformance])

        run()
    return statuses


async def _run_fuzz(make_env, examples: int, derandomize: bool) -> dict[str, Counter[str]]:
    async with make_env() as env:
        seed = await _seed(env)
        server, task, base_url = await start_server(create_app(env.settings, env.resources))
        try:
            raw = (await env.client.get("/schema/openapi.json")).json()
            schema = schemathesis.openapi.from_dict(raw)
            conn = psycopg.connect(env.migrator_url, autocommit=True)

            def counts() -> dict[str, int]:
                return archive_row_counts(conn)

            pins, cards = seed["pins"], seed["cards"]

            def hostile(kind: str) -> Callable[[tuple[str, str]], int | None]:
                if kind in ("generated", "garbage"):
                    return lambda route: 401
                if kind == "other":
                    return lambda route: 404
                return lambda route: None if route in ALLOWED_ROUTES[kind] else 403

            def work() -> dict[str, Counter[str]]:
                sent = {}
                for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                    # generated path parameters (unknown cards, sessions, workspaces) ...
                    sent[f"full/{mode.value}/free"] = _fuzz(
                        schema, base_url, seed["full"], {"workspace_id": WS}, counts,
                        mode=mode, examples=examples, cards=cards, derandomize=derandomize)
                    # ... and the workspace's real ones, so bodies reach the use cases
                    sent[f"full/{mode.value}/pinned"] = _fuzz(
                        schema, base_url, seed["full"], pins, counts, mode=mode,
                        examples=examples, cards=cards, derandomize=derandomize)
                for kind in ("generated", "garbage", "other", *ALLOWED_ROUTES):
                    sent[kind] = _fuzz(schema, base_url, seed[kind], pins, counts,
                                       mode=GenerationMode.POSITIVE,
                                       examples=max(2, examples // 5), cards=cards,
                                       expect=hostile(kind), derandomize=derandomize)
                return sent

            try:
                sent = await asyncio.to_thread(work)
            finally:
                conn.close()
        finally:
            await stop_server(server, task)
    for run, statuses in sent.items():
        print(f"fuzz {run}: {sum(statuses.values())} requests, {dict(sorted(statuses.items()))}")
    return sent


async def test_fuzz_every_operation(make_env):
    """Bounded run for ``make test``: a few deterministic examples per operation and mode."""
    sent = await _run_fuzz(make_env, examples=int(os.environ.get("MEMARC_FUZZ_QUICK", "6")),
                           derandomize=True)
    assert all(sum(n.values()) > 0 for n in sent.values()), sent
    # valid requests reached the use cases and succeeded, hostile ones never did
    assert sent["full/positive/pinned"]["2xx"] > 0, sent
    assert all(sent[k]["2xx"] == 0 for k in ("generated", "garbage", "other")), sent


@pytest.mark.fuzz_long
async def test_fuzz_long(make_env):
    """The long, randomised run (``pytest -m fuzz_long``)."""
    examples = int(os.environ.get("MEMARC_FUZZ_EXAMPLES", "200"))
    sent = await _run_fuzz(make_env, examples=examples, derandomize=False)
    assert all(sum(n.values()) > 0 for n in sent.values()), sent
