"""Sign-in, the one-time sign-in link, sign-out (issue 24).

A person pastes an API token into the sign-in form, or opens a link that ``memarc
sign-in-link`` printed (one use, short-lived: its page asks to confirm, so a link preview that
fetches it does not spend it); either opens a server-side session (:mod:`shared.archive.
browser_sessions`) whose secret goes into an HttpOnly, SameSite=Strict cookie. The token itself
never appears in a URL. Failed sign-ins are counted and logged like failed API authentications
(the writer's :class:`~shared.archive.authentication.FailedAuthLog`), never with the token.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import datetime, timezone
from typing import Annotated

from litestar import Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromQuery, Parameter
from litestar.response import Template

from shared.archive.browser_sessions import OpenedSession
from shared.auth import Principal
from shared.errors import Unauthorized
from writer.auth import client_address
from writer.routes.admin.pages import (COOKIE, PREFIX, Person, Urls, local_next, provide_person,
                                       render, see_other, sessions)

Text = Annotated[str | None, Parameter(max_length=2000)]

REASONS = {
    "ended": "You signed out.",
    "expired": "Your session has expired: sign in again.",
    "revoked": "The token of your session was revoked: sign in with another token.",
}


def landing(principal: Principal) -> str:
    """The first page of a signed-in person: the review queue (the workspace's sessions) for
    a reviewer who cannot edit cards, the card list for everyone else."""
    urls = Urls(principal.workspace)
    if principal.allows("memory.review") and not principal.allows("memory.manage"):
        return urls.sessions()
    return urls.cards()


def _signed_in(request: Request, opened: OpenedSession, next_url: str | None) -> Response:
    """303 to ``next_url`` (a page of the administration) or the person's landing page
    (:func:`landing`), with the session cookie."""
    response = see_other(local_next(next_url) or landing(opened.principal))
    seconds = int((opened.expires_at - datetime.now(timezone.utc)).total_seconds())
    response.set_cookie(COOKIE, opened.secret, path=PREFIX, max_age=max(seconds, 1),
                        httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return response


async def _open(request: Request, opening: Awaitable[OpenedSession], next_url: str | None,
                error: str) -> Response:
    """Await ``opening`` (a sign-in): signed in (:func:`_signed_in`), or the form again with a
    401 and ``error`` (``{}``: the reason), the failure counted and logged."""
    try:
        opened = await opening
    except Unauthorized as exc:
        _failed(request, exc)
        return render("sign_in.html", None, status=401, next=local_next(next_url),
                      error=error.format(exc.message))
    previous = request.cookies.get(COOKIE)
    if previous:  # this browser's earlier session ends: one session per sign-in
        try:
            await sessions(request).sign_out(previous,
                                             await sessions(request).principal(previous))
        except Unauthorized:
            pass  # it had ended already
    return _signed_in(request, opened, next_url)


def _failed(request: Request, exc: Unauthorized) -> None:
    request.app.state.auth_failures.record(client_address(request),
                                           getattr(exc, "reason", "?"), request.url.path)


@get("/", name="admin_home")
async def home(request: Request) -> Response:
    """The signed-in person's workspace, else the sign-in form."""
    try:
        principal = await sessions(request).principal(request.cookies.get(COOKIE))
    except Unauthorized:
        return see_other(f"{PREFIX}/sign-in")
    return see_other(landing(principal))


@get("/sign-in", name="admin_sign_in_form")
async def sign_in_form(request: Request, reason: FromQuery[Text] = None,
                       message: FromQuery[Text] = None) -> Template:
    """The sign-in form: paste an API token (``next``: the page to go to afterwards)."""
    notice = REASONS.get(reason or "") or (message if reason == "workspace" else None)
    return render("sign_in.html", None, next=local_next(request.query_params.get("next")),
                  notice=notice)


@post("/sign-in", name="admin_sign_in", opt={"activity": None})
async def sign_in(request: Request) -> Response:
    """Open a session for the pasted token; 401 with the form again when it is not valid."""
    form = await request.form()
    return await _open(request, sessions(request).sign_in(str(form.get("token") or "")),
                       form.get("next"), "That token cannot sign in: {}.")


@get("/sign-in/link", name="admin_link_form")
async def link_form(code: FromQuery[Text] = None) -> Template:
    """The page a sign-in link opens: one button that signs in (so a link preview that fetches
    the URL does not use the link up)."""
    return render("sign_in_link.html", None, code=code or "")


@post("/sign-in/link", name="admin_link", opt={"activity": None})
async def link_sign_in(request: Request) -> Response:
    """Redeem the link's code and open a session; 401 when it was used, expired or unknown."""
    form = await request.form()
    return await _open(request, sessions(request).sign_in_with_link(str(form.get("code") or "")),
                       None, "{}")


@post("/sign-out", name="admin_sign_out", dependencies={"person": Provide(provide_person)},
      opt={"activity": None})
async def sign_out(request: Request, person: NamedDependency[Person]) -> Response:
    """End the session (the row: the cookie alone would not sign out a copied cookie)."""
    await sessions(request).sign_out(person.secret, person.principal)
    response = see_other(f"{PREFIX}/sign-in?reason=ended")
    response.delete_cookie(COOKIE, path=PREFIX)
    return response


HANDLERS = [home, sign_in_form, sign_in, link_form, link_sign_in, sign_out]
__all__ = ["HANDLERS"]
