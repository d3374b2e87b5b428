"""Helpers of the administration pages' tests: the CSRF token of a form, signing a client in
(a browser session of a token), and a one-time sign-in link; also used by the tests that need
a row in every table (the isolation audit, workspace deletion)."""

from __future__ import annotations

import re
from typing import Any

from shared.archive.browser_sessions import create_sign_in_link

CSRF_RE = re.compile(r'name="_csrf_token" value="([^"]+)"')


def bearer(headers: dict[str, str]) -> str:
    """The token of ``Authorization: Bearer`` headers."""
    return headers["Authorization"].removeprefix("Bearer ")


async def csrf(client: Any, path: str) -> str:
    """The CSRF token of the form on ``path`` (the GET also sets the CSRF cookie)."""
    r = await client.get(path)
    assert r.status_code == 200, (path, r.status_code, r.text[:500])
    m = CSRF_RE.search(r.text)
    assert m, f"no CSRF input on {path}"
    return m.group(1)


async def sign_in(client: Any, headers: dict[str, str]) -> Any:
    """Sign ``client`` in to the administration with the token of ``headers``; returns the
    response (a 303 with the session cookie)."""
    token = await csrf(client, "/admin/sign-in")
    r = await client.post("/admin/sign-in", data={"token": bearer(headers), "_csrf_token": token})
    assert r.status_code == 303, r.text[:500]
    return r


async def seed_admin_rows(env: Any, workspace: str, headers: dict[str, str]) -> None:
    """A browser session and a one-time sign-in link of ``workspace`` (a row in each of the
    administration's tables); the client's cookies are cleared afterwards."""
    create_sign_in_link(env.migrator_url, "memory", workspace, ["memory.manage"])
    await sign_in(env.client, headers)
    env.client.cookies.clear()
