"""API tokens and principals (DESIGN §8).

A token is ``mat_<43 url-safe base64 chars>`` (256 random bits), shown once; only its SHA-256
digest is stored. Look-up is by digest: an index probe on a uniformly random value, so timing
reveals nothing useful about the secret (what is compared is the digest, never the token).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timezone
from typing import Literal

import msgspec

from .db import Q, Database
from .errors import Forbidden, Unauthorized

Permission = Literal["memory.read", "memory.manage", "memory.review", "memory.schema"]
PERMISSIONS: tuple[str, ...] = ("memory.read", "memory.manage", "memory.review", "memory.schema")
TOKEN_PREFIX = "mat_"


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """Who is calling: one workspace, a set of permissions, an optional database/schema binding."""

    workspace: str
    permissions: frozenset[str]
    actor: str
    database: str | None = None
    schema: str | None = None

    def allows(self, permission: str) -> bool:
        """True when the principal holds ``permission`` (``memory.manage`` implies ``memory.read``)."""
        if permission in self.permissions:
            return True
        return permission == "memory.read" and "memory.manage" in self.permissions

    def require(self, workspace: str, permission: str) -> None:
        """Check workspace and permission.

        :raises NotFound: the principal belongs to another workspace (indistinguishable from a
            missing one). :raises Forbidden: the permission is missing.
        """
        from .errors import NotFound

        if workspace != self.workspace:
            raise NotFound(f"no workspace {workspace!r}")
        if not self.allows(permission):
            raise Forbidden(f"this token lacks the {permission} permission")


def token_digest(token: str) -> bytes:
    """SHA-256 digest of a token's text."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


async def authenticate(db: Database, token: str | None) -> Principal:
    """The principal of a bearer token.

    :raises Unauthorized: no token, unknown, revoked or expired token.
    :raises DatabaseUnavailable: PostgreSQL cannot be reached.
    """
    if not token or len(token) > 200:
        raise Unauthorized()
    digest = token_digest(token)
    async with db.transaction(None) as conn:
        row = await (await conn.execute(Q.token_authenticate, {"digest": digest})).fetchone()
        if row is None:
            raise Unauthorized("unknown token")
        if row["revoked_at"] is not None:
            raise Unauthorized("this token was revoked")
        if row["expires_at"] is not None and row["expires_at"] <= datetime.now(timezone.utc):
            raise Unauthorized("this token has expired")
        await conn.execute(Q.token_touch, {"token_id": row["token_id"]})
    return Principal(
        workspace=row["workspace_id"],
        permissions=frozenset(row["permissions"]),
        actor=f"token:{row['token_id']}",
        database=row["database_name"],
        schema=row["schema_name"],
    )
