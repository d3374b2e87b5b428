"""The API reference page at ``/schema`` (issue 26), complete without the internet.

Litestar's default OpenAPI pages (Redoc at ``/schema``, Swagger UI, Stoplight Elements, RapiDoc)
load their scripts, styles and favicon from a CDN, so on a machine without the internet they
stay blank. Here the writer serves Swagger UI itself: its files come from the
``swagger-ui-bundle-v2`` package (the Swagger UI distribution as a Python package, kept by the
Connexion maintainers; a runtime dependency) under :data:`ASSETS`, and Litestar's
:class:`~litestar.openapi.plugins.SwaggerRenderPlugin` points at them. Swagger UI 5 reads the
OpenAPI 3.1 document Litestar produces.

What ``/schema`` serves (:func:`openapi_config`):

- ``/schema`` and ``/schema/swagger``: the Swagger UI page, the document embedded in it;
- ``/schema/openapi.json``, ``/schema/openapi.yaml`` (``.yml``): the document itself;
- ``/schema/assets/<file>``: Swagger UI's files (``swagger-ui-bundle.js``, ``swagger-ui.css``,
  ``swagger-ui-standalone-preset.js``, ``favicon-32x32.png``, ...).

The other pages Litestar offered (``/schema/redoc``, ``/schema/elements``, ``/schema/rapidoc``)
are gone: they needed the CDN; any other ``/schema/...`` path answers Litestar's 404 page.
"""

from __future__ import annotations

from pathlib import Path

from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin, YamlRenderPlugin
from litestar.openapi.spec import Components
from litestar.router import Router
from litestar.static_files import create_static_files_router
from swagger_ui_bundle import swagger_ui_path

#: where the OpenAPI documents and the page are served
SCHEMA_PATH = "/schema"
#: where Swagger UI's own files are served (by :func:`assets_router`)
ASSETS = f"{SCHEMA_PATH}/assets"
#: the installed Swagger UI distribution (``swagger-ui-bundle-v2``)
SWAGGER_UI_DIR = Path(str(swagger_ui_path))


def swagger_page() -> SwaggerRenderPlugin:
    """Litestar's Swagger UI page at ``/schema`` and ``/schema/swagger``, its script, styles
    and favicon from :data:`ASSETS` instead of a CDN."""
    return SwaggerRenderPlugin(
        path=["/", "/swagger"],
        js_url=f"{ASSETS}/swagger-ui-bundle.js",
        css_url=f"{ASSETS}/swagger-ui.css",
        standalone_preset_js_url=f"{ASSETS}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{ASSETS}/favicon-32x32.png'>")


def openapi_config(title: str, version: str, components: Components) -> OpenAPIConfig:
    """The writer's OpenAPI configuration: the document at ``/schema/openapi.json`` (and
    ``.yaml``), described by the handlers' docstrings, and :func:`swagger_page` as the page.
    ``components`` holds the security schemes."""
    return OpenAPIConfig(
        title=title, version=version, path=SCHEMA_PATH,
        use_handler_docstrings=True,  # the handlers' docstrings are the operations' descriptions
        components=components,
        render_plugins=[swagger_page(), JsonRenderPlugin(), YamlRenderPlugin()])


def assets_router() -> Router:
    """The static-files router serving :data:`SWAGGER_UI_DIR` at :data:`ASSETS` (not in the
    OpenAPI document); a file it does not hold answers 404."""
    return create_static_files_router(ASSETS, directories=[SWAGGER_UI_DIR],
                                      include_in_schema=False)
