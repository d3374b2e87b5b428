"""The administration pages in the browser (issue 24, DESIGN §12), served by the writer.

Server-rendered pages (Jinja, autoescape on) whose forms work without JavaScript, over the same
use cases as the JSON routes (:class:`shared.archive.cards.Archive`), so permissions, workspace
serialization, the outbox and the activity log apply unchanged. A person signs in once with a
token (:mod:`.auth`); every state-changing request carries Litestar's CSRF token (the JSON API
and ``/mcp``, authenticated by bearer tokens, are excluded) and is refused when its ``Origin``
or ``Referer`` names another site (:func:`.pages.same_origin`).

:class:`AdminPlugin` adds all of it to the app in one place: the routes under ``/admin``, the
template engine, the CSRF configuration and the stylesheet shared with the explorer.
"""

from __future__ import annotations

import importlib.util
import secrets
from pathlib import Path

from litestar import Router
from litestar.config.app import AppConfig
from litestar.config.csrf import CSRFConfig
from litestar.plugins import InitPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template import TemplateConfig

from shared.config import Settings
from writer.routes.admin import (auth, cards, evaluations, pending, recalls, reports, review,
                                 schema_changes)
from writer.routes.admin.pages import EXCEPTION_HANDLERS, PREFIX, same_origin

ROOT = Path(__file__).resolve().parents[3]
TEMPLATES = ROOT / "writer" / "templates"
#: the explorer's stylesheet (one file, both serve it) and Datasette's own
EXPLORER_STATIC = ROOT / "explorer_plugin" / "static"
#: the administration's small script (the unsaved-changes guard, the link-target picker)
WRITER_STATIC = ROOT / "writer" / "static"
#: paths whose POSTs are authenticated by a bearer token, never a cookie: no CSRF token there
CSRF_EXCLUDE = ["^/api/", "^/mcp", "^/metrics", "^/healthz", "^/readyz", "^/schema"]


def _datasette_static() -> list[Path]:
    spec = importlib.util.find_spec("datasette")
    if spec is None or spec.origin is None:
        return []
    return [Path(spec.origin).parent / "static"]


class AdminPlugin(InitPlugin):
    """Adds the administration to a writer app: ``Litestar(plugins=[AdminPlugin(settings)])``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        app_config.route_handlers.append(Router(
            PREFIX, route_handlers=[*auth.HANDLERS, *cards.HANDLERS, *pending.HANDLERS,
                                    *review.HANDLERS, *schema_changes.HANDLERS,
                                    *evaluations.HANDLERS, *recalls.HANDLERS,
                                    *reports.HANDLERS],
            exception_handlers=EXCEPTION_HANDLERS, guards=[same_origin],
            include_in_schema=False, opt={"activity": None}))
        app_config.route_handlers.append(create_static_files_router(
            f"{PREFIX}/static", directories=[EXPLORER_STATIC, WRITER_STATIC, *_datasette_static()],
            include_in_schema=False, opt={"activity": None}))
        app_config.template_config = TemplateConfig(directory=TEMPLATES,
                                                    engine=JinjaTemplateEngine)
        app_config.csrf_config = CSRFConfig(
            secret=self.settings.admin_secret or secrets.token_hex(32),
            cookie_name="memarc_csrf", cookie_path=PREFIX, cookie_httponly=True,
            cookie_samesite="strict", exclude=CSRF_EXCLUDE)
        app_config.state.admin_session_hours = self.settings.admin_session_hours
        app_config.state.explorer_url = self.settings.explorer_url
        app_config.state.admin_url = self.settings.admin_url  # its origin may send forms
        return app_config


__all__ = ["AdminPlugin"]
