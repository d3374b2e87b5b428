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


@hookimpl
def register_routes(datasette):
    return views.ROUTES


@hookimpl
def permission_allowed(datasette, actor, action, resource):
    if action == access.VIEW_WORKSPACE:
        return access.grants(datasette, actor, resource)
    return None


@hookimpl
def handle_exception(datasette, request, exception):
    if isinstance(exception, ArchiveError):
        return views.error_response(datasette, request, exception)
    return None


@hookimpl
def menu_links(datasette, actor, request):
    if actor:
        return [{"href": datasette.urls.path("/-/memory"), "label": "Memory archive"}]
    return None
