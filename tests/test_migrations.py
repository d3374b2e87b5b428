"""Migrations (DESIGN §9): ordered, checksummed, idempotent; runtime refuses an unmigrated schema."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
import pytest

from shared.errors import SchemaOutdated
from shared.store.database import MIGRATIONS_DIR, Database, expected_schema_version
from shared.errors import MigrationError
from shared.store.migrations import migrate


def test_migrate_twice_is_a_noop(empty_db):
    first = migrate(empty_db, "memory", runtime_login="postgres")
    assert first == [p.stem for p in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9]_*.sql"))]
    with psycopg.connect(empty_db) as conn:
        before = conn.execute("SELECT version, checksum, applied_at FROM memory.schema_migrations").fetchall()
    assert migrate(empty_db, "memory", runtime_login="postgres") == []
    with psycopg.connect(empty_db) as conn:
        after = conn.execute("SELECT version, checksum, applied_at FROM memory.schema_migrations").fetchall()
    assert before == after


def test_edited_applied_migration_is_refused(empty_db, tmp_path: Path):
    folder = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, folder)
    migrate(empty_db, "memory", folder=folder)
    first = sorted(folder.glob("001_*.sql"))[0]
    first.write_text(first.read_text() + "\n-- an innocent comment\n")
    with pytest.raises(MigrationError, match="must not be edited"):
        migrate(empty_db, "memory", folder=folder)


def test_tables_live_in_their_own_schema_owned_by_the_migrator_role(empty_db):
    migrate(empty_db, "memory")
    with psycopg.connect(empty_db) as conn:
        public = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0]
        owner = conn.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'memory'").fetchone()[0]
        forced = conn.execute("SELECT bool_and(relforcerowsecurity AND relrowsecurity) FROM pg_class c "
                              "JOIN pg_namespace n ON n.oid = c.relnamespace "
                              "WHERE n.nspname = 'memory' AND c.relkind = 'r' "
                              "AND c.relname NOT IN ('schema_migrations', 'projection_formats')"
                              ).fetchone()[0]
        # the two tables without row-level security hold no workspace data
        unscoped = conn.execute("SELECT count(*) FROM information_schema.columns WHERE "
                                "table_schema = 'memory' AND column_name = 'workspace_id' AND "
                                "table_name IN ('schema_migrations', 'projection_formats')"
                                ).fetchone()[0]
    assert public == 0 and owner == "memarc_migrator" and forced is True and unscoped == 0


async def test_runtime_refuses_a_missing_or_outdated_schema(empty_db):
    db = Database(empty_db, "memory")
    await db.open()
    try:
        with pytest.raises(SchemaOutdated, match="memarc migrate"):
            await db.check_schema()
        migrate(empty_db, "memory")
        await db.check_schema()
        # a gap below the newest applied migration (branches merged in another order) is outdated
        with psycopg.connect(empty_db) as conn:
            row = conn.execute("DELETE FROM memory.schema_migrations WHERE version = 2 "
                               "RETURNING version, name, checksum").fetchone()
        with pytest.raises(SchemaOutdated, match="lacks migration.s. 002"):
            await db.check_schema()
        with psycopg.connect(empty_db) as conn:
            conn.execute("INSERT INTO memory.schema_migrations (version, name, checksum) "
                         "VALUES (%s, %s, %s)", row)
            conn.execute("DELETE FROM memory.schema_migrations WHERE version = %s",
                         [expected_schema_version()])
        with pytest.raises(SchemaOutdated, match="memarc migrate"):
            await db.check_schema()
    finally:
        await db.close()


def test_migrations_apply_on_the_embedded_server_without_pg_trgm(tmp_path: Path):
    """The embedded PostgreSQL (`pgserver`, used by `memarc up` and by tests without a URL) ships
    no pg_trgm: migration 004 then skips the trigram indexes, and text search still works."""
    import pgserver

    server = pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    try:
        url = server.get_uri()
        notices: list[str] = []
        applied = migrate(url, "memory", runtime_login=psycopg.conninfo.conninfo_to_dict(url).get("user"),
                          notices=notices)
        assert "004_list_indexes" in applied
        # the operator is told (`memarc migrate` and `memarc up` print the notices), and only that
        assert [n.split(":")[0] for n in notices] == ["004_list_indexes"], notices
        assert "pg_trgm is not available" in notices[0], notices
        with psycopg.connect(url, autocommit=True) as conn:
            available = conn.execute("SELECT count(*) FROM pg_available_extensions "
                                     "WHERE name = 'pg_trgm'").fetchone()[0]
            installed = conn.execute("SELECT count(*) FROM pg_extension "
                                     "WHERE extname = 'pg_trgm'").fetchone()[0]
            trigram = conn.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = 'memory' "
                                   "AND indexname LIKE '%%trgm%%'").fetchone()[0]
            assert (available, installed, trigram) == (0, 0, 0)
            conn.execute("INSERT INTO memory.workspaces (id) VALUES ('acme')")
            conn.execute("INSERT INTO memory.cards (workspace_id, id, family, title, origin, content) "
                         "VALUES ('acme', gen_random_uuid(), 'sql_rule', 'Net revenue', 'manual', "
                         "'{\"rule\": \"Exclude cancelled orders\"}')")
            with conn.transaction():
                conn.execute("SET LOCAL ROLE memarc_reader")
                conn.execute("SELECT set_config('memarc.workspace', 'acme', true)")
                found = conn.execute("SELECT count(*) FROM memory.card_text_matches('%%CANCELLED%%')"
                                     ).fetchone()[0]
                key = conn.execute("SELECT count(*) FROM memory.card_text_matches('%%rule%%')"
                                   ).fetchone()[0]
            assert (found, key) == (1, 0)  # the visible text (migration 008), not the JSON key
    finally:
        server.cleanup()


async def test_migration_010_keeps_existing_review_tokens_working_and_new_ones_split(make_env):
    """The reviewer gate's upgrade (issue 16): a token that held memory.review before 010 could
    propose and review; after 010 it still can (memory.propose added), a revoked one and every
    other token are left as they were, and a second run changes nothing."""
    from shared.store.bootstrap import create_token, revoke_token

    async with make_env() as env:
        env.workspace("acme")
        session = "/api/workspaces/acme/sessions/s"
        proposal = {"key": "k", "decisions": [{"id": "d", "status": "approved"}],
                    "family": "sql_rule", "title": "Net revenue",
                    "content": {"rule": "Exclude refunds from revenue."}}

        def made(*perms: str) -> dict:
            return create_token(env.migrator_url, "memory", "acme", list(perms))

        old, old_schema, revoked = (made("memory.review"),
                                    made("memory.review", "memory.schema"), made("memory.review"))
        others = {"manage": made("memory.manage"), "propose": made("memory.propose")}
        revoke_token(env.migrator_url, "memory", revoked["id"])
        h = {"Authorization": f"Bearer {old['token']}"}
        # what a pre-010 memory.review token is under the new code before the upgrade: no proposing
        r = await env.client.post(f"{session}/proposals", headers=h, json={"proposals": [proposal]})
        assert r.status_code == 403 and r.json()["code"] == "forbidden", r.text

        def permissions() -> dict[str, list[str]]:
            with psycopg.connect(env.migrator_url) as conn:
                return {str(i): p for i, p in conn.execute(
                    "SELECT id, permissions FROM memory.api_tokens")}

        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            conn.execute("DELETE FROM memory.schema_migrations WHERE version = 10")
        notices: list[str] = []
        assert migrate(env.migrator_url, "memory", notices=notices) == ["010_reviewer_gate"]
        # the operator is told how many tokens now hold both sides of the gate
        assert len(notices) == 1 and notices[0].startswith(
            "010_reviewer_gate: 2 token(s) holding memory.review now hold memory.propose"), notices
        got = permissions()
        assert got[old["id"]] == ["memory.propose", "memory.review"]
        assert got[old_schema["id"]] == ["memory.propose", "memory.review", "memory.schema"]
        assert got[revoked["id"]] == ["memory.review"]
        assert {k: got[t["id"]] for k, t in others.items()} == {
            "manage": ["memory.manage"], "propose": ["memory.propose"]}
        # the upgraded token does what it did before 010: propose, then review
        r = await env.client.post(f"{session}/proposals", headers=h, json={"proposals": [proposal]})
        assert r.status_code == 201, r.text
        r = await env.client.post(f"{session}/review", headers=h,
                                  json={"review_id": "rv", "selected": [{"key": "k"}]})
        assert r.status_code == 200 and r.json()["items"][0]["action"] == "created", r.text
        # idempotent: applied again, it touches nothing
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            conn.execute("DELETE FROM memory.schema_migrations WHERE version = 10")
        notices.clear()
        assert migrate(env.migrator_url, "memory", notices=notices) == ["010_reviewer_gate"]
        assert permissions() == got and notices == []


def test_migrate_refuses_the_runtime_login_unless_told_to_accept_it(empty_db):
    """Issue 25, case 8: ``memarc migrate`` without a migrator login of its own (unset, or the
    runtime login's user) exits 2 with ``migrator_missing`` naming what to set, and applies
    nothing; ``--allow-runtime-login`` accepts the risk; a migrator login of its own migrates."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMARC_")}

    def run(*extra: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "writer.cli", "migrate", *extra], cwd=root,
                              env={**base, **env}, capture_output=True, text=True, timeout=180)

    def schema_exists() -> bool:
        with psycopg.connect(empty_db) as conn:
            return conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'memory'"
                                ).fetchone()[0] == 1

    for env in ({"MEMARC_DATABASE_URL": empty_db},
                {"MEMARC_DATABASE_URL": empty_db, "MEMARC_MIGRATOR_DATABASE_URL": empty_db}):
        r = run(**env)
        assert r.returncode == 2, (r.stdout, r.stderr)
        problem = json.loads(r.stderr.strip().splitlines()[-1])
        assert problem["code"] == "migrator_missing", problem
        assert "MEMARC_MIGRATOR_DATABASE_URL" in problem["error"] and \
            "--allow-runtime-login" in problem["error"], problem
        assert not schema_exists()
    r = run("--allow-runtime-login", MEMARC_DATABASE_URL=empty_db)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["applied"] and schema_exists()
    # a migrator of its own (the database owner) with a separate runtime login: no flag needed
    runtime = empty_db.replace("postgres@", "memarc_rt@", 1)
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
                     "'memarc_rt') THEN CREATE ROLE memarc_rt LOGIN; END IF; END $$")
    r = run(MEMARC_DATABASE_URL=runtime, MEMARC_MIGRATOR_DATABASE_URL=empty_db)
    assert r.returncode == 0 and json.loads(r.stdout)["applied"] == [], r.stderr[-2000:]
