"""Datasette plugin: a read-only explorer of the memory archive; its hook implementations only.

Pages and routes are in :mod:`explorer_plugin.views`; beside them :mod:`~explorer_plugin.params`
(query strings), :mod:`~explorer_plugin.urls` (links), :mod:`~explorer_plugin.paging`,
:mod:`~explorer_plugin.export` (JSON / CSV), :mod:`~explorer_plugin.render` (HTML),
:mod:`~explorer_plugin.errors` (the error page), :mod:`~explorer_plugin.access` (permissions),
:mod:`~explorer_plugin.config` (settings), :mod:`~explorer_plugin.resources` (connections);
templates in ``templates/``.
"""

from __future__ import annotations

from datasette import Forbidden, hookimpl

from . import access, config, errors, sign_in, views


@hookimpl
def startup(datasette):
    # Fail fast on a malformed plugin configuration (read here, never at import time).
    config.load(datasette)
    errors.retire_datasette_handler()


@hookimpl
def permission_allowed(datasette, actor, action, resource):
    if action == access.VIEW_WORKSPACE:
        return access.grants(datasette, actor, resource)
    return None


@hookimpl
def handle_exception(datasette, request, exception):
    # Every exception gets the explorer's error page (Datasette's fallback is retired at start-up).
    return errors.error_response(datasette, request, exception)


@hookimpl
def forbidden(datasette, request, message):
    # Datasette's used or wrong root link: the explorer's page, with the command for a new link.
    if request.path in sign_in.SIGN_IN_PATHS:
        return errors.error_response(datasette, request, Forbidden(message))
    return None


@hookimpl
def register_routes(datasette):
    return views.ROUTES


@hookimpl
def menu_links(datasette, actor, request):
    if actor:
        return [{"href": datasette.urls.path("/-/memory"), "label": "Memory archive"}]
    return None
