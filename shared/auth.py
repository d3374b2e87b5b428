"""Principals, permissions and the token format (DESIGN §8): what every layer uses of identity.

A token is ``mat_<43 url-safe base64 chars>`` (256 random bits), shown once; only its SHA-256
digest is stored. Authentication (the look-up of a token) is
:func:`shared.archive.authentication.authenticate`.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Literal

import msgspec

from shared.errors import Forbidden

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
        from shared.errors import NotFound

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
