"""``memarc workspace delete W`` (issue 16): with an explicit confirmation, the migrator login
removes every row the workspace owns, its tokens and (through the worker, which holds the index)
its index collection, and records who did it in a table that outlives the workspace. Another
workspace's rows and points are untouched; a recall or write racing with the removal fails
cleanly. Real PostgreSQL, Redis, both embedded index engines, the CLI; no mocks."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
from admin_helpers import seed_admin_rows
from helpers import run_cli
from psycopg import sql

from shared.errors import Conflict

pytestmark = pytest.mark.both_engines

APPROVED = [{"id": "d-1", "status": "approved"}]


def owned_rows(migrator_url: str, workspace: str) -> dict[str, int]:
    """``{table: rows of workspace}`` for every table of the archive with a ``workspace_id``
    column, and ``workspaces`` itself, read as the database owner's superuser login."""
    with psycopg.connect(migrator_url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = 'memory'"
            " AND column_name = 'workspace_id' ORDER BY 1")]
        counts = {t: conn.execute(sql.SQL("SELECT count(*) FROM memory.{} WHERE workspace_id"
                                          " = %s").format(sql.Identifier(t)),
                                  [workspace]).fetchone()[0] for t in tables}
        counts["workspaces"] = conn.execute("SELECT count(*) FROM memory.workspaces WHERE id = %s",
                                            [workspace]).fetchone()[0]
    return counts


async def seed(env, ws: str) -> dict[str, dict[str, str]]:
    """Workspace ``ws`` with something in every table: cards with dependencies and a link, a
    reviewed session, a schema-change run, a rebuild, an evaluation case and run, activity,
    projections. Returns its
    headers by permission."""
    env.workspace(ws)
    h = {p: env.token(ws, f"memory.{p}") for p in ("manage", "read", "propose", "review",
                                                    "schema")}
    mem = f"/api/workspaces/{ws}/memory"
    first = None
    for i in range(3):
        r = await env.client.post(mem, headers=h["manage"], json={
            "family": "sql_rule", "title": f"Invoices rule {i} of {ws}",
            "content": {"rule": f"Invoices of {ws} are issued on day {i + 1}."},
            "dependencies": [{"database": "shop", "schema": "public", "table": "invoices"}],
            "links": [{"target": first, "meaning": "see"}] if first else []})
        assert r.status_code == 201, r.text
        first = first or r.json()["card"]["id"]
    session = f"/api/workspaces/{ws}/sessions/s1"
    r = await env.client.post(f"{session}/proposals", headers=h["propose"], json={"proposals": [
        {"key": "k", "family": "domain_clarification", "title": f"Customer of {ws}",
         "content": {"definition": "Someone who bought once."}, "decisions": APPROVED}]})
    assert r.status_code == 201, r.text
    r = await env.client.post(f"{session}/review", headers=h["review"],
                              json={"review_id": "rv", "selected": [{"key": "k"}]})
    assert r.status_code == 200, r.text
    r = await env.client.post(f"{session}/decisions", headers=h["propose"], json={
        "decisions": [{"card_id": first, "decision": "accepted"}]})
    assert r.status_code == 200, r.text
    r = await env.client.post(f"/api/workspaces/{ws}/schema-changes", headers=h["schema"], json={
        "run_id": "sync-1", "database": "crm", "schema": "public", "removed_tables": ["x"]})
    assert r.status_code == 200, r.text
    assert (await env.client.post(f"{mem}/index", headers=h["manage"])).status_code == 202
    r = await env.client.post(f"{mem}/evaluation-cases", headers=h["manage"], json={
        "question": "when are invoices issued", "mode": "rules", "expected": [first]})
    assert r.status_code == 201, r.text
    assert (await env.client.post(f"{mem}/evaluations", headers=h["manage"])).status_code == 202
    await seed_admin_rows(env, ws, h["manage"])  # a browser session, a sign-in link
    await env.drain()
    r = await env.client.post(f"{mem}/search", headers=h["read"],  # a recall, and its record
                              json={"query": "when are invoices issued", "mode": "rules"})
    assert r.status_code == 200 and r.json()["recall_id"], r.text
    first = r.json()["results"][0]["card"]["id"]  # and feedback on it
    r = await env.client.post(f"{mem}/recalls/{r.json()['recall_id']}/feedback",
                              headers=h["read"],
                              json={"cards": [{"card_id": first, "verdict": "helpful"}]})
    assert r.status_code == 200, r.text
    return h


async def two_workspaces(env, monkeypatch):
    """Workspaces acme and other, seeded (:func:`seed`), and the environment of the bootstrap
    commands; returns their headers. The worker queues no evaluation of its own
    (``MEMARC_EVAL_EVERY_HOURS=0``: the seed's rebuild finishing after its evaluation would make
    one due at a later drain, a row of ``other`` the removal did not write); the seed's own run
    is the API's."""
    env.no_automatic_evaluations()
    monkeypatch.setenv("MEMARC_DATABASE_URL", env.settings.database_url)
    monkeypatch.setenv("MEMARC_MIGRATOR_DATABASE_URL", env.migrator_url)
    return await seed(env, "acme"), await seed(env, "other")


async def recall(env, ws: str, headers: dict[str, str]):
    return await env.client.post(f"/api/workspaces/{ws}/memory/search", headers=headers,
                                 json={"query": "when are invoices issued", "mode": "rules"})


async def test_workspace_delete_removes_everything_of_one_workspace_only(
        make_env, monkeypatch, capsys):
    async with make_env() as env:
        ha, hb = await two_workspaces(env, monkeypatch)
        acme_before, other_before = (owned_rows(env.migrator_url, "acme"),
                                     owned_rows(env.migrator_url, "other"))
        assert all(acme_before.values()), acme_before  # the seed reaches every table
        index = env.resources.index
        other_points = await index.scroll_ids("other")
        assert len(other_points) == 4 and len(await index.scroll_ids("acme")) == 4

        # an explicit confirmation is required: nothing happens without one
        for extra in ((), ("--confirm", "other"), ("--confirm", "acm")):
            code, out, err = await run_cli(capsys, "workspace", "delete", "acme", *extra)
            assert code == 2 and json.loads(err)["code"] == "confirmation_required", err
        assert owned_rows(env.migrator_url, "acme") == acme_before
        code, _, err = await run_cli(capsys, "workspace", "delete", "nope", "--yes")
        assert code == 2 and json.loads(err)["code"] == "not_found"

        code, out, err = await run_cli(capsys, "workspace", "delete", "acme", "--confirm", "acme",
                                       "--by", "alice (ticket 42)")
        assert code == 0, err
        assert out["workspace"] == "acme" and out["index_status"] == "pending"
        assert out["removed_by"].startswith("alice (ticket 42) (database login ")
        assert out["deleted_rows"] == {t: n for t, n in acme_before.items() if n}
        # every row is gone, the other workspace's are all there
        assert set(owned_rows(env.migrator_url, "acme").values()) == {0}
        assert owned_rows(env.migrator_url, "other") == other_before
        # its tokens went with it: a recall or a write answers 401, never 500
        r = await recall(env, "acme", ha["read"])
        assert r.status_code == 401, r.text
        r = await env.client.post("/api/workspaces/acme/memory", headers=ha["manage"], json={
            "family": "sql_rule", "title": "x", "content": {"rule": "y"}})
        assert r.status_code == 401
        # the id cannot be taken again before the worker has dropped the index collection
        with pytest.raises(Conflict, match="worker"):
            env.workspace("acme")
        assert await index.physical_collection("acme") is not None
        await env.drain()  # the worker's sweep drops it
        assert await index.physical_collection("acme") is None
        assert await index.scroll_ids("acme") == {}
        with psycopg.connect(env.migrator_url) as conn:
            record = conn.execute("SELECT workspace, removed_by, index_status, deleted_rows"
                                  " FROM memory.workspace_removals").fetchall()
        assert record == [("acme", out["removed_by"], "done", out["deleted_rows"])]
        # the other workspace's points and recall are untouched
        assert await index.scroll_ids("other") == other_points
        assert owned_rows(env.migrator_url, "other") == other_before
        r = await recall(env, "other", hb["read"])  # (which adds its own record)
        assert r.status_code == 200 and len(r.json()["results"]) >= 3, r.text
        # a new workspace of that id starts empty
        env.workspace("acme")
        h = env.token("acme", "memory.read")
        r = await recall(env, "acme", h)
        assert r.status_code == 200 and r.json()["results"] == []


async def test_recalls_and_writes_racing_with_the_removal_fail_cleanly(
        make_env, monkeypatch, capsys):
    async with make_env() as env:
        ha, hb = await two_workspaces(env, monkeypatch)
        other_before = owned_rows(env.migrator_url, "other")
        mem = "/api/workspaces/acme/memory"
        statuses: list[tuple[str, int, str]] = []
        late_statuses: list[int] = []
        done = asyncio.Event()

        async def hammer(kind: str) -> None:
            n = after = 0
            while after < 3:  # until three calls after the removal
                n += 1
                late = done.is_set()  # this call starts after the removal committed
                after += late
                if kind == "write":
                    r = await env.client.post(mem, headers=ha["manage"], json={
                        "family": "sql_rule", "title": f"Racing {n}",
                        "content": {"rule": f"A rule written during the removal, {n}."}})
                elif kind == "recall":
                    r = await recall(env, "acme", ha["read"])
                else:
                    r = await env.client.get(mem, headers=ha["manage"])
                statuses.append((kind, r.status_code, r.json().get("code", "") if
                                 r.status_code >= 400 else ""))
                if late:
                    late_statuses.append(r.status_code)
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(hammer(k)) for k in ("write", "recall", "list")]
        await asyncio.sleep(0.3)
        code, out, err = await run_cli(capsys, "workspace", "delete", "acme", "--yes")
        done.set()
        await asyncio.gather(*tasks)
        assert code == 0, err
        seen = {s for _, s, _ in statuses}
        assert seen <= {200, 201, 401, 404}, statuses
        assert {200, 201} & seen and 401 in seen, statuses  # both sides of the race were hit
        assert late_statuses == [401] * 9  # after it: the tokens are gone
        assert all(c for _, s, c in statuses if s >= 400)  # every error names its code
        # nothing written during the race survived the removal
        assert set(owned_rows(env.migrator_url, "acme").values()) == {0}
        assert owned_rows(env.migrator_url, "other") == other_before
        r = await recall(env, "other", hb["read"])
        assert r.status_code == 200 and r.json()["results"]
