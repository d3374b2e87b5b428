"""Migrations (DESIGN §9): ordered, checksummed, idempotent; runtime refuses an unmigrated schema."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
import pytest

from shared.db import MIGRATIONS_DIR, Database, expected_schema_version
from shared.errors import SchemaOutdated
from shared.migrate import MigrationError, migrate


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
