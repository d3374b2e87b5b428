"""Bootstrap with the migrator login (DESIGN §8): create and delete workspaces, create and revoke
API tokens.

These talk to PostgreSQL directly with the migrator credentials. Everything else goes through the
writer API. Each raises :class:`~shared.errors.BootstrapUnavailable` when PostgreSQL cannot be
reached (:func:`~shared.store.database.bootstrap_errors`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from shared.auth import PERMISSIONS, gate_warning, new_token, token_digest
from psycopg.types.json import Jsonb

from shared.errors import Conflict, InvalidInput, LockTimeout, NotFound
from shared.models import LANGUAGES
from shared.store.database import MIGRATOR_ROLE, Q, bootstrap_errors

WORKSPACE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


@contextmanager
def migrator_transaction(migrator_url: str, schema: str) -> Iterator[psycopg.Connection]:
    """A transaction on a new connection with the migrator login, as the migrator role
    (``SET LOCAL ROLE``), with ``search_path`` set to ``schema``; rows are dicts. Committed when
    the block ends normally, rolled back on an exception; the connection is closed either way.

    :raises psycopg.OperationalError: PostgreSQL cannot be reached (callers wrap this in
        :func:`~shared.store.database.bootstrap_errors`).
    """
    with psycopg.connect(migrator_url, row_factory=dict_row,
                         options=f"-c search_path={schema}") as conn, conn.transaction():
        conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(MIGRATOR_ROLE)))
        yield conn


@bootstrap_errors
def create_workspace(migrator_url: str, schema: str, workspace: str, language: str = "en") -> dict[str, Any]:
    """Create a workspace (idempotent when the language matches).

    :returns: ``{id, language, created_at, created}``.
    :raises InvalidInput: bad id or language, or the workspace exists with another language.
    :raises Conflict: a removed workspace of that id still waits for a worker to drop its index
        collection (the new workspace's collection would be dropped with it).
    """
    if not WORKSPACE_RE.match(workspace):
        raise InvalidInput("a workspace id is 1-63 characters of a-z, 0-9, '_' and '-', "
                           "starting with a letter or digit", field="workspace")
    if language not in LANGUAGES:
        raise InvalidInput(f"language must be {' or '.join(map(repr, LANGUAGES))}",
                           field="language")
    with migrator_transaction(migrator_url, schema) as conn:
        removal = conn.execute(Q.bootstrap_removals_pending, {"workspace": workspace}).fetchone()
        if removal is not None:
            raise Conflict(f"workspace {workspace!r} was removed at {removal['removed_at']} and "
                           "a worker has not dropped its index collection yet: run the worker "
                           "(`memarc up` or `memarc worker`), then create it again",
                           removal_id=removal["id"])
        row = conn.execute(Q.bootstrap_workspaces_insert,
                           {"workspace": workspace, "language": language}).fetchone()
        if row is not None:
            return {**row, "created": True}
        row = conn.execute(Q.bootstrap_workspaces_get, {"workspace": workspace}).fetchone()
        if row["language"] != language:
            raise InvalidInput(f"workspace {workspace!r} exists with language {row['language']!r}")
        return {**row, "created": False}


@bootstrap_errors
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
    with migrator_transaction(migrator_url, schema) as conn:
        if conn.execute(Q.bootstrap_workspaces_get, {"workspace": workspace}).fetchone() is None:
            raise NotFound(f"no workspace {workspace!r}")
        conn.execute(Q.bootstrap_tokens_insert, {
            "id": token_id, "workspace": workspace, "digest": token_digest(token),
            "permissions": perms, "database": database, "schema": db_schema, "label": label,
            "expires_at": expires_at})
    created = {"token": token, "id": str(token_id), "workspace": workspace, "permissions": perms,
               "database": database, "schema": db_schema}
    if (warning := gate_warning(perms)) is not None:
        created["warning"] = warning
    return created


@bootstrap_errors
def active_token(migrator_url: str, schema: str, token: str) -> dict[str, Any] | None:
    """The token whose secret is ``token`` while it is active (not revoked, not expired), as
    :func:`create_token` returns it (``{token, id, workspace, permissions, database, schema}``)
    with its ``label``; None when no active token has that secret (revoked, expired, or made in
    another database)."""
    with migrator_transaction(migrator_url, schema) as conn:
        row = conn.execute(Q.bootstrap_tokens_active, {"digest": token_digest(token)}).fetchone()
    if row is None:
        return None
    return {"token": token, "id": str(row["id"]), "workspace": row["workspace_id"],
            "permissions": sorted(row["permissions"]), "database": row["database_name"],
            "schema": row["schema_name"], "label": row["label"]}


@bootstrap_errors
def revoke_token(migrator_url: str, schema: str, token_id: str) -> dict[str, Any]:
    """Revoke a token by id.

    :raises NotFound: no such active token.
    """
    try:
        tid = uuid.UUID(token_id)
    except ValueError:
        raise NotFound(f"no token {token_id!r}") from None
    with migrator_transaction(migrator_url, schema) as conn:
        row = conn.execute(Q.bootstrap_tokens_revoke, {"id": tid}).fetchone()
    if row is None:
        raise NotFound(f"no active token {token_id!r}")
    return {"revoked": str(row["id"]), "workspace": row["workspace_id"]}


@bootstrap_errors
def revoke_labelled_tokens(migrator_url: str, schema: str, workspace: str, label: str) -> int:
    """Revoke every active token of ``workspace`` labelled ``label`` (e.g. the tokens an earlier
    ``memarc up --demo`` printed) and return how many were revoked."""
    with migrator_transaction(migrator_url, schema) as conn:
        return len(conn.execute(Q.bootstrap_tokens_revoke_labelled,
                                {"workspace": workspace, "label": label}).fetchall())


@bootstrap_errors
def delete_workspace(migrator_url: str, schema: str, workspace: str, removed_by: str, *,
                     lock_timeout: float = 30.0) -> dict[str, Any]:
    """Remove a workspace: its rows in every table that has a ``workspace_id`` column (cards,
    dependencies, links, projection operations and records, activity, tokens, proposals,
    receipts, schema-change runs, rebuilds, and any table added later), then its row, in one
    transaction under the workspace's write lock (a write of the workspace in progress finishes
    first; one that comes after finds no workspace, and its token is gone). The removal is
    recorded in ``workspace_removals`` (kept: it belongs to no workspace) with ``removed_by``,
    the database login and the rows deleted per table. Its index collection is dropped by a
    worker, the process that holds the index (``index_status`` ``pending`` until then; see
    :func:`removal`).

    :returns: ``{removal_id, workspace, removed_by, removed_at, deleted_rows: {table: n},
        index_status}``.
    :raises NotFound: no such workspace. :raises LockTimeout: the workspace's lock was not
        granted within ``lock_timeout`` seconds.
    """
    with migrator_transaction(migrator_url, schema) as conn:
        try:
            conn.execute(Q.bootstrap_workspaces_lock, {
                "workspace": workspace, "lock_timeout": f"{int(lock_timeout * 1000)}ms"})
        except psycopg.errors.LockNotAvailable as exc:
            raise LockTimeout(f"workspace {workspace!r} stayed locked for {lock_timeout:g} s; "
                              "try again") from exc
        if conn.execute(Q.bootstrap_workspaces_get_for_update,
                        {"workspace": workspace}).fetchone() is None:
            raise NotFound(f"no workspace {workspace!r}")
        # the rows it owns, counted before anything is deleted (deleting links or cards fires
        # triggers that queue projection operations, deleted last)
        tables = sorted((r["table_name"] for r in conn.execute(Q.bootstrap_workspaces_tables)),
                        key=lambda t: (t == "projection_ops", t == "cards", t))
        counts = {t: n for t in tables
                  if (n := conn.execute(sql.SQL("SELECT count(*) AS n FROM {} WHERE "
                                                "workspace_id = %s").format(sql.Identifier(t)),
                                        [workspace]).fetchone()["n"])}
        for table in tables:  # explicitly, so a table without a cascading key goes too
            conn.execute(sql.SQL("DELETE FROM {} WHERE workspace_id = %s").format(
                sql.Identifier(table)), [workspace])
        conn.execute(Q.bootstrap_workspaces_delete, {"workspace": workspace})
        counts["workspaces"] = 1
        row = conn.execute(Q.bootstrap_removals_insert, {
            "workspace": workspace, "removed_by": removed_by,
            "rows": Jsonb(counts)}).fetchone()
    return {"removal_id": row["id"], "workspace": row["workspace"],
            "removed_by": row["removed_by"], "removed_at": row["removed_at"].isoformat(),
            "deleted_rows": row["deleted_rows"], "index_status": row["index_status"]}


@bootstrap_errors
def removal(migrator_url: str, schema: str, removal_id: int) -> dict[str, Any]:
    """A workspace removal's record: ``{id, workspace, removed_by, removed_at, deleted_rows,
    index_status (pending|done), index_done_at, index_error}``.

    :raises NotFound: no such removal.
    """
    with migrator_transaction(migrator_url, schema) as conn:
        row = conn.execute(Q.bootstrap_removals_get, {"id": removal_id}).fetchone()
    if row is None:
        raise NotFound(f"no workspace removal {removal_id}")
    return row
