"""Sign-in links that can be issued again (issue 26): ``/-/memory/sign-in?ticket=…`` redeems a
ticket that ``memarc explorer-sign-in-link`` signed with this explorer's secret
(:mod:`shared.archive.explorer_sign_in`), once, before it expires, and sets Datasette's actor
cookie. Nothing is written: the nonces redeemed are kept in this process until they expire.

Also the words every signed-out page uses to say how to get a link (:func:`command`).
"""

from __future__ import annotations

import time
from typing import Any

from datasette import Response
from itsdangerous import BadSignature

from shared.archive.explorer_sign_in import COMMAND, NAMESPACE, SIGN_IN_PATH, check
from shared.errors import Unauthorized

#: the paths whose refusal is a failed sign-in (Datasette's root link and ours)
SIGN_IN_PATHS = ("/-/auth-token", SIGN_IN_PATH)


def command(request: Any) -> str:
    """The exact command that prints a new sign-in link to this explorer (its URL as the
    request reached it)."""
    return f"{COMMAND} --url {request.scheme}://{request.host}"


def _redeemed(datasette: Any) -> dict[str, int]:
    """The nonces this process has redeemed, with their expiry, the expired ones dropped."""
    used: dict[str, int] = datasette.__dict__.setdefault("memarc_redeemed_sign_ins", {})
    now = time.time()
    for nonce in [n for n, expires in used.items() if expires <= now]:
        del used[nonce]
    return used


async def sign_in_view(datasette: Any, request: Any) -> Response:
    """``/-/memory/sign-in?ticket=…``: sign the browser in as the ticket's actor and go to the
    workspaces.

    :raises Unauthorized: a ticket not signed with this explorer's secret, expired, or used
        already (its error page says which command prints a new one).
    """
    ticket = request.args.get("ticket") or ""
    try:
        payload = datasette.unsign(ticket, NAMESPACE)
    except BadSignature:
        raise Unauthorized("this sign-in link is not valid for this explorer") from None
    actor, nonce, expires = check(payload)
    used = _redeemed(datasette)
    if nonce in used:
        raise Unauthorized("this sign-in link has already been used")
    used[nonce] = expires
    response = Response.redirect(datasette.urls.path("/-/memory"))
    response.set_cookie("ds_actor", datasette.sign({"a": {"id": actor}}, "actor"),
                        httponly=True, samesite="lax")
    return response
