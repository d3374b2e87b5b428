"""Authentication of bearer tokens (DESIGN §8), and the failed-authentication log.

Why the look-up is safe against timing: the token is never compared with anything. Its SHA-256
digest is the key of a unique-index probe (``authenticate_token(digest)``), and what that probe's
timing could at most reveal is how many leading bytes of the *digest* some stored digest shares
with the probe. Digests of attacker-chosen strings are uniformly random, and learning a prefix of
a stored digest does not help to find a token hashing to it (that would be a SHA-256 preimage), so
there is no byte-by-byte guessing of a secret to speed up. (An ``hmac.compare_digest`` after the
probe would compare the digest with itself: the definer function returns only the row whose
digest equals the probe, and never the stored digest.)

Failed authentications are counted per client address and minute by :class:`FailedAuthLog`, which
logs the caller's address and the reason, never the token.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timezone
from typing import Any

from shared.auth import Principal, token_digest
from shared.errors import Unauthorized
from shared.store import authentication as token_rows
from shared.store.database import Database

auth_log = logging.getLogger("memarc.auth")


async def authenticate(db: Database, token: str | None) -> Principal:
    """The principal of a bearer token.

    :raises Unauthorized: no token, unknown, revoked or expired token.
    :raises DatabaseUnavailable: PostgreSQL cannot be reached.
    """
    if not token or len(token) > 200:
        raise Unauthorized("a valid bearer token is required", reason="malformed")
    digest = token_digest(token)
    async with db.transaction(None) as conn:
        row = await token_rows.lookup(conn, digest)
        if row is None:
            raise Unauthorized("unknown token", reason="unknown")
        if row["revoked_at"] is not None:
            raise Unauthorized("this token was revoked", reason="revoked")
        if row["expires_at"] is not None and row["expires_at"] <= datetime.now(timezone.utc):
            raise Unauthorized("this token has expired", reason="expired")
        await token_rows.touch(conn, row["token_id"])
    return Principal(
        workspace=row["workspace_id"],
        permissions=frozenset(row["permissions"]),
        actor=f"token:{row['token_id']}",
        database=row["database_name"],
        schema=row["schema_name"],
    )


class FailedAuthLog:
    """Counts failed authentications per client address and wall-clock minute, and logs each one
    on the ``memarc.auth`` logger as a structured line: ``auth_failed client=<address>
    reason=<reason> path=<JSON-quoted path> failures_this_minute=<n>`` (``extra``: the same fields). The token
    is never logged. A caller over ``alert_per_minute`` failures in one minute is logged at
    ERROR once per minute (``auth_failure_rate``).

    Memory is bounded: counters of past minutes are dropped when the minute turns, and past
    ``MAX_CLIENTS`` addresses in one minute the rest share one counter.
    """

    MAX_CLIENTS = 10_000

    def __init__(self, alert_per_minute: int = 20, clock: Any = time.time) -> None:
        self.alert_per_minute = alert_per_minute
        self._clock = clock
        self._minute = -1
        self._counts: dict[str, int] = {}

    def record(self, client: str, reason: str, path: str) -> int:
        """Count and log one failure of ``client``; returns its failures in the current minute."""
        minute = int(self._clock() // 60)
        if minute != self._minute:
            self._minute, self._counts = minute, {}
        if client not in self._counts and len(self._counts) >= self.MAX_CLIENTS:
            client = "(other clients)"  # memory stays bounded under a distributed attack
        n = self._counts[client] = self._counts.get(client, 0) + 1
        # JSON-quoted: a path is caller-controlled text (control characters, fake log lines)
        fields = {"client": client, "reason": reason, "path": json.dumps(path[:200]),
                  "failures_this_minute": n}
        auth_log.warning("auth_failed client=%s reason=%s path=%s failures_this_minute=%d",
                         client, reason, fields["path"], n, extra={"auth": fields})
        if n == self.alert_per_minute + 1:
            auth_log.error("auth_failure_rate client=%s failures_this_minute=%d (over %d)",
                           client, n, self.alert_per_minute, extra={"auth": fields})
        return n

    def failures(self, client: str) -> int:
        """Failures of ``client`` counted in the current minute."""
        return self._counts.get(client, 0) if int(self._clock() // 60) == self._minute else 0
