"""The CLI's workflow binding (``writer.cli.binding``) and the writer API's routes
(``writer.cli.client``), pure: parsed arguments and the environment in, a context or a path out.
The commands that use them against a real writer are tested in ``tests/test_session_decisions.py``.
"""

from __future__ import annotations

import argparse

import pytest

from writer.cli.binding import bind_context, workflow_binding
from writer.cli.client import ApiClient, memory_path, session_path
from writer.cli.command import CliError


def _args(**values: str | None) -> argparse.Namespace:
    return argparse.Namespace(**values)


def test_the_binding_is_the_options_else_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMARC_WORKFLOW_DATABASE", "shop")
    monkeypatch.setenv("MEMARC_WORKFLOW_SCHEMA", "")
    assert workflow_binding(_args()) == ("shop", None)
    assert workflow_binding(_args(database="crm", schema="sales")) == ("crm", "sales")
    monkeypatch.delenv("MEMARC_WORKFLOW_DATABASE")
    with pytest.raises(CliError) as refused:
        workflow_binding(_args(schema="sales"))
    assert refused.value.payload["code"] == "bad_input"


def test_a_context_is_filled_inside_the_binding_and_refused_outside_it():
    binding = ("shop", "public")
    assert bind_context({}, binding, "f", fill_schema=True) == {"database": "shop",
                                                               "schema": "public"}
    assert bind_context({"table": "t"}, binding, "d", fill_schema=False) == {
        "table": "t", "database": "shop", "schema": "public"}
    # a dependency that names its database alone is database-wide: kept as written
    assert bind_context({"database": "shop"}, binding, "d", fill_schema=False) == {
        "database": "shop"}
    assert bind_context([1], binding, "f", fill_schema=True) == [1]
    assert bind_context({"table": "t"}, (None, None), "f", fill_schema=True) == {"table": "t"}
    with pytest.raises(CliError) as refused:
        bind_context({"schema": "other"}, binding, "--filters", fill_schema=True)
    assert refused.value.payload["code"] == "outside_binding"
    assert "--filters names schema 'other'" in refused.value.payload["error"]


def test_the_routes_of_a_workspace_and_a_session():
    assert memory_path("acme") == "/api/workspaces/acme/memory"
    assert session_path("acme", "s 1?") == "/api/workspaces/acme/sessions/s%201%3F"
    for bad in ("  ", "a/b"):
        with pytest.raises(CliError) as refused:
            session_path("acme", bad)
        assert refused.value.payload["code"] == "bad_input"


def test_the_client_needs_an_http_url_and_a_token(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MEMARC_URL", raising=False)
    monkeypatch.setenv("MEMARC_TOKEN", "t")
    api = ApiClient()
    assert (api.url, api.headers) == ("http://127.0.0.1:8000", {"Authorization": "Bearer t"})
    assert ApiClient("https://w.example:8443/").url == "https://w.example:8443"
    for url, token, code in (("ftp://w", "t", "bad_url"), ("http://", "t", "bad_url"),
                             ("http://w", "", "no_token")):
        monkeypatch.setenv("MEMARC_TOKEN", token)
        with pytest.raises(CliError) as refused:
            ApiClient(url)
        assert (refused.value.payload["code"], refused.value.status) == (code, 2)
