"""Numbered SQL migrations (DESIGN §9).

Files ``migrations/NNN_name.sql`` are applied in order with the migrator credentials, each in its
own transaction with ``search_path`` set to the archive schema, and recorded with a SHA-256
checksum in ``<schema>.schema_migrations``. Re-running is a no-op; an applied file whose content
changed is refused. Concurrent migrators are serialised by an advisory lock.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg import sql

from shared.errors import MigrationError
from shared.store.database import MIGRATIONS_DIR, READER_ROLE, RUNTIME_ROLE, bootstrap_errors

_MIGRATION_LOCK = 0x6D656D617263  # "memarc"


@dataclass(frozen=True)
class Migration:
    """One migration file: its number, name, SQL text and checksum."""

    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        """SHA-256 hex digest of the file's text."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def load_migrations(folder: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migration files of ``folder``, ordered by number.

    :raises MigrationError: two files share a number.
    """
    found: dict[int, Migration] = {}
    for path in sorted(folder.glob("[0-9][0-9][0-9]_*.sql")):
        version = int(path.name[:3])
        if version in found:
            raise MigrationError(f"two migrations numbered {version:03d}")
        found[version] = Migration(version, path.stem, path.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


def login_of(url: str) -> str | None:
    """The user name of a libpq URL, or None when the URL names none."""
    user = urlsplit(url).username
    return unquote(user) if user else None


@bootstrap_errors
def migrate(migrator_url: str, schema: str = "memory", runtime_login: str | None = None,
            folder: Path = MIGRATIONS_DIR, notices: list[str] | None = None) -> list[str]:
    """Apply pending migrations; returns the names applied (empty on a no-op re-run).

    :param runtime_login: the login of ``MEMARC_DATABASE_URL``; granted the runtime and reader roles.
    :param notices: when given, each NOTICE a migration file raised (``RAISE NOTICE``; not
        PostgreSQL's "already exists, skipping" of ``IF [NOT] EXISTS``) is appended as
        ``"<migration name>: <message>"``, for the caller to show: what the operator must know
        (an extension missing, tokens widened by 010).
    :raises MigrationError: an applied migration's file was edited, or a file failed.
    :raises BootstrapUnavailable: PostgreSQL cannot be reached.
    """
    migrations = load_migrations(folder)
    applied: list[str] = []
    ident = sql.Identifier(schema)
    current: list[str | None] = [None]  # the migration file being applied

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        message = diag.message_primary or ""
        if notices is not None and current[0] and not message.endswith(", skipping"):
            notices.append(f"{current[0]}: {message}")

    with psycopg.connect(migrator_url, autocommit=False) as conn:
        conn.add_notice_handler(keep)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATION_LOCK])
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {}.schema_migrations ("
                    " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                ).format(ident)
            )
            done = {
                row[0]: (row[1], row[2])
                for row in conn.execute(
                    sql.SQL("SELECT version, name, checksum FROM {}.schema_migrations").format(ident)
                )
            }
            for m in migrations:
                if m.version in done:
                    if done[m.version][1] != m.checksum:
                        raise MigrationError(
                            f"migration {m.name} was applied with checksum {done[m.version][1][:12]}… "
                            f"but the file now has {m.checksum[:12]}…: applied migrations must not "
                            "be edited; add a new numbered file instead"
                        )
                    continue
                conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
                current[0] = m.name
                try:
                    with conn.transaction():
                        conn.execute(m.text.encode("utf-8"))
                except psycopg.Error as exc:
                    raise MigrationError(f"migration {m.name} failed: {exc}") from exc
                current[0] = None
                conn.execute("RESET ROLE")
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)"
                    ).format(ident),
                    [m.version, m.name, m.checksum],
                )
                applied.append(m.name)
            conn.execute(
                sql.SQL("GRANT SELECT ON {}.schema_migrations TO {}, {}").format(
                    ident, sql.Identifier(RUNTIME_ROLE), sql.Identifier(READER_ROLE)
                )
            )
            if runtime_login:
                conn.execute(
                    sql.SQL("GRANT {}, {} TO {}").format(
                        sql.Identifier(RUNTIME_ROLE), sql.Identifier(READER_ROLE),
                        sql.Identifier(runtime_login),
                    )
                )
    return applied
