"""Bootstrap with the migrator login (DESIGN §8): create workspaces, create and revoke API tokens.

These talk to PostgreSQL directly with the migrator credentials. Everything else goes through the
writer API.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from shared.auth import PERMISSIONS, gate_warning, new_token, token_digest
from shared.errors import InvalidInput, NotFound
from shared.store.database import MIGRATOR_ROLE, Q

WORKSPACE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def _connect(migrator_url: str, schema: str) -> psycopg.Connection:
    return psycopg.connect(migrator_url, row_factory=dict_row,
                           options=f"-c search_path={schema}")


def _as_migrator(conn: psycopg.Connection) -> None:
    conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(MIGRATOR_ROLE)))


def create_workspace(migrator_url: str, schema: str, workspace: str, language: str = "en") -> dict[str, Any]:
    """Create a workspace (idempotent when the language matches).

    :returns: ``{id, language, created_at, created}``.
    :raises InvalidInput: bad id or language, or the workspace exists with another language.
    """
    if not WORKSPACE_RE.match(workspace):
        raise InvalidInput("a workspace id is 1-63 characters of a-z, 0-9, '_' and '-', "
                           "starting with a letter or digit", field="workspace")
    if language not in ("en", "it"):
        raise InvalidInput("language must be 'en' or 'it'", field="language")
    with _connect(migrator_url, schema) as conn, conn.transaction():
        _as_migrator(conn)
        row = conn.execute(Q.bootstrap_workspace_insert,
                           {"workspace": workspace, "language": language}).fetchone()
        if row is not None:
            return {**row, "created": True}
        row = conn.execute(Q.bootstrap_workspace_get, {"workspace": workspace}).fetchone()
        if row["language"] != language:
            raise InvalidInput(f"workspace {workspace!r} exists with language {row['language']!r}")
        return {**row, "created": False}


def create_token(migrator_url: str, schema: str, workspace: str, permissions: list[str], *,
                 database: str | None = None, db_schema: str | None = None,
                 label: str | None = None, expires_at: datetime | None = None) -> dict[str, Any]:
    """Create an API token bound to one workspace; the secret is returned once and only its
    SHA-256 digest is stored.

    :returns: ``{token, id, workspace, permissions, database, schema}``, and ``warning`` when the
        permissions hold both ``memory.propose`` and ``memory.review`` (allowed, for an
        administrator who means it: such a token can apply its own proposals).
    :raises InvalidInput: unknown permission, schema binding without database.
    :raises NotFound: no such workspace.
    """
    perms = sorted(set(permissions))
    if not perms or any(p not in PERMISSIONS for p in perms):
        raise InvalidInput(f"permissions must be among {', '.join(PERMISSIONS)}", field="permission")
    if db_schema and not database:
        raise InvalidInput("a schema binding needs a database binding", field="schema")
    token, token_id = new_token(), uuid.uuid4()
    with _connect(migrator_url, schema) as conn, conn.transaction():
        _as_migrator(conn)
        if conn.execute(Q.bootstrap_workspace_get, {"workspace": workspace}).fetchone() is None:
            raise NotFound(f"no workspace {workspace!r}")
        conn.execute(Q.bootstrap_token_insert, {
            "id": token_id, "workspace": workspace, "digest": token_digest(token),
            "permissions": perms, "database": database, "schema": db_schema, "label": label,
            "expires_at": expires_at})
    created = {"token": token, "id": str(token_id), "workspace": workspace, "permissions": perms,
               "database": database, "schema": db_schema}
    if (warning := gate_warning(perms)) is not None:
        created["warning"] = warning
    return created


def revoke_token(migrator_url: str, schema: str, token_id: str) -> dict[str, Any]:
    """Revoke a token by id.

    :raises NotFound: no such active token.
    """
    try:
        tid = uuid.UUID(token_id)
    except ValueError:
        raise NotFound(f"no token {token_id!r}") from None
    with _connect(migrator_url, schema) as conn, conn.transaction():
        _as_migrator(conn)
        row = conn.execute(Q.bootstrap_token_revoke, {"id": tid}).fetchone()
    if row is None:
        raise NotFound(f"no active token {token_id!r}")
    return {"revoked": str(row["id"]), "workspace": row["workspace_id"]}


def revoke_labelled_tokens(migrator_url: str, schema: str, workspace: str, label: str) -> int:
    """Revoke every active token of ``workspace`` labelled ``label`` (e.g. the tokens an earlier
    ``memarc up --demo`` printed) and return how many were revoked."""
    with _connect(migrator_url, schema) as conn, conn.transaction():
        _as_migrator(conn)
        return len(conn.execute(Q.bootstrap_token_revoke_labelled,
                                {"workspace": workspace, "label": label}).fetchall())
