"""The API page at ``/schema`` works offline (issue 26): the writer serves Swagger UI's files
itself (:mod:`writer.api_page`), so a person on a machine without the internet sees the
operations listed.

Headless Chromium (Debian's package) driven by Playwright opens ``/schema`` with every request
to a host other than the writer's loopback address aborted and recorded; the page must list
every operation of ``/schema/openapi.json`` by method and path, and no request may have left
for another host. The page is saved as ``test-output/schema-1280x1000.png``. ``.ci/run``
installs Chromium and sets ``MEMARC_NO_SKIP=1``, so in CI a missing browser is a failure, not a
skip.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers import skip_or_fail, start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "test-output"
CHROMIUM = os.environ.get("MEMARC_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


@pytest.fixture
def chromium() -> str:
    if CHROMIUM is None:
        skip_or_fail("no chromium binary (CI installs Debian's chromium)")
    return CHROMIUM


def operations(spec: dict) -> list[tuple[str, str]]:
    """``(METHOD, path)`` of every operation of an OpenAPI document, in its order."""
    return [(method.upper(), path) for path, item in spec["paths"].items()
            for method in item if method in METHODS]


async def test_schema_page_names_only_its_own_files(make_env):
    """The page's scripts, styles and favicon are the writer's own ``/schema/assets`` files,
    each served (200, not empty); no ``http(s)://`` address is left in the page."""
    async with make_env() as env:
        page = await env.client.get("/schema")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.text), page.text[:2000]
        files = re.findall(r"""(?:src|href)=["'](/[^"']+)["']""", page.text)
        assert sorted(files) == sorted(f"/schema/assets/{name}" for name in (
            "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "swagger-ui.css",
            "favicon-32x32.png"))
        for path in files:
            r = await env.client.get(path)
            assert r.status_code == 200 and len(r.content) > 0, path
        assert (await env.client.get("/schema/swagger")).text == page.text
        assert (await env.client.get("/schema/assets/no-such-file.js")).status_code == 404
        yaml_doc = await env.client.get("/schema/openapi.yaml")
        assert yaml_doc.status_code == 200 and "openapi:" in yaml_doc.text


async def test_a_person_reads_the_operations_offline_in_chromium(make_env, chromium):
    from playwright.async_api import async_playwright

    OUT.mkdir(exist_ok=True)
    async with make_env() as env:
        spec = (await env.client.get("/schema/openapi.json")).json()
        expected = operations(spec)
        assert len(expected) > 20, expected  # the writer's API, not an empty document
        server, task, base = await start_server(env.app)
        local = urlsplit(base).netloc
        outside: list[str] = []   # requests to any other host: aborted, and a failure
        served: list[str] = []    # requests to the writer

        async def only_local(route) -> None:
            if urlsplit(route.request.url).netloc == local:
                served.append(route.request.url)
                await route.continue_()
            else:
                outside.append(route.request.url)
                await route.abort()

        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=chromium, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                context = await browser.new_context(viewport={"width": 1280, "height": 1000})
                await context.route("**/*", only_local)
                page = await context.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                await page.goto(f"{base}/schema")
                await page.wait_for_selector(".opblock", state="visible", timeout=30_000)
                await page.wait_for_load_state("networkidle")
                await page.screenshot(path=str(OUT / "schema-1280x1000.png"))

                # what a person sees: the title, and every operation by method and path
                assert await page.is_visible("text=Memory archive writer")
                shown = await page.eval_on_selector_all(".opblock", """blocks => blocks.map(b => [
                    b.querySelector('.opblock-summary-method').innerText.trim(),
                    b.querySelector('.opblock-summary-path').innerText.replace(/\\u200b/g, '').trim()])""")
                assert sorted(map(tuple, shown)) == sorted(expected)
                first = page.locator(".opblock-summary-path", has_text="/api/workspaces/{workspace_id}/memory").first
                assert await first.is_visible()
                # an operation opens on a click and shows its description (the handler's docstring)
                await first.click()
                await page.wait_for_selector(".opblock.is-open .opblock-description-wrapper",
                                             state="visible")
                await page.screenshot(path=str(OUT / "schema-1280x1000-open.png"))
                assert errors == []
                await browser.close()
        finally:
            await stop_server(server, task)
        assert outside == []
        assert any("/schema/assets/swagger-ui-bundle.js" in url for url in served), served
