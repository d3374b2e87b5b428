"""One name per filter on the four surfaces (issue 26): the writer's HTTP API (its OpenAPI
document), the explorer (the parameters its forms submit), the CLI (its argparse options) and
MCP (the tools' input schemas). The card list and recall are compared separately, each surface
with its own controls (paging, sorting, the query text) set apart by name, so a filter that
appears under a second name on any surface fails here. Old names still accepted (the explorer's
``concept``, the CLI's ``--concept``) are aliases, neither shown nor documented.
"""

from __future__ import annotations

import re
from typing import Any

from test_explorer import explorer, get  # noqa: F401  (the fixture)

from explorer_plugin.params import ALIASES, LIST_PARAMETERS
from writer.cli import build_parser, subcommands
from writer.cli.api_commands import LIST_FILTERS as CLI_LIST_FILTERS
from writer.cli.api_commands import SEARCH_FILTERS as CLI_SEARCH_FILTERS
from writer.mcp_server import TOOLS_BY_NAME

#: the card list's filters, on the API, the explorer and the CLI (MCP has no card list)
LIST_FILTERS = {"q", "family", "origin", "concepts", "database", "schema", "table", "column",
                "updated_after", "updated_before"}
#: recall's filters, on all four surfaces
RECALL_FILTERS = {"family", "scope", "concepts", "database", "schema", "table", "column"}
#: the names of each surface that are not filters: paging, sorting, the query, the output
LIST_CONTROLS = {"api": {"sort", "desc", "page", "per_page"},
                 "explorer": {"_sort", "_sort_desc", "_size", "_page"},
                 "cli": {"workspace", "config", "json", "filters", "sort", "desc", "page", "per_page"}}
RECALL_CONTROLS = {"api": {"query", "top", "mode", "exclude", "session", "filters", "min_score"},
                   "explorer": {"q", "mode", "top"},
                   "cli": {"workspace", "config", "json", "query", "top", "exclude", "session",
                           "filters", "min_score"},
                   "mcp": {"query", "top", "exclude", "session", "filters", "min_score"}}


def _properties(schema: dict[str, Any], defs: dict[str, Any], name: str) -> set[str]:
    """The property names of ``schema``'s member ``name`` (a ``$ref``, possibly or-null)."""
    member = schema["properties"][name]
    choices = member.get("anyOf") or member.get("oneOf") or [member]
    ref = next(m["$ref"] for m in choices if "$ref" in m)
    return set(defs[ref.rsplit("/", 1)[1]]["properties"])


def _form_names(html: str, form_class: str) -> set[str]:
    """The ``name`` of every field of the page's form whose class includes ``form_class``."""
    form = re.search(rf'<form class="[^"]*\b{form_class}\b.*?</form>', html, re.S)
    assert form is not None, form_class
    return set(re.findall(r'<(?:input|select|textarea)[^>]*\bname="([^"]+)"', form.group(0)))


def _cli_names(command: str) -> set[str]:
    """The options of ``memarc command`` by their first long (documented) spelling, as a
    filter name (``--updated-after`` is ``updated_after``); each option's dest is that name."""
    names = set()
    for action in subcommands(build_parser())[command]._actions:
        if action.dest == "help":
            continue
        spelled = next((o for o in action.option_strings if o.startswith("--")), action.dest)
        name = spelled.lstrip("-").replace("-", "_")
        assert action.dest == name, (command, action.option_strings)
        names.add(name)
    return names


async def _api_names(env: Any) -> tuple[set[str], set[str]]:
    """(card list query parameters, recall body members with the filters' members) of the
    writer's OpenAPI document, without their controls."""
    spec = (await env.client.get("/schema/openapi.json")).json()
    memory = "/api/workspaces/{workspace_id}/memory"
    listed = {p["name"] for p in spec["paths"][memory]["get"]["parameters"] if p["in"] == "query"}
    body = spec["paths"][f"{memory}/search"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    defs = spec["components"]["schemas"]
    search = defs[body["$ref"].rsplit("/", 1)[1]]
    recall = set(search["properties"]) | _properties(search, defs, "filters")
    return listed - LIST_CONTROLS["api"], recall - RECALL_CONTROLS["api"]


def _mcp_names(tool: str) -> set[str]:
    schema = TOOLS_BY_NAME[tool].tool().input_schema
    names = set(schema["properties"]) | _properties(schema, schema["$defs"], "filters")
    return names - RECALL_CONTROLS["mcp"]


async def test_each_filter_has_one_name_on_the_api_the_explorer_the_cli_and_mcp(make_env, explorer):
    async with make_env() as env:
        env.workspace("acme")
        api_list, api_recall = await _api_names(env)
        ds = explorer(env, {"alice": ["acme"]})
        cards_page = (await get(ds, "/-/memory/acme")).text
        recall_page = (await get(ds, "/-/memory/acme/-/recall")).text
    explorer_list = _form_names(cards_page, "memarc-filters") - LIST_CONTROLS["explorer"]
    explorer_recall = _form_names(recall_page, "filters") - RECALL_CONTROLS["explorer"]
    cli_list = _cli_names("list") - LIST_CONTROLS["cli"]
    # the CLI's recall filters: its options, and the keys its --filters JSON object takes
    cli_recall = {name: (_cli_names(name) - RECALL_CONTROLS["cli"]) | set(CLI_SEARCH_FILTERS)
                  for name in ("search", "rules", "solved-search")}

    assert api_list == LIST_FILTERS
    assert explorer_list == LIST_FILTERS and set(LIST_PARAMETERS) == LIST_FILTERS
    assert cli_list == LIST_FILTERS
    assert set(CLI_LIST_FILTERS) - LIST_CONTROLS["cli"] == LIST_FILTERS  # list --filters' keys
    assert api_recall == RECALL_FILTERS
    assert explorer_recall == RECALL_FILTERS
    assert cli_recall["search"] == RECALL_FILTERS
    assert cli_recall["rules"] <= RECALL_FILTERS and cli_recall["solved-search"] <= RECALL_FILTERS
    for tool in ("search", "rules", "solved"):
        assert _mcp_names(tool) == RECALL_FILTERS, tool


async def test_the_old_concept_names_still_filter(make_env, explorer):
    """``concept`` (explorer card list and recall) and ``--concept`` (CLI list) are aliases of
    ``concepts``: accepted, and the same filter."""
    assert ALIASES == {"concept": "concepts"}
    parsed = build_parser().parse_args(["list", "--workspace", "acme", "--concept", "loan",
                                        "--concepts", "debt"])
    assert parsed.concepts == ["loan", "debt"]
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        for concepts in (["loan"], ["loan", "debt"]):
            r = await env.client.post("/api/workspaces/acme/memory", headers=h, json={
                "family": "domain_clarification", "title": f"Card on {concepts}",
                "content": {"definition": "x"}, "concepts": concepts})
            assert r.status_code == 201, r.text
        ds = explorer(env, {"alice": ["acme"]})
        for query in ("concepts=debt", "concept=debt"):
            r = await get(ds, f"/-/memory/acme?{query}")
            assert r.status_code == 200 and "1 card where concepts include debt" in r.text, query
        r = await get(ds, "/-/memory/acme/-/recall?q=card&concept=debt,loan")
        assert r.status_code == 200 and 'name="concepts" value="debt, loan"' in r.text
