"""The HTTP client of the writer API that the CLI's commands use: ``MEMARC_URL`` (default
``http://127.0.0.1:8000``) and ``MEMARC_TOKEN``, the routes of a workspace's cards and of a
workflow session, and the API's problem details raised as :class:`~writer.cli.command.CliError`
with the CLI's exit status (2 a 4xx, 3 a 5xx, 4 the writer cannot be reached). ``httpx`` is
imported when a request is made, not with the command line.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, urlsplit

from writer.cli.command import CliError
from writer.cli.runtime import runtime_value


class ApiClient:
    """Minimal client of the writer API for the card commands."""

    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        """``url`` defaults to the runtime file's (``-c``, :mod:`writer.cli.runtime`), else
        ``MEMARC_URL``, else ``http://127.0.0.1:8000``; ``token`` to the runtime file's, else
        ``MEMARC_TOKEN``.

        :raises CliError: ``no_token``, no token given or set; ``bad_url`` (status 2), a URL
            that is not ``http(s)://host[:port]`` (a configuration error, not an unreachable
            writer).
        """
        self.url = (url or runtime_value("url", "MEMARC_URL")
                    or "http://127.0.0.1:8000").rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CliError({"error": f"the writer URL {self.url!r} is not an http(s)://host[:port] "
                                     "URL (url in the -c file, or MEMARC_URL)", "code": "bad_url"})
        token = token or runtime_value("token", "MEMARC_TOKEN")
        if not token:
            raise CliError({"error": "set MEMARC_TOKEN, or token / token_file in the -c file "
                                     "(from `memarc token create`)",
                            "code": "no_token"})
        self.headers = {"Authorization": f"Bearer {token}"}

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """The decoded JSON answer of one request (``kw`` as :meth:`httpx.Client.request` takes
        them; 120 s timeout).

        :raises CliError: the API's problem details with status 2 (a 4xx) or 3 (a 5xx);
            ``writer_unreachable`` with status 4 when the writer cannot be reached.
        """
        import httpx

        try:
            with self.session() as http:
                r = http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise CliError({"error": f"cannot reach the writer at {self.url}: {exc}",
                            "code": "writer_unreachable"}, 4) from exc
        if r.status_code >= 400:
            self.raise_for_problem(r)
        try:
            return r.json()
        except ValueError:
            return {"detail": r.text}

    def session(self) -> Any:
        """An ``httpx.Client`` on the writer with the token (120 s timeout), to use as a context
        manager (it closes on exit)."""
        import httpx

        return httpx.Client(base_url=self.url, timeout=120, headers=self.headers)

    @contextmanager
    def stream(self, method: str, path: str, **kw: Any) -> Iterator[Any]:
        """The answer of one request, its body not read yet (``httpx.Response.iter_bytes``); the
        session closes when the block ends. Transport errors (``httpx.TransportError``) are
        the caller's: a stream may be cut after its first bytes.

        :raises CliError: an error answer's problem details (:meth:`raise_for_problem`).
        """
        with self.session() as http, http.stream(method, path, **kw) as r:
            if r.status_code >= 400:
                r.read()
                self.raise_for_problem(r)
            yield r

    @staticmethod
    def raise_for_problem(r: Any) -> None:
        """Raise the problem details of an error answer (read already).

        :raises CliError: the decoded body with status 2 (a 4xx) or 3 (a 5xx).
        """
        try:
            body = r.json()
        except ValueError:
            body = {"detail": r.text}
        raise CliError(body if isinstance(body, dict) else {"detail": body},
                       3 if r.status_code >= 500 else 2)


def memory_path(workspace: str) -> str:
    """The route of a workspace's cards (``/api/workspaces/{workspace}/memory``)."""
    return f"/api/workspaces/{workspace}/memory"


def session_path(workspace: str, session: str) -> str:
    """The routes of one workflow session.

    :raises CliError: ``bad_input``, the session id is blank (it would name no route: a bare
        404) or contains ``/``.
    """
    if not session.strip():
        raise CliError({"error": "a session id is 1..200 characters, not blank",
                        "code": "bad_input"})
    if "/" in session:
        raise CliError({"error": "a session id cannot contain '/'", "code": "bad_input"})
    return f"/api/workspaces/{workspace}/sessions/{quote(session, safe='')}"
