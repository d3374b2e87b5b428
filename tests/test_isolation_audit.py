"""Isolation audit (DESIGN §8, issue 8): no workspace reaches another's rows, by any way in.

Every route, every CLI command, every explorer page, every table, every use case of ``shared``,
enumerated from the code or the catalogue so that a new one cannot be forgotten.

Workspace ``wa`` is the victim, ``wb`` the caller. Both hold a row in every workspace table.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from typing import Any

import psycopg
import pytest
from admin_helpers import seed_admin_rows
from helpers import archive_row_counts, archive_tables, row_changes, start_server, stop_server

from shared.auth import PERMISSIONS, Principal
from shared.errors import Forbidden, NotFound
from shared.models import CardWrite, SearchRequest
from shared.store.listing import ListQuery
from shared.workflow.requests import CardDecision, DecideRequest, ProposeRequest, ReviewRequest
from shared.archive.schema_changes import SchemaChangeRequest
from writer.app import create_app
from writer.auth import authorize, route_permissions
from writer.cli import COMMANDS, main

ALL = ("memory.manage", "memory.propose", "memory.review", "memory.schema")
#: Tables that hold no workspace data (migration bookkeeping, projection format history).
#: tables that belong to no workspace (``workspace_removals``: the record of a removed workspace,
#: kept after it, readable by the migrator login only)
GLOBAL_TABLES = {"schema_migrations", "projection_formats", "workspace_removals"}
PUBLIC_ROUTES = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")}
#: the administration pages authenticate by a session cookie, not a bearer token: their
#: workspace and permission checks are tested in tests/test_admin.py
COOKIE_ROUTES = "/admin"
SESSION_PATH = "/api/workspaces/{workspace_id}/sessions/{session_id}"


def card(title: str, **extra: Any) -> dict[str, Any]:
    return {"family": "domain_clarification", "title": title,
            "content": {"definition": f"{title}: the secret definition."},
            "concepts": ["secret-concept"],
            "dependencies": [{"database": "shop", "schema": "public", "table": "orders"}],
            **extra}


def proposal(title: str) -> dict[str, Any]:
    return {"key": "k1", "kind": "addition", "decisions": [{"id": "d1", "status": "approved"}],
            "family": "sql_rule", "title": title, "content": {"rule": f"{title} rule."}}


async def seed(env) -> dict[str, Any]:
    """A row of each workspace in every workspace table; ids and titles of wa to look for."""
    env.workspace("wa")
    env.workspace("wb")
    data: dict[str, Any] = {"h": {}}
    for ws in ("wa", "wb"):
        h = env.token(ws, *ALL)
        data["h"][ws] = h
        base = f"/api/workspaces/{ws}/memory"
        first = (await env.client.post(base, json=card(f"Alpha {ws} term"), headers=h)).json()
        second = await env.client.post(base, headers=h, json=card(
            f"Beta {ws} term", links=[{"target": first["card"]["id"], "meaning": "refines"}]))
        assert second.status_code == 201, second.text
        sess = f"sess-{ws}"
        r = await env.client.post(f"/api/workspaces/{ws}/sessions/{sess}/proposals", headers=h,
                                  json={"proposals": [proposal(f"Gamma {ws} rule")]})
        assert r.status_code == 201, r.text
        r = await env.client.post(f"/api/workspaces/{ws}/sessions/{sess}/review", headers=h,
                                  json={"review_id": f"rev-{ws}", "selected": [{"key": "k1"}]})
        assert r.status_code == 200, r.text
        r = await env.client.post(f"/api/workspaces/{ws}/sessions/{sess}/decisions", headers=h,
                                  json={"decisions": [{"card_id": first["card"]["id"],
                                                       "decision": "accepted"}]})
        assert r.status_code == 200, r.text
        r = await env.client.post(f"/api/workspaces/{ws}/schema-changes", headers=h, json={
            "run_id": f"run-{ws}", "database": "gone", "schema": "public",
            "removed_tables": ["nothing"]})
        assert r.status_code == 200, r.text
        rebuild = await env.client.post(f"{base}/index", headers=h)
        assert rebuild.status_code == 202, rebuild.text
        case = await env.client.post(f"{base}/evaluation-cases", headers=h, json={
            "question": f"Delta {ws} question", "mode": "search",
            "expected": [first["card"]["id"]]})
        assert case.status_code == 201, case.text
        run = await env.client.post(f"{base}/evaluations", headers=h)
        assert run.status_code == 202, run.text
        await seed_admin_rows(env, ws, h)  # a browser session, a sign-in link
        data[ws] = {"card": first["card"]["id"], "card2": second.json()["card"]["id"],
                    "session": sess, "rebuild": rebuild.json()["id"],
                    "case": case.json()["id"], "run": run.json()["id"],
                    "secrets": [first["card"]["id"], second.json()["card"]["id"],
                                rebuild.json()["id"], case.json()["id"], run.json()["id"],
                                f"Delta {ws}", f"Alpha {ws}", f"Beta {ws}",
                                f"Gamma {ws}", f"rev-{ws}", f"run-{ws}"]}
    for _ in range(5):  # until the rebuilds and evaluation runs have ended (a burst worker
        await env.drain()  # stops once its queue is empty, cancelling a job still running)
        if not env.scalar("SELECT (SELECT count(*) FROM memory.index_rebuilds"
                          " WHERE status IN ('queued', 'running'))"
                          " + (SELECT count(*) FROM memory.eval_runs"
                          " WHERE status IN ('queued', 'running'))"):
            break
    for ws in ("wa", "wb"):  # a recall, its record, and feedback on its first card
        r = await env.client.post(f"/api/workspaces/{ws}/memory/search", headers=data["h"][ws],
                                  json={"query": f"Alpha {ws} term"})
        assert r.status_code == 200 and r.json()["recall_id"], r.text
        data[ws]["recall"] = r.json()["recall_id"]
        data[ws]["secrets"].append(data[ws]["recall"])
        r = await env.client.post(
            f"/api/workspaces/{ws}/memory/recalls/{data[ws]['recall']}/feedback",
            headers=data["h"][ws], json={"cards": [
                {"card_id": r.json()["results"][0]["card"]["id"], "verdict": "helpful"}]})
        assert r.status_code == 200, r.text
    return data


def assert_no_secrets(text: str, secrets: list[str], where: Any) -> None:
    for s in secrets:
        assert s not in text, (where, s)


def _public_body(response) -> str:
    """The response body without ``instance`` (the caller's own request path)."""
    try:
        body = response.json()
    except ValueError:
        return response.text
    if isinstance(body, dict):
        body.pop("instance", None)
    return json.dumps(body)


# ---- routes ----

def api_routes(app) -> list[tuple[str, str, Any]]:
    """(method, path template, handler) of every route of the writer except OPTIONS, health and
    the OpenAPI documents."""
    out = []
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            for method in sorted(handler.http_methods - {"OPTIONS"}):
                path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
                if (method, path) in PUBLIC_ROUTES or path.startswith(("/schema", COOKIE_ROUTES)):
                    continue
                out.append((method, path, handler))
    return out


#: A valid body for every route that takes one (keyed by method and path template).
def bodies(a: dict[str, Any]) -> dict[tuple[str, str], Any]:
    m = "/api/workspaces/{workspace_id}/memory"
    s = "/api/workspaces/{workspace_id}/sessions/{session_id}"
    return {
        ("POST", m): card("Intruder"),
        ("PUT", m + "/{card_id}"): {**card("Intruder"), "revision": 1},
        ("POST", m + "/search"): {"query": "alpha term"},
        ("POST", m + "/recalls/{recall_id}/feedback"): {"cards": [
            {"card_id": a["card"], "verdict": "not_helpful"}]},
        ("POST", m + "/import"): json.dumps({"key": "x", **card("Intruder")}),
        ("POST", s + "/proposals"): {"proposals": [proposal("Intruder")]},
        ("POST", s + "/review"): {"review_id": "intruder", "decline_all": True},
        ("POST", s + "/decisions"): {"decisions": [{"card_id": a["card"],
                                                    "decision": "rejected"}]},
        ("POST", "/api/workspaces/{workspace_id}/schema-changes"): {
            "run_id": "intruder", "database": "shop", "schema": "public",
            "removed_tables": ["orders"]},
        ("POST", "/api/workspaces/{workspace_id}/schema-changes/record"): {
            "run_id": "intruder", "database": "shop", "schema": "public",
            "removed_tables": ["orders"]},
        ("POST", "/api/workspaces/{workspace_id}/schema-changes/cleanup"): {
            "run_id": "intruder"},
        ("POST", m + "/evaluation-cases"): {"question": "intruder", "mode": "search",
                                            "expected": [a["card"]]},
        ("POST", m + "/index"): {},  # a plain rebuild ({"shadow": ...} for a shadow one)
        # these read their request to refuse any body (a member, non-JSON: 400): they get none
        ("POST", m + "/index/switch-back"): None,
        ("POST", m + "/evaluations"): None,
        ("PUT", m + "/evaluation-cases/{case_id}"): {"question": "intruder", "mode": "search",
                                                     "expected": [a["card"]]},
    }


def fill(path: str, ids: dict[str, Any], workspace: str) -> str:
    return (path.replace("{workspace_id}", workspace).replace("{card_id}", ids["card"])
            .replace("{session_id}", ids["session"]).replace("{rebuild_id}", ids["rebuild"])
            .replace("{run_id}", ids["run"]).replace("{case_id}", ids["case"])
            .replace("{recall_id}", ids["recall"]))


async def call(env, method: str, path: str, body: Any, headers: dict[str, str]):
    if isinstance(body, str):
        return await env.client.request(method, path, content=body.encode(), headers=headers)
    return await env.client.request(method, path, json=body, headers=headers)


async def _check_route_isolation(env, data: dict[str, Any], table: dict[tuple[str, str], Any],
                                 method: str, path: str, handler: Any) -> None:
    """One route: guarded, declares a known permission, has a body if it takes one; B's token
    on A's path is a 404 without A's data, B's own path with A's ids too, and A's token without
    the route's permission is a 403 without A's data."""
    a = data["wa"]
    assert authorize in handler.resolve_guards(), (method, path)
    assert "permission" in handler.opt, f"{method} {path} names no permission"
    permissions = route_permissions(handler)
    assert permissions and set(permissions) <= set(PERMISSIONS), (method, path)
    takes_body = "data" in inspect.signature(handler.fn).parameters \
        or "request" in inspect.signature(handler.fn).parameters
    assert takes_body == ((method, path) in table), f"add a body for {method} {path}"
    body = table.get((method, path))
    # a token of workspace B with every permission, on A's path and ids: 404, no data
    r = await call(env, method, fill(path, a, "wa"), body, data["h"]["wb"])
    assert r.status_code == 404, (method, path, r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/problem+json")
    assert_no_secrets(_public_body(r), a["secrets"], (method, path))
    # B's token on B's own path with A's ids: 404 or a B-only answer, never A's data
    # (a session id names the caller's own session: proposing or deciding under it creates one;
    # A's card in the body of a decision is refused like any card outside B's workspace, 422)
    if re.search(r"\{(card|rebuild|session|run|case|recall)_id\}", path) and not (
            path.endswith("/proposals")
            or (method, path) == ("POST", f"{SESSION_PATH}/decisions")):
        url = fill(path, a, "wb")
        r = await call(env, method, url, body, data["h"]["wb"])
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        # (the ids the caller sent may be echoed, as for any missing id)
        assert_no_secrets(_public_body(r), [x for x in a["secrets"] if x not in url],
                          (method, path, "wb"))
    # A token of workspace A with every permission but the one(s) the route takes: 403
    others = [p for p in PERMISSIONS if p not in permissions
              and not ("memory.read" in permissions and p == "memory.manage")]
    r = await call(env, method, fill(path, a, "wa"), body, env.token("wa", *others))
    assert r.status_code == 403, (method, path, r.status_code, r.text)
    assert_no_secrets(_public_body(r), a["secrets"], (method, path, "perm"))


async def test_every_route_refuses_other_workspaces_and_missing_permissions(make_env, subtests):
    async with make_env() as env:
        data = await seed(env)
        a = data["wa"]
        app = create_app(env.settings, env.resources)
        routes = api_routes(app)
        table = bodies(a)
        assert len(routes) >= 21
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            before = archive_row_counts(conn)
            last_activity = conn.execute("SELECT max(id) FROM memory.activity").fetchone()[0]
        for method, path, handler in routes:
            with subtests.test(route=f"{method} {path}"):
                await _check_route_isolation(env, data, table, method, path, handler)
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            after = archive_row_counts(conn)
            # nothing written but tokens (one per route) and rejection records: in A the 403s
            # of its mutating routes (B's 404s on A leave nothing in A), in B its own 404s
            mutations = sum(1 for _, _, h in routes if h.opt.get("activity"))
            changed = row_changes(before, after)
            assert set(changed) == {"api_tokens", "activity"}, changed
            assert changed["api_tokens"] == len(routes)
            rows = conn.execute("SELECT workspace_id, outcome, count(*) FROM memory.activity"
                                " WHERE id > %s GROUP BY 1, 2", [last_activity]).fetchall()
            assert {(w, o): n for w, o, n in rows if w == "wa"} == {
                ("wa", "rejected:forbidden"): mutations}, rows
            assert {o for w, o, n in rows if w == "wb"} == {"rejected:not_found"}, rows


# ---- CLI ----

#: Commands that do not act on a workspace through a token.
BOOTSTRAP = {"migrate", "workspace", "token",  # migrator credentials (operators only)
             "sign-in-link",
             "explorer-sign-in-link"}  # the explorer's signing secret on the operator's machine
# long-running servers (mcp: its tools per permission and workspace are in tests/test_mcp.py)
PROCESSES = {"up", "writer", "worker", "explorer", "mcp"}
LOCAL = {"convert-bird"}  # reads local dataset files only


def cli_argv(a: dict[str, Any], files: dict[str, str]) -> dict[str, list[str]]:
    """argv of every token-scoped command against workspace wa (with wa's ids)."""
    w = ["--workspace", "wa"]
    return {
        "list": ["list", *w], "show": ["show", *w, a["card"]],
        "create": ["create", *w, "--data", files["card"]],
        "update": ["update", *w, a["card"], "--data", files["update"]],
        "delete": ["delete", *w, a["card"], "--yes"], "pending": ["pending", *w],
        "retry": ["retry", *w, a["card"]], "search": ["search", *w, "alpha term"],
        "rules": ["rules", *w, "alpha term"], "solved-search": ["solved-search", *w, "alpha"],
        "feedback": ["feedback", *w, a["recall"], a["card"], "--helpful"],
        "recalls": ["recalls", *w],
        "import": ["import", *w, files["import"]], "export": ["export", *w],
        "status": ["status", *w],
        "activity": ["activity", *w], "audit": ["audit", *w],
        "index": ["index", *w, "--no-wait"],
        "eval": ["eval", *w, "--no-wait"], "eval-cases": ["eval-cases", *w],
        "eval-case-add": ["eval-case-add", *w, "--data", files["case"]],
        "eval-case-update": ["eval-case-update", *w, a["case"], "--data", files["case"]],
        "eval-case-delete": ["eval-case-delete", *w, a["case"]],
        "propose": ["propose", *w, "--session", a["session"], "--data", files["propose"]],
        "summary": ["summary", *w, "--session", a["session"]],
        "sessions": ["sessions", *w, "--status", "all"],
        "review-apply": ["review-apply", *w, "--session", a["session"], "--data",
                         files["review"]],
        "solved-index": ["solved-index", *w, "--session", a["session"]],
        "session": ["session", "decide", *w, a["session"], a["card"], "--rejected"],
        "schema-cleanup": ["schema-cleanup", *w, "--data", files["schema"]],
        # a protected request without a principal: MEMARC_TOKEN's
        "admin": ["admin", *w, "-c", files["admin"]],
    }


async def test_every_cli_command_refuses_other_workspaces_and_missing_permissions(
        make_env, tmp_path, monkeypatch, capsys, subtests):
    async with make_env() as env:
        data = await seed(env)
        a = data["wa"]
        files = {}
        for name, content in (("card", card("Intruder")),
                              ("update", {**card("Intruder"), "revision": 1}),
                              ("import", {"key": "x", **card("Intruder")}),
                              ("propose", {"proposals": [proposal("Intruder")]}),
                              ("review", {"review_id": "intruder", "decline_all": True}),
                              ("schema", {"run_id": "x", "database": "shop", "schema": "public",
                                          "removed_tables": ["orders"]}),
                              ("admin", {"operation": "delete", "card_id": a["card"]}),
                              ("case", {"question": "intruder", "mode": "search",
                                        "expected": [a["card"]]})):
            files[name] = str(tmp_path / f"{name}.json")
            (tmp_path / f"{name}.json").write_text(json.dumps(content))
        argvs = cli_argv(a, files)
        assert set(COMMANDS) == set(argvs) | BOOTSTRAP | PROCESSES | LOCAL, \
            "classify the new command here"
        server, task, url = await start_server(create_app(env.settings, env.resources))
        monkeypatch.setenv("MEMARC_URL", url)
        reader = env.token("wa", "memory.read")["Authorization"].split()[1]
        review_only = env.token("wa", "memory.review")["Authorization"].split()[1]
        propose_only = env.token("wa", "memory.propose")["Authorization"].split()[1]
        # the token that lacks the command's permission: a reader, or the nearest other token
        # (the reviewer gate: a proposing token cannot review, a reviewing one cannot propose)
        lacking = {**dict.fromkeys(("search", "rules", "solved-search", "status", "propose",
                                    "feedback", "session"), review_only),
                   **dict.fromkeys(("review-apply", "solved-index"), propose_only)}
        other = data["h"]["wb"]["Authorization"].split()[1]
        try:
            for name, argv in argvs.items():
                for token, codes in ((other, {"not_found"}),
                                     (lacking.get(name, reader), {"forbidden"})):
                    with subtests.test(command=name, expected=next(iter(codes))):
                        monkeypatch.setenv("MEMARC_TOKEN", token)
                        capsys.readouterr()
                        code = await asyncio.to_thread(main, list(argv))
                        out = capsys.readouterr()
                        assert code == 2 and out.out == "", (name, code, out)
                        err = json.loads(out.err.strip().splitlines()[-1])
                        assert err["code"] in codes, (name, err)
                        err.pop("instance", None)
                        assert_no_secrets(json.dumps(err), a["secrets"], name)
        finally:
            await stop_server(server, task)


# ---- explorer ----

def explorer_urls(ws: str, card_id: str, recall_id: str) -> list[str]:
    """Every explorer page of a workspace in every format its route accepts (a card's and a
    recall's with the ids given)."""
    from explorer_plugin.views import ROUTES

    urls = []
    for pattern, _ in ROUTES:
        if "(?P<workspace>" not in pattern and "_WS" not in pattern and "workspace" not in pattern:
            continue
        path = re.sub(r"\(\?P<workspace>[^)]*\)", ws, pattern)
        path = re.sub(r"\(\?P<card_id>[^)]*\)", card_id, path)
        path = re.sub(r"\(\?P<recall_id>[^)]*\)", recall_id, path)
        fmt = re.search(r"\(\\\.\(\?P<format>([a-z|]+)\)\)\?", path)
        base = re.sub(r"\(\\\.\(\?P<format>[a-z|]+\)\)\?", "", path).strip("^$")
        urls.append(base)
        if fmt:
            urls += [f"{base}.{f}" for f in fmt.group(1).split("|")]
    return urls


async def test_explorer_pages_and_exports_show_nothing_of_another_workspace(make_env, subtests):
    from datasette.app import Datasette

    async with make_env() as env:
        data = await seed(env)
        a = data["wa"]
        ds = Datasette(memory=False, metadata={"plugins": {"memarc-explorer": {
            "database_url": env.settings.database_url, "workspaces": {"bob": ["wb"]}}}})
        ds.memarc_resources = env.resources
        urls = explorer_urls("wa", a["card"], a["recall"])
        assert len(urls) >= 10, urls
        assert not [u for u in urls if "(?P<" in u], "name the new route's id here"
        for who, cookies in (("bob", {"ds_actor": ds.sign({"a": {"id": "bob"}}, "actor")}),
                             ("anonymous", {})):
            for url in urls:
                with subtests.test(actor=who, url=url):
                    r = await ds.client.get(url + ("?q=alpha" if "recall" in url else ""),
                                            cookies=cookies)
                    assert r.status_code in (403, 404), (who, url, r.status_code)
                    assert_no_secrets(r.text, a["secrets"], (who, url))
            r = await ds.client.get("/-/memory.json", cookies=cookies)
            assert "wa" not in [w.get("id") if isinstance(w, dict) else w
                                for w in r.json().get("workspaces", [])], (who, r.text)
        # bob's own workspace works (the check above is not vacuous), but not with wa's ids
        bob = {"ds_actor": ds.sign({"a": {"id": "bob"}}, "actor")}
        for url in explorer_urls("wb", a["card"], a["recall"]):
            if a["card"] in url or a["recall"] in url:
                with subtests.test(actor="bob", url=url, ids="wa's"):
                    r = await ds.client.get(url, cookies=bob)
                    if r.status_code == 303:  # a GET of the feedback form's target: its page
                        assert r.headers["location"] == url.removesuffix("/feedback"), url
                        r = await ds.client.get(r.headers["location"], cookies=bob)
                    assert r.status_code == 404, (url, r.status_code)
                    assert_no_secrets(r.text, [x for x in a["secrets"] if x not in url], url)
        r = await ds.client.get("/-/memory/wb.json", cookies=bob)
        assert r.status_code == 200 and data["wb"]["card"] in r.text


# ---- raw SQL as the runtime and reader roles ----

@pytest.mark.parametrize("role", ["memarc_runtime", "memarc_reader"])
async def test_every_table_isolated_and_no_ddl(make_env, role, subtests):
    async with make_env() as env:
        await seed(env)
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            tables = archive_tables(conn)
            cols = {t: {r[0] for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                " AND NOT attisdropped", [f"memory.{t}"])} for t in tables}
            scoped = {t: ("id" if t == "workspaces" else "workspace_id") for t in tables
                      if t == "workspaces" or "workspace_id" in cols[t]}
            assert set(tables) - set(scoped) == GLOBAL_TABLES, "a new table without workspace_id"
            for t in ("session_proposals", "review_receipts", "schema_change_runs", "session_decisions",
                      "index_rebuilds", "projections", "card_links", "api_tokens"):
                assert t in scoped
            for t, col in scoped.items():
                with subtests.test(table=t, check="row-level security forced, seeded"):
                    rls, forced = conn.execute(
                        "SELECT relrowsecurity, relforcerowsecurity FROM pg_class"
                        " WHERE oid = %s::regclass", [f"memory.{t}"]).fetchone()
                    assert rls and forced, t
                    seen = {r[0] for r in conn.execute(f"SELECT DISTINCT {col} FROM memory.{t}")}
                    assert seen == {"wa", "wb"}, (t, seen)  # the seed reaches every table
        with psycopg.connect(env.migrator_url) as conn:
            def as_role(workspace: str) -> None:
                conn.rollback()
                conn.execute(f"SET ROLE {role}")
                conn.execute("SELECT set_config('memarc.workspace', %s, false)", [workspace])

            for t, col in scoped.items():
                with subtests.test(table=t, check="sees its own workspace only"):
                    as_role("wa")
                    try:
                        rows = conn.execute(f"SELECT {col} FROM memory.{t}").fetchall()
                    except psycopg.errors.InsufficientPrivilege:
                        continue  # this role cannot read the table at all
                    assert rows and {r[0] for r in rows} == {"wa"}, (role, t)
                    as_role("")
                    assert conn.execute(f"SELECT count(*) FROM memory.{t}").fetchone()[0] == 0, t
            ddl = ["CREATE TABLE memory.sneaky (x int)", "CREATE TABLE public.sneaky (x int)",
                   "CREATE FUNCTION memory.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
                   "CREATE SCHEMA sneaky", "GRANT memarc_migrator TO CURRENT_USER"]
            for t in scoped:
                ddl += [f"ALTER TABLE memory.{t} DISABLE ROW LEVEL SECURITY",
                        f"ALTER TABLE memory.{t} NO FORCE ROW LEVEL SECURITY",
                        f"DROP POLICY workspace_isolation ON memory.{t}",
                        f"CREATE POLICY sneaky ON memory.{t} USING (true)",
                        f"DROP TABLE memory.{t}", f"TRUNCATE memory.{t}",
                        f"ALTER TABLE memory.{t} ADD COLUMN sneaky int"]
            for statement in ddl:
                with subtests.test(statement=statement):
                    as_role("wa")
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        conn.execute(statement)
            conn.rollback()


async def test_a_link_across_workspaces_is_impossible_in_the_database_and_the_api(make_env):
    async with make_env() as env:
        data = await seed(env)
        a, b, ha = data["wa"], data["wb"], data["h"]["wa"]
        a_id, b_id = a["card"][4:], b["card"][4:]
        insert = ("INSERT INTO memory.card_links (workspace_id, source_id, target_id)"
                  " VALUES (%s, %s, %s)")
        with psycopg.connect(env.migrator_url) as conn:
            # even the superuser (no row-level security at all): the composite foreign keys
            for ws in ("wa", "wb"):
                with pytest.raises(psycopg.errors.ForeignKeyViolation):
                    conn.execute(insert, [ws, a_id, b_id])
                conn.rollback()
            conn.execute("SET ROLE memarc_runtime")
            conn.execute("SELECT set_config('memarc.workspace', 'wa', false)")
            with pytest.raises(psycopg.errors.ForeignKeyViolation):
                conn.execute(insert, ["wa", a_id, b_id])
            conn.rollback()
            conn.execute("SET ROLE memarc_runtime")
            conn.execute("SELECT set_config('memarc.workspace', 'wa', false)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):  # RLS WITH CHECK
                conn.execute(insert, ["wb", a_id, b_id])
            conn.rollback()
        link = [{"target": b["card"], "meaning": "steals"}]
        base = "/api/workspaces/wa/memory"
        attempts = [
            ("POST", base, card("Thief", links=link)),
            ("PUT", f"{base}/{a['card']}", {**card("Alpha wa term", links=link), "revision": 1}),
            ("POST", f"{base}/import", json.dumps({"key": "t", **card("Thief", links=link)})),
            ("POST", "/api/workspaces/wa/sessions/steal/proposals", {"proposals": [{
                **proposal("Thief"), "links": link}]}),
        ]
        for method, path, body in attempts:
            r = await call(env, method, path, body, ha)
            assert r.status_code == 422, (method, path, r.status_code, r.text)
            assert b["card"] in r.text or "not a card of this workspace" in r.text \
                or "not in this workspace" in r.text, r.text
        with psycopg.connect(env.migrator_url) as conn:
            n = conn.execute("SELECT count(*) FROM memory.card_links l JOIN memory.cards c"
                             " ON c.id = l.target_id WHERE l.workspace_id <> c.workspace_id"
                             ).fetchone()[0]
            assert n == 0


# ---- the shared core re-checks the principal ----

def core_calls(a: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Arguments after (principal, workspace) for every public use case that takes a principal."""
    body = CardWrite(family="sql_rule", title="Intruder", content={"rule": "x"})
    return {
        "Archive.create_card": (body,),
        "Archive.update_card": (a["card"], CardWrite(family="sql_rule", title="I",
                                                     content={"rule": "x"}, revision=1)),
        "Archive.delete_card": (a["card"],), "Archive.get_card": (a["card"],),
        "Archive.list_cards": (ListQuery(),), "Archive.pending": (), "Archive.retry": (a["card"],),
        "Archive.activity": (), "Archive.start_rebuild": (),
        "Archive.index_state": (), "Archive.drop_previous_index": (),
        "Archive.rebuild_status": (a["rebuild"],), "Archive.audit": (),
        "Archive.repair_index": (), "Archive.search": (SearchRequest(query="alpha"),),
        "Archive.status": (),
        "Transfer.import_cards": ([],), "Transfer.export_cards": (),
        "Workflow.propose": (a["session"], ProposeRequest(proposals=[])),
        "Workflow.summary": (a["session"],),
        "Workflow.sessions": ("all",),
        "Workflow.review": (a["session"], ReviewRequest(review_id="x", decline_all=True)),
        "Workflow.solved_index": (a["session"],),
        "Workflow.decide": (a["session"], DecideRequest(decisions=[CardDecision(
            card_id=a["card"], decision="rejected")])),
        "Workflow.decisions": (a["session"],),
        "SchemaChanges.apply": (SchemaChangeRequest(run_id="x", database="shop", schema="public"),),
        "SchemaChanges.record": (SchemaChangeRequest(run_id="x", database="shop",
                                                     schema="public"),),
        "SchemaChanges.record_run": (SchemaChangeRequest(run_id="x", database="shop",
                                                         schema="public"),),
        "SchemaChanges.cleanup": ("run-wa",),
        "SchemaChanges.runs": (), "SchemaChanges.get_run": ("run-wa",),
    }


async def test_shared_core_rechecks_the_principal(make_env, subtests):
    async with make_env() as env:
        data = await seed(env)
        archive = env.resources.archive()
        services = {"Archive": archive, "Workflow": archive.workflow,
                    "SchemaChanges": archive.schema_changes, "Transfer": archive.transfer}
        calls = core_calls(data["wa"])
        found = {f"{name}.{m}" for name, svc in services.items()
                 for m, fn in inspect.getmembers(type(svc), inspect.iscoroutinefunction)
                 if not m.startswith("_") and "principal" in inspect.signature(fn).parameters}
        assert found == set(calls), found ^ set(calls)
        nobody = Principal(workspace="wa", permissions=frozenset(), actor="test:nobody")
        stranger = Principal(workspace="wb", permissions=frozenset(PERMISSIONS),
                             actor="test:stranger")
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            before = archive_row_counts(conn)
            for qualified, args in calls.items():
                svc, method = qualified.split(".")
                fn = getattr(services[svc], method)
                with subtests.test(use_case=qualified):
                    with pytest.raises(Forbidden):
                        await fn(nobody, "wa", *args)
                    with pytest.raises(NotFound):
                        await fn(stranger, "wa", *args)
            after = archive_row_counts(conn)
        changed = row_changes(before, after)
        audited = [q for q in calls if hasattr(getattr(services[q.split(".")[0]],
                                                       q.split(".")[1]), "activity_verb")]
        # nothing written but the rejection records of the mutating use cases (the stranger's
        # attempts are not written into a workspace it cannot see)
        assert changed == {"activity": len(audited)}, (changed, audited)
        assert len(audited) >= 11
