"""Datasette plugin: a read-only explorer of the memory archive (DESIGN §10).

Only hook implementations live here; pages are in :mod:`explorer_plugin.views`, permission rules
in :mod:`explorer_plugin.access`, settings in :mod:`explorer_plugin.config`, connections in
:mod:`explorer_plugin.resources`, templates in ``templates/``.
"""

from __future__ import annotations

from datasette import hookimpl

from shared.errors import ArchiveError

from . import access, config, views


@hookimpl
def startup(datasette):
    # Fail fast on a malformed plugin configuration (read here, never at import time).
    config.load(datasette)
    # Datasette 0.65 calls every handle_exception hook for every exception, its own fallback
    # included, and that fallback prints a traceback for each 4xx (with locals when `rich` is
    # importable, which Litestar makes it; outside an except block it then crashes into a 500).
    # Our hook answers every exception itself, so the fallback is retired.
    from datasette.plugins import pm

    if pm.get_plugin("datasette.handle_exception") is not None:
        pm.set_blocked("datasette.handle_exception")


@hookimpl
def permission_allowed(datasette, actor, action, resource):
    if action == access.VIEW_WORKSPACE:
        return access.grants(datasette, actor, resource)
    return None


@hookimpl
def handle_exception(datasette, request, exception):
    # Archive errors and Datasette's own 4xx (unknown URL, forbidden, bad request) get an error
    # page here: Datasette 0.65's fallback handler prints a rich traceback for every exception
    # when `rich` is installed (Litestar brings it), and fails outright outside an except block.
    if isinstance(exception, ArchiveError):
        return views.error_response(datasette, request, exception)
    from datasette.utils.asgi import Base400

    if isinstance(exception, Base400):
        return views.http_error_response(datasette, request, exception)
    return views.internal_error_response(datasette, request, exception)


@hookimpl
def register_routes(datasette):
    return views.ROUTES


@hookimpl
def menu_links(datasette, actor, request):
    if actor:
        return [{"href": datasette.urls.path("/-/memory"), "label": "Memory archive"}]
    return None
