"""The explorer's one error renderer: an error page (or JSON) for any exception on any page.

Archive errors keep their message and code, Datasette's own 4xx (unknown URL, forbidden, bad
request) their status and message; anything else is a 500 whose traceback is logged once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from datasette import Response
from datasette.utils.asgi import Base400

from shared.errors import ArchiveError, BadRequest, InvalidInput
from shared.validation_words import plain_message

from . import render, sign_in
from .export import json_response

log = logging.getLogger("memarc.explorer")

TITLES = {400: "Invalid request", 401: "Not signed in", 403: "Forbidden", 404: "Not found",
          409: "Conflict",
          503: "Service unavailable"}


def error_status(exc: ArchiveError) -> int:
    """HTTP status of an archive error in the explorer: a bad query string is a 400 here (there
    is no request body to be unprocessable), otherwise the error's own status."""
    if isinstance(exc, (InvalidInput, BadRequest)):
        return 400
    return exc.status


@dataclass(frozen=True)
class _Error:
    """What an error page shows: ``page`` is the context of ``memarc_error.html`` (``error``,
    ``status``, ``title``), ``body`` the JSON answer; ``unexpected`` for a 500 to log."""

    status: int
    page: dict[str, Any]
    body: dict[str, Any]
    unexpected: bool = False


def _shown(message: str, status: int) -> dict[str, Any]:
    return {"error": message, "status": status, "title": TITLES.get(status)}


def _describe(exc: BaseException) -> _Error:
    if isinstance(exc, ArchiveError):
        status = error_status(exc)
        page = _shown(plain_message(exc.message), status)  # the decoder's words, for people
        return _Error(status, page, {"ok": False, **page, "code": exc.code})
    if isinstance(exc, Base400):
        status = getattr(exc, "status", 400)
        page = _shown(str(exc.args[0]) if exc.args else TITLES.get(status, "Error"), status)
        return _Error(status, page, {"ok": False, **page})
    return _Error(500, {"error": "The explorer could not complete this request.", "status": 500,
                        "title": "Internal error"},
                  {"ok": False, "error": "internal error", "status": 500}, unexpected=True)


async def error_response(datasette: Any, request: Any, exc: BaseException) -> Response:
    """The error page of ``exc`` (``memarc_error.html``, breadcrumbs to the archive's home), or
    ``{ok: false, error, status, title[, code]}`` when the path ends in ``.json``; an unexpected
    exception is a 500 that says nothing of its cause, its traceback logged on
    ``memarc.explorer``."""
    error = _describe(exc)
    if request.path in sign_in.SIGN_IN_PATHS and error.status in (401, 403):
        error.page["sign_in_command"] = sign_in.command(request)
    if error.unexpected:
        log.error("explorer error on %s", request.path, exc_info=exc)
    if request.path.split("?")[0].endswith(".json"):
        return json_response(error.body, status=error.status)
    return await render.page(datasette, request, "memarc_error.html", error.page,
                             status=error.status, depth=2)


def retire_datasette_handler() -> None:
    """Block Datasette's fallback ``handle_exception`` plugin: Datasette 0.65 calls every
    ``handle_exception`` hook for every exception, its own fallback included, and that fallback
    prints a traceback for each 4xx (with locals when ``rich`` is importable, which Litestar
    makes it; outside an except block it then crashes into a 500). :func:`error_response`
    answers every exception itself."""
    from datasette.plugins import pm

    if pm.get_plugin("datasette.handle_exception") is not None:
        pm.set_blocked("datasette.handle_exception")
