"""Sessions of the administration pages in the browser (issue 24, DESIGN §12).

A person signs in once with an API token, or with a one-time sign-in link (``memarc
sign-in-link``), and gets a random session secret (the cookie's value). The session is a row
bound to that token (migration 018), read with the token on every request: its principal is the
token's (same workspace, permissions, binding and actor ``token:<id>``, so the activity log names
the token exactly as for an API call), and it ends at its expiry, at sign-out, or as soon as its
token is revoked or expires. Only SHA-256 digests of secrets and link codes are stored.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import msgspec

from shared.archive.authentication import authenticate
from shared.auth import Principal, token_digest
from shared.errors import InvalidInput, Unauthorized
from shared.store import admin_sessions, authentication
from shared.store.bootstrap import create_token
from shared.store.database import Database

#: Label of the tokens that ``memarc sign-in-link`` creates (one per link).
SIGN_IN_LINK_LABEL = "administration sign-in link"
DEFAULT_SESSION_HOURS = 12.0
DEFAULT_LINK_MINUTES = 15


class OpenedSession(msgspec.Struct, frozen=True):
    """A session just opened: its secret (the cookie's value, never stored), principal and
    expiry."""

    secret: str
    principal: Principal
    expires_at: datetime


def _signed_out(message: str, reason: str) -> Unauthorized:
    exc = Unauthorized(message)
    exc.reason = reason  # type: ignore[attr-defined]
    return exc


def _principal(row: dict[str, Any]) -> Principal:
    return Principal(workspace=row["workspace_id"], permissions=frozenset(row["permissions"]),
                     actor=f"token:{row['token_id']}", database=row["database_name"],
                     schema=row["schema_name"])


class BrowserSessions:
    """Open, check and end browser sessions over ``db``; a session lasts ``hours`` at most."""

    def __init__(self, db: Database, hours: float = DEFAULT_SESSION_HOURS) -> None:
        self.db = db
        self.hours = hours

    async def _open(self, principal: Principal, token_expires: datetime | None) -> OpenedSession:
        secret = secrets.token_urlsafe(32)
        expires = datetime.now(timezone.utc) + timedelta(hours=self.hours)
        if token_expires is not None:
            expires = min(expires, token_expires)
        token_id = uuid.UUID(principal.actor.removeprefix("token:"))
        async with self.db.transaction(principal.workspace) as conn:
            await admin_sessions.insert(conn, principal.workspace, token_digest(secret),
                                        token_id, expires)
        return OpenedSession(secret=secret, principal=principal, expires_at=expires)

    async def sign_in(self, token: str) -> OpenedSession:
        """Open a session for the holder of ``token`` (an API token, as pasted).

        :raises Unauthorized: unknown, revoked or expired token (``reason`` says which).
        """
        token = (token or "").strip()
        principal = await authenticate(self.db, token)
        async with self.db.transaction(None) as conn:
            row = await authentication.lookup(conn, token_digest(token))
        return await self._open(principal, row["expires_at"] if row else None)

    async def sign_in_with_link(self, code: str) -> OpenedSession:
        """Redeem a one-time sign-in link's ``code`` and open a session for its token.

        :raises Unauthorized: no such link, or it was used already or expired, or its token was
            revoked or expired.
        """
        if not code or len(code) > 200:
            raise _signed_out("this sign-in link is not valid", "malformed")
        async with self.db.transaction(None) as conn:
            row = await admin_sessions.redeem_link(conn, token_digest(code))
        if row is None:
            raise _signed_out("this sign-in link was used already, has expired or is unknown. "
                              "Sign in below with an API token of the workspace (memarc up "
                              "--demo prints an administrator token), or print a new link: "
                              "memarc up prints the command (memarc sign-in-link --workspace W, "
                              "with the database URL of the migrator login)", "link")
        now = datetime.now(timezone.utc)
        if row["revoked_at"] is not None or (row["expires_at"] and row["expires_at"] <= now):
            raise _signed_out("the token of this sign-in link was revoked or has expired",
                              "revoked")
        return await self._open(_principal(row), row["expires_at"])

    async def principal(self, secret: str | None) -> Principal:
        """The principal of the session whose secret is ``secret``.

        :raises Unauthorized: no secret, an unknown or ended session, a session past its expiry,
            or its token revoked or expired (``reason``: ``missing``, ``unknown``, ``ended``,
            ``expired``, ``revoked``).
        """
        if not secret or len(secret) > 200:
            raise _signed_out("please sign in", "missing")
        async with self.db.transaction(None) as conn:
            row = await admin_sessions.lookup(conn, token_digest(secret))
        now = datetime.now(timezone.utc)
        if row is None:
            raise _signed_out("please sign in", "unknown")
        if row["ended_at"] is not None:
            raise _signed_out("you signed out; sign in again", "ended")
        if row["revoked_at"] is not None:
            raise _signed_out("the token of this session was revoked; sign in with another "
                              "token", "revoked")
        if row["expires_at"] <= now or (row["token_expires_at"] is not None
                                         and row["token_expires_at"] <= now):
            raise _signed_out("your session has expired; sign in again", "expired")
        return _principal(row)

    async def sign_out(self, secret: str, principal: Principal) -> None:
        """End the session whose secret is ``secret`` (of ``principal``'s workspace)."""
        async with self.db.transaction(principal.workspace) as conn:
            await admin_sessions.end(conn, token_digest(secret))


def create_sign_in_link(migrator_url: str, schema: str, workspace: str,
                        permissions: list[str], *, minutes: int = DEFAULT_LINK_MINUTES,
                        session_hours: float = DEFAULT_SESSION_HOURS) -> dict[str, Any]:
    """Bootstrap (migrator login): a new token of ``workspace`` with ``permissions`` (labelled
    :data:`SIGN_IN_LINK_LABEL`, expiring once a session opened with it would have ended) and a
    one-time sign-in code for it, valid ``minutes``. The code is returned once; only its digest
    is stored. Revoking the token (``memarc token revoke``) ends the sessions opened with it.

    :returns: ``{code, token_id, workspace, permissions, expires_at}``.
    :raises InvalidInput: ``minutes`` outside 1..1440, an unknown permission.
    :raises NotFound: no such workspace.
    """
    if not 1 <= minutes <= 1440:
        raise InvalidInput("a sign-in link is valid 1..1440 minutes", field="minutes")
    now = datetime.now(timezone.utc)
    link_expires = now + timedelta(minutes=minutes)
    token = create_token(migrator_url, schema, workspace, permissions, label=SIGN_IN_LINK_LABEL,
                         expires_at=link_expires + timedelta(hours=session_hours))
    code = secrets.token_urlsafe(32)
    admin_sessions.insert_link(migrator_url, schema, workspace, uuid.UUID(token["id"]),
                               token_digest(code), link_expires)
    return {"code": code, "token_id": token["id"], "workspace": workspace,
            "permissions": token["permissions"], "expires_at": link_expires.isoformat()}
