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
PROBLEM_FIELDS = {"type", "title", "status", "detail", "code"}
#: Routes a memory.read token may use (recall and counts); every other one answers it 403.
READ_ROUTES = {("POST", "/api/workspaces/{workspace_id}/memory/search"),
               ("GET", "/api/workspaces/{workspace_id}/memory/status")}
PUBLIC_ROUTES = {("GET", "/healthz"), ("GET", "/readyz")}
_S = "/api/workspaces/{workspace_id}/sessions/{session_id}"
#: The reviewer gate: the routes a memory.propose token and a memory.review token may use.
PROPOSE_ROUTES = {("POST", f"{_S}/proposals"), ("GET", f"{_S}/summary")}
REVIEW_ROUTES = {("GET", f"{_S}/summary"), ("POST", f"{_S}/review"), ("POST", f"{_S}/solved-index")}
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
    for h, ws in ((full, "wa"), (other, "wb")):
        r = await env.client.post(f"/api/workspaces/{ws}/memory", json=CARD, headers=h)
        assert r.status_code == 201, r.text
        cards.append(r.json()["card"]["id"])
        r = await env.client.post(f"/api/workspaces/{ws}/sessions/s1/proposals",
                                  json={"proposals": [PROPOSAL]}, headers=h)
        assert r.status_code == 201, r.text
    r = await env.client.post(f"/api/workspaces/{WS}/memory/index", headers=full)
    assert r.status_code == 202, r.text
    return {"full": full, "other": other, "read": env.token(WS, "memory.read"),
            "propose": env.token(WS, "memory.propose"), "review": env.token(WS, "memory.review"),
            "garbage": {"Authorization": "Bearer mat_" + "x" * 43}, "generated": {},
            "pins": {"workspace_id": WS, "card_id": cards[0], "session_id": "s1",
                     "rebuild_id": r.json()["id"]}}


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
          expect: Callable[[tuple[str, str]], int | None] = lambda route: None,
          derandomize: bool = True) -> int:
    """Fuzz every operation of ``schema``; returns the number of responses per status class."""
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
        @given(case=strategy)
        def run(case: Any) -> None:
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

            pins = seed["pins"]

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
                        mode=mode, examples=examples, derandomize=derandomize)
                    # ... and the workspace's real ones, so bodies reach the use cases
                    sent[f"full/{mode.value}/pinned"] = _fuzz(
                        schema, base_url, seed["full"], pins, counts, mode=mode,
                        examples=examples, derandomize=derandomize)
                for kind in ("generated", "garbage", "other", *ALLOWED_ROUTES):
                    sent[kind] = _fuzz(schema, base_url, seed[kind], pins, counts,
                                       mode=GenerationMode.POSITIVE,
                                       examples=max(2, examples // 5), expect=hostile(kind),
                                       derandomize=derandomize)
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
