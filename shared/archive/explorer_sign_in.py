"""Sign-in links to the explorer that can be issued again for a running instance (issue 26).

Datasette's own root link (``/-/auth-token?token=…``) works once per process: a second one needs
a restart. Here ``memarc explorer-sign-in-link`` signs a short-lived sign-in ticket with the
explorer's secret (the one Datasette signs its ``ds_actor`` cookie with: ``DATASETTE_SECRET``, or
``data_dir/explorer_secret`` that ``memarc up`` keeps), in the form of Datasette's own
``datasette.sign(value, namespace)`` (itsdangerous, namespace :data:`NAMESPACE`). The explorer
checks it with ``datasette.unsign`` and sets the actor cookie. Nothing is written anywhere: the
explorer keeps its read-only role, and issuing a link revokes no API token and needs no restart.

A ticket is ``{"a": actor id, "n": nonce, "e": expiry (Unix seconds)}``. It opens one sign-in:
the explorer remembers the nonces it has redeemed until they expire (in its process: a restart
forgets them, so a ticket stays valid, at most for its few minutes, across one).
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any

from itsdangerous import URLSafeSerializer

from shared.errors import InvalidInput, Unauthorized
from shared.private_files import write_private

#: the signer's namespace (Datasette's ``sign`` calls it a namespace, itsdangerous a salt)
NAMESPACE = "memarc-explorer-sign-in"
DEFAULT_MINUTES = 15
#: the explorer's path that redeems a ticket (``?ticket=…``)
SIGN_IN_PATH = "/-/memory/sign-in"
#: the command that prints a new link, as the explorer's pages quote it
COMMAND = "memarc explorer-sign-in-link"
SECRET_FILE = "explorer_secret"


def signing_secret(data_dir: str | Path, *, create: bool) -> str | None:
    """The explorer's signing secret: ``DATASETTE_SECRET`` when set, else the one in
    ``data_dir/explorer_secret`` (64 hex digits, mode 0600), created when ``create`` and
    missing; None when it is missing and not to be created.

    :raises OSError: the file cannot be read or written.
    """
    from_env = os.environ.get("DATASETTE_SECRET", "").strip()
    if from_env:
        return from_env
    path = Path(data_dir) / SECRET_FILE
    try:
        value = path.read_text(encoding="utf-8").strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    if not create:
        return None
    value = secrets.token_hex(32)
    write_private(path, value)
    return value


def issue(secret: str, actor: str = "root", minutes: int = DEFAULT_MINUTES) -> dict[str, Any]:
    """A new ticket for ``actor`` (``root`` sees every workspace; another id sees what the
    explorer's ``workspaces`` setting gives it), valid ``minutes``.

    :returns: ``{ticket, actor, expires_at}`` (``expires_at`` in Unix seconds).
    :raises InvalidInput: ``minutes`` outside 1..1440, or a blank actor.
    """
    if not 1 <= minutes <= 1440:
        raise InvalidInput("a sign-in link is valid 1..1440 minutes", field="minutes")
    actor = (actor or "").strip()
    if not actor or len(actor) > 200:
        raise InvalidInput("the actor id must be 1..200 characters", field="actor")
    expires = int(time.time()) + minutes * 60
    payload = {"a": actor, "n": secrets.token_urlsafe(16), "e": expires}
    return {"ticket": URLSafeSerializer(secret, NAMESPACE).dumps(payload), "actor": actor,
            "expires_at": expires}


def check(payload: Any, now: float | None = None) -> tuple[str, str, int]:
    """The ``(actor, nonce, expiry)`` of an unsigned ticket (the explorer unsigns it with
    ``datasette.unsign(ticket, NAMESPACE)``).

    :raises Unauthorized: not a ticket's shape, or past its expiry.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("a"), str) \
            or not isinstance(payload.get("n"), str) or not isinstance(payload.get("e"), int):
        raise Unauthorized("this sign-in link is not valid")
    if payload["e"] <= (time.time() if now is None else now):
        raise Unauthorized("this sign-in link has expired")
    return payload["a"], payload["n"], payload["e"]

