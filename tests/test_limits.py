"""Input limits, failed authentications and the activity of every mutating route (DESIGN §8).

- Each documented limit answers a 4xx problem-details body that names the limit, and writes
  nothing but the rejection's own activity record.
- Failed authentications are counted per client address and minute and logged with the address,
  never the token.
- Every mutating route (enumerated from the app's route table) writes an activity record (who,
  verb, card, outcome, time) when it succeeds and when it is rejected.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
from helpers import archive_row_counts, row_changes, start_server, stop_server

from shared import models
from shared.archive.authentication import FailedAuthLog
from shared.archive.transfer import MAX_IMPORT_CARDS
from shared.config import load_settings
from writer.app import create_app
from writer.auth import query_parameters, reject_unknown_query
from writer.routes.memory import MAX_IMPORT_BYTES

BASE = "/api/workspaces/acme/memory"
SESSION = "/api/workspaces/acme/sessions/s1"
RULE = {"family": "sql_rule", "title": "Fiscal year starts in April",
        "content": {"rule": "The fiscal year starts on April 1st."}}


def _rule(**extra: Any) -> dict[str, Any]:
    return {**RULE, **extra}


def _proposal(key: str) -> dict[str, Any]:
    return {"key": key, "kind": "addition", "decisions": [{"id": "d", "status": "approved"}],
            "family": "sql_rule", "title": f"Rule {key}", "content": {"rule": f"Rule {key}."}}


def limit_cases(target: str) -> list[tuple[str, str, str, dict[str, Any], Any, int]]:
    """(name, method, path, params, body, limit): one request just over each limit."""
    link = [{"target": f"mem-00000000-0000-4000-8000-{i:012d}"} for i in range(51)]
    big = "x" * (models.MAX_BODY_BYTES + 10)
    return [
        ("body size", "POST", BASE, {}, _rule(title="t", content={"rule": big}),
         models.MAX_BODY_BYTES),
        ("title length", "POST", BASE, {}, _rule(title="t" * 201), models.MAX_TITLE),
        ("scope length", "POST", BASE, {}, _rule(scope="s" * 201), models.MAX_SCOPE),
        ("content field length", "POST", BASE, {},
         _rule(content={"rule": "r" * (models.MAX_TEXT + 1)}), models.MAX_TEXT),
        ("sql length", "POST", BASE, {}, {"family": "solved_question", "title": "q",
                                          "content": {"question": "q",
                                                      "sql": "s" * (models.MAX_SQL + 1)}},
         models.MAX_SQL),
        ("concepts count", "POST", BASE, {}, _rule(concepts=[f"c{i}" for i in range(51)]),
         models.MAX_CONCEPTS),
        ("concept length", "POST", BASE, {}, _rule(concepts=["c" * 101]), models.MAX_CONCEPT),
        ("dependencies count", "POST", BASE, {},
         _rule(dependencies=[{"database": f"d{i}"} for i in range(51)]), models.MAX_DEPENDENCIES),
        ("links count", "POST", BASE, {}, _rule(links=link), models.MAX_LINKS),
        ("link fan-out of an update", "PUT", f"{BASE}/{target}", {},
         _rule(links=link, revision=1), models.MAX_LINKS),
        ("per_page", "GET", BASE, {"per_page": 101}, None, models.MAX_PER_PAGE),
        ("list query length", "GET", BASE, {"q": "q" * 2001}, None, models.MAX_QUERY),
        ("top", "POST", f"{BASE}/search", {}, {"query": "fiscal", "top": 101}, models.MAX_TOP),
        ("query length", "POST", f"{BASE}/search", {}, {"query": "q" * 2001}, models.MAX_QUERY),
        ("exclusions", "POST", f"{BASE}/search", {},
         {"query": "fiscal", "exclude": [f"mem-{i}" for i in range(501)]}, models.MAX_EXCLUDE),
        ("activity page", "GET", f"{BASE}/activity", {"limit": 501}, None, 500),
        ("pending page", "GET", f"{BASE}/pending", {"limit": 1001}, None, 1000),
        ("proposals per batch", "POST", f"{SESSION}/proposals", {},
         {"proposals": [_proposal(f"k{i}") for i in range(101)]}, 100),
    ]


def _problem(r, limit: int, name: str) -> dict[str, Any]:
    assert 400 <= r.status_code < 500, (name, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/problem+json"), name
    body = r.json()
    assert {"type", "title", "status", "detail", "code"} <= set(body), name
    text = json.dumps(body)
    assert str(limit) in text or f"{limit:,}" in text, (name, text[:500])
    return body


async def test_an_unknown_query_parameter_is_refused_not_ignored(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await env.client.post(BASE, json=RULE, headers=h)
        r = await env.client.get(BASE, params={"famly": "domain_clarification"}, headers=h)
        assert r.status_code == 400 and r.json()["parameter"] == "famly", r.text
        assert "family" in r.json()["detail"]  # the allowed names are listed
        r = await env.client.post(BASE, params={"wiat": 5}, json=RULE, headers=h)
        assert r.status_code == 400 and r.json()["code"] == "bad_request"
        assert (await env.client.get(BASE, headers=h)).json()["total"] == 1  # nothing created
        a = (await env.client.get(f"{BASE}/activity", headers=h)).json()["activity"][0]
        assert (a["verb"], a["outcome"]) == ("create", "rejected:bad_request")
        # without a valid token the caller learns nothing about parameters: 401 first
        r = await env.client.get(BASE, params={"famly": "x"})
        assert r.status_code == 401


def test_the_unknown_query_guard_takes_what_the_openapi_document_lists():
    """``reject_unknown_query`` lets through, on every route it guards, exactly the query
    parameters the OpenAPI document lists for that route: both are read from the handler."""
    app = create_app(load_settings({}))
    doc = app.openapi_schema.to_schema()
    guarded = 0
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            guards = handler.resolve_guards()
            if not handler.include_in_schema or reject_unknown_query not in guards:
                continue
            taken = query_parameters(handler, frozenset(route.path_parameters))
            for method in handler.http_methods:
                operation = doc["paths"][route.path_format][method.lower()]
                listed = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
                assert taken == listed, (method, route.path_format)
                guarded += 1
    assert guarded >= 24


async def test_every_limit_is_a_4xx_naming_it_and_writes_nothing(make_env, subtests):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme", "memory.manage", "memory.propose", "memory.review")
        target = (await env.client.post(BASE, json=RULE, headers=h)).json()["card"]["id"]
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            for name, method, path, params, body, limit in limit_cases(target):
                with subtests.test(limit=name):
                    before = archive_row_counts(conn)
                    r = await env.client.request(method, path, params=params, json=body, headers=h)
                    _problem(r, limit, name)
                    changed = row_changes(before, archive_row_counts(conn))
                    expected = {"activity": 1} if method in ("POST", "PUT") and "search" not in path \
                        else {}
                    assert changed == expected, (name, changed)


async def test_an_import_over_its_card_count_or_size_is_a_4xx_recorded_as_rejected(make_env):
    """At most MAX_IMPORT_CARDS cards, and MAX_IMPORT_BYTES per body; each rejection writes its
    activity record and nothing else."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme", "memory.manage", "memory.propose", "memory.review")
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            lines = "\n".join(json.dumps({"key": f"k{i}", **RULE, "title": f"t{i}"})
                              for i in range(MAX_IMPORT_CARDS + 1))
            before = archive_row_counts(conn)
            r = await env.client.post(f"{BASE}/import", content=gzip.compress(lines.encode()),
                                      headers={**h, "Content-Encoding": "gzip"})
            _problem(r, MAX_IMPORT_CARDS, "cards per import")
            r = await env.client.post(f"{BASE}/import", content=b" " * (MAX_IMPORT_BYTES + 1),
                                      headers=h)
            body = _problem(r, MAX_IMPORT_BYTES, "import size")
            assert r.status_code == 413 and body["limit"] == MAX_IMPORT_BYTES
            assert row_changes(before, archive_row_counts(conn)) == {"activity": 2}
            rows = conn.execute("SELECT verb, outcome FROM memory.activity ORDER BY id DESC"
                                " LIMIT 2").fetchall()
            assert rows == [("import", "rejected:request_too_large"),
                            ("import", "rejected:invalid_input")]


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


SECRET = "mat_" + "S3cr3t" * 7


@dataclass
class FailedAuthentications:
    """What 25 requests with bad credentials (then one valid one) over real HTTP left: the
    responses, the app's failure count for 127.0.0.1, every ``memarc`` log record, and how many
    activity records mention the token."""

    responses: list[httpx.Response]
    valid: httpx.Response
    failures: int
    records: list[logging.LogRecord]
    activity_with_secret: int

    @property
    def auth_lines(self) -> list[logging.LogRecord]:
        return [r for r in self.records if r.name == "memarc.auth"]


async def _failed_authentications(make_env) -> FailedAuthentications:
    """Serve the writer on loopback and send it 25 requests whose credentials are an unknown
    token, none, a Basic header and an oversized token, in turn, then one valid request."""
    capture = _Capture()
    logger = logging.getLogger("memarc")
    logger.addHandler(capture)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        async with make_env() as env:
            env.workspace("acme")
            valid = env.token("acme")
            app = create_app(env.settings, env.resources)
            # one minute for the whole burst: on the wall clock a minute could turn inside it
            # (more likely under parallel workers), and no minute would then reach the alert
            minute = time.time()
            app.state.auth_failures = FailedAuthLog(clock=lambda: minute)
            server, task, url = await start_server(app)
            try:
                async with httpx.AsyncClient(base_url=url) as http:
                    bad = [{"Authorization": f"Bearer {SECRET}"}, {},
                           {"Authorization": f"Basic {SECRET}"},
                           {"Authorization": "Bearer " + "y" * 300}]
                    responses = [await http.get(BASE, headers=bad[i % len(bad)])
                                 for i in range(25)]
                    ok = await http.get(BASE, headers=valid)
            finally:
                await stop_server(server, task)
            with psycopg.connect(env.migrator_url) as conn:
                leaked = conn.execute("SELECT count(*) FROM memory.activity WHERE detail::text"
                                      " LIKE %s", [f"%{SECRET}%"]).fetchone()[0]
            return FailedAuthentications(responses, ok, app.state.auth_failures.failures("127.0.0.1"),
                                         capture.records, leaked)
    finally:
        logger.removeHandler(capture)
        logger.setLevel(old_level)


async def test_failed_authentications_are_401s_that_never_echo_the_token(make_env):
    run = await _failed_authentications(make_env)
    for r in run.responses:
        assert r.status_code == 401 and SECRET not in r.text
        assert r.headers["www-authenticate"] == "Bearer"
    assert run.valid.status_code == 200


async def test_failed_authentications_are_counted_and_logged_per_client_and_minute(make_env):
    run = await _failed_authentications(make_env)
    assert run.failures == 25
    lines = run.auth_lines
    assert len([r for r in lines if r.levelno == logging.WARNING]) == 25
    assert [r.auth["failures_this_minute"] for r in lines
            if r.levelno == logging.WARNING] == list(range(1, 26))
    assert all(r.auth["client"] == "127.0.0.1" for r in lines)
    assert {r.auth["reason"] for r in lines} == {"unknown", "missing", "malformed"}


async def test_a_burst_of_failed_authentications_raises_one_alert(make_env):
    run = await _failed_authentications(make_env)
    alerts = [r for r in run.auth_lines if r.levelno == logging.ERROR]
    assert len(alerts) == 1 and "auth_failure_rate client=127.0.0.1" in alerts[0].getMessage()


async def test_a_failed_token_never_reaches_a_log_line_or_the_activity(make_env):
    run = await _failed_authentications(make_env)
    for record in run.records:  # the token never reaches any log line
        assert SECRET not in record.getMessage() and SECRET not in str(record.__dict__)
    assert run.activity_with_secret == 0


def test_failed_auth_log_counts_per_minute_and_quotes_paths():
    now = [600.0]
    log = FailedAuthLog(alert_per_minute=2, clock=lambda: now[0])
    capture = _Capture()
    logging.getLogger("memarc.auth").addHandler(capture)
    try:
        assert [log.record("10.0.0.1", "unknown", "/a") for _ in range(3)] == [1, 2, 3]
        assert log.record("10.0.0.2", "missing", "/a\nforged line") == 1
        now[0] += 60
        assert log.failures("10.0.0.1") == 0 and log.record("10.0.0.1", "unknown", "/a") == 1
    finally:
        logging.getLogger("memarc.auth").removeHandler(capture)
    assert all("\n" not in r.getMessage() for r in capture.records)
    assert sum(r.levelno == logging.ERROR for r in capture.records) == 1


# ---- every mutating route writes an activity record ----

def _run(run_id: str, database: str, table: str) -> dict[str, Any]:
    """A schema-change run of ``database``.public removing ``table``."""
    return {"run_id": run_id, "database": database, "schema": "public",
            "removed_tables": [table]}


def _mutating_routes(app) -> dict[tuple[str, str], str]:
    out = {}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            for method in handler.http_methods - {"GET", "HEAD", "OPTIONS"}:
                assert "activity" in handler.opt, f"{method} {route.path}: declare opt['activity']"
                if handler.opt["activity"]:
                    out[(method, route.path)] = handler.opt["activity"]
    return out


async def test_every_mutating_route_records_success_and_rejection(make_env, subtests):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme", "memory.manage", "memory.propose", "memory.review", "memory.schema")
        routes = _mutating_routes(create_app(env.settings, env.resources))
        card = (await env.client.post(BASE, json=RULE, headers=h)).json()["card"]["id"]
        m = "/api/workspaces/{workspace_id:str}/memory"
        s = "/api/workspaces/{workspace_id:str}/sessions/{session_id:str}"
        sc = "/api/workspaces/{workspace_id:str}/schema-changes"
        SC = "/api/workspaces/acme/schema-changes"  # noqa: N806
        review = {"review_id": "r1", "selected": [{"key": "k1"}]}
        reader = env.token("acme", "memory.read")
        case_body = {"question": "what is the rule", "mode": "rules", "expected": [card]}
        case = (await env.client.post(f"{BASE}/evaluation-cases", json=case_body,
                                      headers=h)).json()["id"]
        cases = f"{BASE}/evaluation-cases"
        nope = "00000000-0000-0000-0000-000000000000"
        # a recall that returned the card (its record as the database owner: nothing is
        # projected here), for the feedback route
        recall = uuid.uuid4()
        with psycopg.connect(env.migrator_url) as conn:
            conn.execute(
                "INSERT INTO memory.recall_records (id, workspace_id, actor, mode, top,"
                " query_digest, card_ids, scores, excluded, timings) VALUES (%s, 'acme',"
                " 'token:x', 'rules', 10, %s, %s, '{0.1}', 0, '{}')",
                [recall, "sha256:" + "0" * 64, [uuid.UUID(card[4:])]])
        feedback = f"{BASE}/recalls/{recall}/feedback"
        # (ok path, body; rejected path, body; card id it names[; headers of the rejected one])
        plan: dict[tuple[str, str], tuple[Any, ...]] = {
            ("POST", m): (BASE, _rule(title="Second"), BASE, _rule(title=" "), None),
            ("PUT", m + "/{card_id:str}"): (f"{BASE}/{card}", _rule(revision=1),
                                            f"{BASE}/{card}", _rule(revision=1), card),
            ("POST", m + "/{card_id:str}/retry"): (f"{BASE}/{card}/retry", None,
                                                   f"{BASE}/mem-nope/retry", None, card),
            ("POST", m + "/import"): (f"{BASE}/import", json.dumps({"key": "a", **RULE}),
                                      f"{BASE}/import", "{not json", None),
            ("POST", m + "/index"): (f"{BASE}/index", None, f"{BASE}/index", None, None),
            ("POST", m + "/audit/repair"): (f"{BASE}/audit/repair", None,  # by a reader: 403
                                            f"{BASE}/audit/repair", None, None, reader),
            ("POST", s + "/proposals"): (f"{SESSION}/proposals", {"proposals": [_proposal("k1")]},
                                         f"{SESSION}/proposals", {"proposals": []}, None),
            ("POST", s + "/decisions"): (f"{SESSION}/decisions", {"decisions": [
                                             {"card_id": card, "decision": "accepted"}]},
                                         f"{SESSION}/decisions", {"decisions": []}, None),
            ("POST", s + "/review"): (f"{SESSION}/review", review, f"{SESSION}/review",
                                      {"review_id": "r1", "decline_all": True}, None),
            ("POST", s + "/solved-index"): (f"{SESSION}/solved-index", None,
                                            "/api/workspaces/acme/sessions/none/solved-index",
                                            None, None),
            ("POST", sc): (f"{SC}", _run("x1", "shop", "gone"), f"{SC}",
                           _run("x1", "shop", "other"), None),  # 409: other objects
            ("POST", sc + "/record"): (f"{SC}/record", _run("x2", "crm", "gone"), f"{SC}/record",
                                       _run("x3", "crm", "other"), None),  # 409: x2 is open
            ("POST", sc + "/cleanup"): (f"{SC}/cleanup", {"run_id": "x2"}, f"{SC}/cleanup",
                                        {"run_id": "none"}, None),
            ("POST", m + "/recalls/{recall_id:str}/feedback"): (
                feedback, {"cards": [{"card_id": card, "verdict": "helpful"}]},
                feedback, {"cards": [{"card_id": f"mem-{nope}", "verdict": "wrong"}]}, None),
            ("POST", m + "/evaluations"): (f"{BASE}/evaluations", None,  # 409: one queued
                                           f"{BASE}/evaluations", None, None),
            ("POST", m + "/evaluation-cases"): (cases, case_body, cases,
                                                {**case_body, "expected": ["mem-nope"]}, None),
            ("PUT", m + "/evaluation-cases/{case_id:str}"): (f"{cases}/{case}", case_body,
                                                             f"{cases}/{nope}", case_body, None),
            ("DELETE", m + "/{card_id:str}"): (f"{BASE}/{card}", None, f"{BASE}/{card}", None,
                                               card),
            ("DELETE", m + "/evaluation-cases/{case_id:str}"): (f"{cases}/{case}", None,
                                                                f"{cases}/{case}", None, None),
            # no previous index here, so their rejection only (409 no_previous_index); their
            # successes, and their activity, are tests/test_shadow_rebuild.py's
            ("POST", m + "/index/switch-back"): (None, None, f"{BASE}/index/switch-back", None,
                                                 None),
            ("DELETE", m + "/index/previous"): (None, None, f"{BASE}/index/previous", None,
                                                None),
        }
        assert set(plan) == set(routes), set(plan) ^ set(routes)
        order = [k for k in plan if k[0] != "DELETE"] + [k for k in plan if k[0] == "DELETE"]
        for key in order:
            ok_path, ok_body, bad_path, bad_body, card_id, *bad_headers = plan[key]
            verb = routes[key]
            for path, body, expect_ok, headers in ((ok_path, ok_body, True, h),
                                                   (bad_path, bad_body, False,
                                                    bad_headers[0] if bad_headers else h)):
                if path is None:
                    continue
                # each route's success, then its rejection (the later routes need the earlier
                # ones' successes: a failure here may cascade, but never hides the others)
                with subtests.test(route=" ".join(key), outcome="ok" if expect_ok else "rejected"):
                    kw = {"content": body} if isinstance(body, str) else {"json": body}
                    r = await env.client.request(key[0], path, headers=headers, **kw)
                    assert (r.status_code < 400) == expect_ok, (key, r.status_code, r.text)
                    a = (await env.client.get(f"{BASE}/activity", params={"limit": 1},
                                              headers=h)).json()["activity"][0]
                    assert a["verb"] == verb, (key, a)
                    assert a["actor"].startswith("token:") and a["at"], (key, a)
                    if expect_ok:
                        assert not a["outcome"].startswith(("rejected", "failed")), (key, a)
                    else:
                        assert a["outcome"] == f"rejected:{r.json()['code']}", (key, a, r.text)
                    if card_id and path.endswith(card_id):
                        assert a["card_id"] == card_id, (key, a)


async def test_a_failed_mutation_is_recorded_as_failed(make_env):
    """A use case that fails on a dependency (here: no index in this process) leaves a
    ``failed:<code>`` record; the shared core records it, whatever surface called it."""
    import dataclasses

    from shared.auth import Principal
    from shared.errors import IndexUnavailable

    async with make_env() as env:
        env.workspace("acme")
        archive = dataclasses.replace(env.resources, index=None, embedder=None).archive()
        who = Principal(workspace="acme", permissions=frozenset({"memory.manage"}),
                        actor="test:operator")
        try:
            await archive.repair_index(who, "acme")
        except IndexUnavailable:
            pass
        else:
            raise AssertionError("repair_index without an index must fail")
        with psycopg.connect(env.migrator_url) as conn:
            rows = conn.execute("SELECT actor, verb, outcome, at IS NOT NULL FROM memory.activity"
                                ).fetchall()
        assert rows == [("test:operator", "audit-repair", "failed:index_unavailable", True)]


async def test_a_body_nested_too_deeply_is_a_400_recorded_as_rejected(make_env, subtests):
    """A JSON body nested deeper than the decoder's recursion limit (msgspec raises
    ``RecursionError``) is the client's fault: 400 ``bad_request`` on every JSON route, an
    activity record of the mutating ones, nothing else written. It used to be a 500."""
    deep = "[" * 5000 + "]" * 5000
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme", "memory.manage", "memory.propose", "memory.review")
        card = (await env.client.post(BASE, json=RULE, headers=h)).json()["card"]["id"]
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            for method, path, verb in (("POST", BASE, "create"),
                                       ("PUT", f"{BASE}/{card}", "update"),
                                       ("POST", f"{BASE}/search", None),
                                       ("POST", f"{SESSION}/proposals", "propose"),
                                       ("POST", f"{SESSION}/review", "review")):
                with subtests.test(route=f"{method} {path}"):
                    before = archive_row_counts(conn)
                    r = await env.client.request(method, path, content=deep,
                                                 headers={**h, "Content-Type": "application/json"})
                    assert r.status_code == 400, (r.status_code, r.text[:300])
                    body = r.json()
                    assert body["code"] == "bad_request" and "nested too deeply" in body["detail"]
                    changed = row_changes(before, archive_row_counts(conn))
                    assert changed == ({"activity": 1} if verb else {}), changed
                    if verb:
                        a = (await env.client.get(f"{BASE}/activity", params={"limit": 1},
                                                  headers=h)).json()["activity"][0]
                        assert a["outcome"] == "rejected:bad_request", a
