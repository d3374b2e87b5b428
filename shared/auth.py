"""Principals, permissions and the token format (DESIGN §8): what every layer uses of identity.

A token is ``mat_<43 url-safe base64 chars>`` (256 random bits), shown once; only its SHA-256
digest is stored. Authentication (the look-up of a token) is
:func:`shared.archive.authentication.authenticate`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from typing import Literal, get_args

import msgspec

from shared.errors import Forbidden

Permission = Literal["memory.read", "memory.manage", "memory.propose", "memory.review",
                     "memory.schema"]
PERMISSIONS: tuple[str, ...] = get_args(Permission)
#: The reviewer gate (DESIGN §6, issue 16): an agent that proposes must not apply its own
#: proposals, so proposing (``memory.propose``) and applying a review (``memory.review``) are two
#: permissions. A token holding both is possible (an administrator creates it explicitly) but is
#: the default of nothing the project creates; :func:`gate_warning` says so when one is created.
REVIEWER_GATE: frozenset[str] = frozenset({"memory.propose", "memory.review"})
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

    def require(self, workspace: str, permission: str, *alternatives: str) -> None:
        """Check workspace and permission: the principal must hold ``permission`` or one of
        ``alternatives`` (a session's summary is for the proposer and for the reviewer). The 403
        names them (``permissions``: any one of them is enough).

        :raises NotFound: the principal belongs to another workspace (indistinguishable from a
            missing one). :raises Forbidden: the permission is missing.
        """
        from shared.errors import NotFound

        if workspace != self.workspace:
            raise NotFound(f"no workspace {workspace!r}")
        wanted = (permission, *alternatives)
        if not any(self.allows(p) for p in wanted):
            raise Forbidden(f"this token lacks the {' or '.join(wanted)} permission",
                            permissions=list(wanted))


def gate_warning(permissions: Iterable[str]) -> str | None:
    """A warning when ``permissions`` hold both sides of the reviewer gate (:data:`REVIEWER_GATE`),
    else None: such a token can apply the proposals it made itself."""
    if REVIEWER_GATE <= set(permissions):
        return ("this token holds memory.propose and memory.review: it can apply its own "
                "proposals (the reviewer gate is off for it); give the proposing agent and the "
                "reviewer separate tokens unless that is intended")
    return None


def token_digest(token: str) -> bytes:
    """SHA-256 digest of a token's text."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)
