"""What every administration page uses: the signed-in person (a dependency), page rendering,
the URLs of a workspace's pages, a form's rejection recorded like the API's, and the errors as
pages (one table of exception handlers)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from litestar import Request, Response
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException, PermissionDeniedException, ValidationException
from litestar.response import Redirect, Template

from shared.archive.activity import record_rejection
from shared.archive.browser_sessions import BrowserSessions
from writer.routes import provide_archive  # noqa: F401 - the one provider, re-used by the pages
from shared.auth import Principal
from shared.errors import ArchiveError, InvalidInput, Unauthorized
from shared.models import parse_card_id
from shared.validation_words import plain_message

log = logging.getLogger("memarc.admin")
T = TypeVar("T")

PREFIX = "/admin"
#: the session cookie: HttpOnly, SameSite=Strict, path /admin, Secure over https
COOKIE = "memarc_admin"


class CrossSiteRequest(Exception):
    """A state-changing request whose ``Origin`` (or, without one, ``Referer``) names another
    site than the administration's."""

    def __init__(self, header: str, value: str) -> None:
        super().__init__(f"{header} {value!r} is not this site")
        self.header, self.value = header, value


#: Methods that change nothing: no origin check.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def web_origin(url: str) -> str | None:
    """``scheme://host:port`` of an http(s) URL (the default port written out, the host in
    lower case); None for anything else (``null``, another scheme, no host)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return f"{parts.scheme}://{parts.hostname}:{port or (443 if parts.scheme == 'https' else 80)}"


def same_origin(connection: ASGIConnection, _handler: Any) -> None:
    """Guard of every administration route (issue 36): a POST whose ``Origin`` header, or
    without one its ``Referer``, names another origin than the request's own (its scheme and
    ``Host``, as the proxy forwards them) or ``MEMARC_ADMIN_URL``'s is refused, a second wall
    behind the CSRF token and the SameSite=Strict cookies. A request with neither header passes
    (non-browser clients and some privacy settings send neither); ``Origin: null`` does not.

    :raises CrossSiteRequest: the request came from another site.
    """
    if connection.method in SAFE_METHODS:
        return
    header, value = "Origin", connection.headers.get("origin")
    if value is None:
        header, value = "Referer", connection.headers.get("referer")
        if not value:
            return
    allowed = {web_origin(str(connection.base_url)),
               web_origin(getattr(connection.app.state, "admin_url", None) or "")} - {None}
    if web_origin(value) not in allowed:
        raise CrossSiteRequest(header, value)


class SignInRequired(Exception):
    """No valid session: the person signs in (again)."""

    def __init__(self, message: str, reason: str = "missing") -> None:
        super().__init__(message)
        self.message, self.reason = message, reason


@dataclass(frozen=True)
class Person:
    """The signed-in person: the principal of their session's token, and the session's secret."""

    principal: Principal
    secret: str

    @property
    def workspace(self) -> str:
        return self.principal.workspace

    @property
    def can_manage(self) -> bool:
        """May edit (``memory.manage``): edit controls are shown only then."""
        return self.principal.allows("memory.manage")

    @property
    def can_review(self) -> bool:
        """May review workflow sessions (``memory.review``): the review pages are shown only
        then."""
        return self.principal.allows("memory.review")

    @property
    def token_id(self) -> str:
        return self.principal.actor.removeprefix("token:")


class Urls:
    """The administration URLs of one workspace (for handlers and templates)."""

    def __init__(self, workspace: str) -> None:
        self.workspace = workspace
        self.base = f"{PREFIX}/workspaces/{quote(workspace, safe='')}"

    def cards(self, **query: Any) -> str:
        q = {k: v for k, v in query.items() if v not in (None, "", [])}
        return f"{self.base}/cards" + (f"?{urlencode(q, doseq=True)}" if q else "")

    def new(self, family: str | None = None) -> str:
        return f"{self.base}/cards/new" + (f"?{urlencode({'family': family})}" if family else "")

    def card(self, card_id: str, **query: Any) -> str:
        q = {k: v for k, v in query.items() if v not in (None, "")}
        return f"{self.base}/cards/{quote(card_id, safe='')}" + (f"?{urlencode(q)}" if q else "")

    def delete(self, card_id: str) -> str:
        return f"{self.card(card_id)}/delete"

    def retry(self, card_id: str) -> str:
        return f"{self.card(card_id)}/retry"

    def activity(self, card_id: str) -> str:
        return f"{self.card(card_id)}/activity"

    def search(self) -> str:
        return f"{self.base}/cards.json"

    def pending(self, **query: Any) -> str:
        q = {k: v for k, v in query.items() if v not in (None, "")}
        return f"{self.base}/pending" + (f"?{urlencode(q)}" if q else "")

    def pending_retry(self) -> str:
        return f"{self.base}/pending/retry"

    def pending_retry_all(self) -> str:
        return f"{self.base}/pending/retry-all"

    def sessions(self, **query: Any) -> str:
        q = {k: v for k, v in query.items() if v not in (None, "")}
        return f"{self.base}/sessions" + (f"?{urlencode(q)}" if q else "")

    def session(self, session_id: str, **query: Any) -> str:
        q = {k: v for k, v in query.items() if v not in (None, "")}
        return f"{self.base}/sessions/{quote(session_id, safe='')}" + (
            f"?{urlencode(q)}" if q else "")

    def report(self, name: str, suffix: str = "", **query: Any) -> str:
        """A curation report's page (``suffix``: ``.json`` or ``.csv`` for its downloads)."""
        q = {k: v for k, v in query.items() if v not in (None, "", [])}
        return f"{self.base}/reports/{name}{suffix}" + (f"?{urlencode(q, doseq=True)}" if q else "")

    def merge(self, a: str, b: str) -> str:
        """Two cards side by side, to keep one and delete the other (the conflicts report)."""
        return f"{self.base}/reports/merge?{urlencode({'a': a, 'b': b})}"

    def evaluations(self, **query: Any) -> str:
        q = {k: v for k, v in query.items() if v not in (None, "")}
        return f"{self.base}/evaluations" + (f"?{urlencode(q)}" if q else "")

    def evaluation(self, run_id: str) -> str:
        return f"{self.base}/evaluations/{quote(run_id, safe='')}"

    def recalls(self, **query: Any) -> str:
        q = {k: v for k, v in query.items() if v not in (None, "")}
        return f"{self.base}/recalls" + (f"?{urlencode(q)}" if q else "")

    def recall(self, recall_id: str, **query: Any) -> str:
        q = {k: v for k, v in query.items() if v not in (None, "")}
        return f"{self.base}/recalls/{quote(recall_id, safe='')}" + (
            f"?{urlencode(q)}" if q else "")

    def recall_feedback(self, recall_id: str) -> str:
        return f"{self.base}/recalls/{quote(recall_id, safe='')}/feedback"


def sessions(request: Request) -> BrowserSessions:
    """The browser sessions over the process's database."""
    return BrowserSessions(request.app.state.archive.db, request.app.state.admin_session_hours)


async def provide_person(request: Request) -> Person:
    """The signed-in person (dependency of every page but sign-in): their session, read with its
    token on every request, so sign-out, expiry and a revoked token end it at once.

    :raises SignInRequired: no session, or it ended.
    """
    secret = request.cookies.get(COOKIE)
    try:
        principal = await sessions(request).principal(secret)
    except Unauthorized as exc:
        raise SignInRequired(exc.message, getattr(exc, "reason", "missing")) from None
    workspace = request.path_params.get("workspace_id")
    if workspace is not None and workspace != principal.workspace:
        raise SignInRequired(f"you are signed in to workspace {principal.workspace!r}, not "
                             f"{workspace!r}: sign in with a token of {workspace!r}", "workspace")
    person = Person(principal, secret or "")
    request.state.admin_person = person  # the error pages keep the person's navigation
    return person


async def recorded(archive: Any, person: Person, workspace: str, verb: str,
                   convert: Callable[[], T], card_id: str | None = None) -> T:
    """``convert()`` (a form read into the use case's request); a value out of its bounds is
    recorded as a rejected ``verb`` of ``person`` (as the JSON route's boundary records it)
    before it is raised.

    :raises InvalidInput: the form's value out of bounds (the field named)."""
    try:
        return convert()
    except InvalidInput as exc:
        await record_rejection(archive.db, person.principal, workspace, verb, exc,
                               card_uuid=parse_card_id(card_id) if card_id else None)
        raise


def render(name: str, person: Person | None, *, status: int = 200, **context: Any) -> Template:
    """The page ``admin/<name>`` with the common context: ``person``, ``urls`` (of their
    workspace), ``explorer_url``."""
    return Template(template_name=f"admin/{name}", status_code=status, context={
        "person": person, "urls": Urls(person.workspace) if person else None,
        "prefix": PREFIX, **context})


def local_next(value: str | None) -> str | None:
    """``value`` when it is a path of the administration (a safe place to go after sign-in),
    else None (never another site)."""
    if value and value.startswith(f"{PREFIX}/") and not value.startswith("//") \
            and "\\" not in value and "\n" not in value:
        return value
    return None


def see_other(url: str) -> Redirect:
    """A 303 to ``url`` (after a POST: the browser GETs it)."""
    return Redirect(path=url, status_code=303)


def _sign_in_required(request: Request, exc: SignInRequired) -> Response:
    if request.method in ("GET", "HEAD"):
        query = {"reason": exc.reason}
        if exc.reason not in ("missing",) and exc.reason != "unknown":
            query["message"] = exc.message
        if local_next(request.url.path):
            query["next"] = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return see_other(f"{PREFIX}/sign-in?{urlencode(query)}")
    # the cookie stays: a session that ended is worthless anyway, and one that is still valid
    # (signed in to another workspace than the form's) stays the person's; only sign-out, which
    # ends the session server-side, deletes it (and a new sign-in replaces it)
    return render("sign_in.html", None, status=401, error=exc.message, next=None)


def _cross_site(request: Request, exc: CrossSiteRequest) -> Response:
    log.warning("cross-site %s %s refused: %s %s", request.method, request.url.path,
                exc.header, json.dumps(exc.value[:200]))
    return render("error.html", _person_of(request), status=403, title="Nothing was changed",
                  message="This form was sent from another site than this administration "
                          f"(its {exc.header} header names {exc.value[:200]}), so it was "
                          "refused. Nothing was saved. If you sent it from these pages, open "
                          "them at the address the administrator gave you and try again; "
                          "behind a reverse proxy, the administrator sets MEMARC_ADMIN_URL "
                          "to the public address.", code="cross_site")


def _archive_error(request: Request, exc: ArchiveError) -> Response:
    if exc.status >= 500:
        log.warning("%s %s -> %s: %s", request.method, request.url.path, exc.code, exc.message)
    titles = {403: "Not allowed", 404: "Not found", 409: "Changed meanwhile",
              422: "Not valid", 503: "Temporarily unavailable"}
    return render("error.html", _person_of(request), status=exc.status,
                  title=titles.get(exc.status, "Something went wrong"),
                  message=plain_message(exc.message), code=exc.code)


def _person_of(request: Request) -> Person | None:
    """The signed-in person of a page that failed after :func:`provide_person` ran (its
    navigation and sign-out stay on the error page), else None."""
    return getattr(request.state, "admin_person", None)


def _http_error(request: Request, exc: HTTPException) -> Response:
    if isinstance(exc, PermissionDeniedException) and "CSRF" in str(exc.detail):
        return render("error.html", _person_of(request), status=403, title="Nothing was changed",
                      message="This form did not carry this site's security token (it is "
                              "older than your sign-in, or it came from another site). "
                              "Nothing was saved: go back, reload the page and try again.",
                      code="csrf")
    if isinstance(exc, ValidationException) and isinstance(exc.extra, list) and exc.extra:
        # a query or path value out of its bounds: say which, not "Validation failed for GET …"
        reasons = " ".join(plain_message(f"{e.get('message')} - at `$.{e.get('key')}`")
                           for e in exc.extra if isinstance(e, dict))
        return render("error.html", _person_of(request), status=exc.status_code, title="Not valid",
                      message=f"This address asks for something the page cannot show: "
                              f"{reasons} Go back and change it.", code="bad_request")
    return render("error.html", _person_of(request), status=exc.status_code, title=str(exc.detail),
                  message=str(exc.detail), code="http_error")


EXCEPTION_HANDLERS: dict[Any, Any] = {
    SignInRequired: _sign_in_required,
    CrossSiteRequest: _cross_site,
    ArchiveError: _archive_error,
    HTTPException: _http_error,
}
