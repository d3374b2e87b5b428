"""The founding specification's command lines (issue 26), each run exactly as written against a
live writer, with real runtime files and protected requests; and the runtime file's errors."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from helpers import free_port, live_writer, run_cli

from writer.cli import build_parser, leaf_parsers

#: The specification's lines, as the issue quotes them (``memarc`` is our command's name).
SPEC_LINES = """
memarc list --filters '{"family":"sql_rule","page":1}' -c <runtime.yaml>
memarc show <card-id> -c <runtime.yaml>
memarc create --data <card.json> -c <runtime.yaml>
memarc update <card-id> --data <card.json> -c <runtime.yaml>
memarc delete <card-id> --yes -c <runtime.yaml>
memarc pending -c <runtime.yaml>
memarc retry <card-id> -c <runtime.yaml>
memarc index -c <runtime.yaml>
memarc search "<question>" --session <id> --json -c <runtime.yaml>
memarc search "<question>" --filters '{"table":"orders","column":"id","scope":"Sales"}' --json -c <runtime.yaml>
memarc solved-search "<question>" --json -c <runtime.yaml>
memarc rules "<question>" --session <id> --json -c <runtime.yaml>
memarc propose --session <id> --data <proposals.json> -c <runtime.yaml>
memarc summary --session <id> --json -c <runtime.yaml>
memarc solved-index <session-id> --json -c <runtime.yaml>
memarc admin --workspace <id> -c <protected-request.json>
""".strip().splitlines()


def spec(n: int, **values: str) -> list[str]:
    """The arguments of line ``n`` (1-based) of :data:`SPEC_LINES`, each ``<placeholder>``
    replaced, as one shell word, by ``values[name]`` (``name``: the placeholder with ``-`` and
    ``.`` as ``_``, e.g. ``card_json`` for ``<card.json>``); each must be given."""
    def value(m: re.Match) -> str:
        return shlex.quote(values[re.sub(r"[-.]", "_", m.group(1))])

    argv = shlex.split(re.sub(r"<([^>]+)>", value, SPEC_LINES[n - 1]))
    assert argv[0] == "memarc"
    return argv[1:]


async def cli(capsys, argv: list[str]) -> tuple[int, object, dict]:
    """``memarc argv``: (exit code, stdout as JSON, the error on stderr as JSON or {})."""
    code, out, err = await run_cli(capsys, *argv)
    return code, out, json.loads(err) if err.startswith("{") else {}


def write(path: Path, document: object) -> str:
    """Write ``document`` as JSON (YAML for a ``.yaml`` name) to ``path``; returns its path."""
    if path.suffix == ".yaml":
        import yaml

        path.write_text(yaml.safe_dump(document))
    else:
        path.write_text(json.dumps(document))
    return str(path)


def runtime_file(tmp_path: Path, monkeypatch, name: str = "runtime.yaml", **extra: str) -> str:
    """A runtime file naming the writer and the token (as a token file) that ``live_writer``
    put in the environment, and workspace ``acme`` (``extra`` adds or replaces keys); the
    environment's ``MEMARC_URL`` and ``MEMARC_TOKEN`` are then removed, so only the file says
    where and who."""
    import os

    (tmp_path / f"{name}.token").write_text(extra.pop("token", None)
                                            or os.environ["MEMARC_TOKEN"] + "\n")
    config = {"url": os.environ["MEMARC_URL"], "token_file": f"{name}.token",
              "workspace": "acme", **extra}
    monkeypatch.delenv("MEMARC_URL")
    monkeypatch.delenv("MEMARC_TOKEN")
    return write(tmp_path / name, config)


def test_every_spec_line_parses_and_every_command_takes_json():
    parser = build_parser()
    for n in range(1, len(SPEC_LINES) + 1):
        line = SPEC_LINES[n - 1].replace("<", "").replace(">", "")
        args = parser.parse_args(shlex.split(line)[1:])
        assert callable(args.func), SPEC_LINES[n - 1]
    for leaf in leaf_parsers(parser):
        assert any("--json" in a.option_strings for a in leaf._actions), leaf.prog


RULE = {"family": "sql_rule", "title": "Weeks start on Monday",
        "content": {"rule": "Use ISO weeks: weeks start on Monday."}}
TERM = {"family": "domain_clarification", "title": "Active customer",
        "content": {"definition": "A customer with an order in the last 90 days."}}


async def test_the_card_lines_run_as_written_with_a_runtime_file(make_env, tmp_path, monkeypatch,
                                                                 capsys):
    async with live_writer(make_env, monkeypatch) as env:
        rt = runtime_file(tmp_path, monkeypatch)
        card = tmp_path / "card.json"
        ids = {}
        for doc in (RULE, TERM):
            argv = spec(3, card_json=write(card, doc), runtime_yaml=rt)
            code, out, err = await cli(capsys, argv)
            assert code == 0 and out["index_status"] == "pending", err
            ids[doc["family"]] = out["card"]["id"]
        cid = ids["sql_rule"]
        code, out, err = await cli(capsys, spec(1, runtime_yaml=rt))
        assert code == 0 and [c["id"] for c in out["cards"]] == [cid], err
        assert out["page"] == 1
        code, out, _ = await cli(capsys, spec(6, runtime_yaml=rt))
        assert code == 0 and out["total"] == 2
        code, out, _ = await cli(capsys, spec(2, card_id=cid, runtime_yaml=rt))
        assert code == 0 and out["card"]["title"] == RULE["title"]
        write(card, {**RULE, "title": "Weeks start on Sunday", "revision": 1})
        code, out, err = await cli(capsys, spec(4, card_id=cid, card_json=str(card),
                                                runtime_yaml=rt))
        assert code == 0 and out["card"]["revision"] == 2, err
        code, out, err = await cli(capsys, spec(7, card_id=cid, runtime_yaml=rt))
        assert code == 0 and cid in json.dumps(out), err
        async with env.running_worker():
            code, out, err = await cli(capsys, spec(8, runtime_yaml=rt))
        assert code == 0 and out["status"] == "done" and out["total"] == 2, (out, err)
        code, out, _ = await cli(capsys, spec(6, runtime_yaml=rt))
        assert code == 0 and out["total"] == 0  # the rebuild projected both cards
        code, out, err = await cli(capsys, spec(5, card_id=cid, runtime_yaml=rt))
        assert code == 0 and out["deleted"] == cid, err
        code, _, err = await cli(capsys, spec(2, card_id=cid, runtime_yaml=rt))
        assert code == 2 and err["code"] == "not_found"


async def test_flags_win_over_the_file_and_the_file_over_the_environment(
        make_env, tmp_path, monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch) as env:
        env.workspace("beta")
        rt = runtime_file(tmp_path, monkeypatch, workspace="beta")
        # the file's workspace (beta) is not the token's: the API refuses it
        code, _, err = await cli(capsys, ["list", "-c", rt])
        assert code == 2 and err["code"] in ("forbidden", "not_found"), err
        # --workspace wins over the file
        code, out, err = await cli(capsys, ["list", "--workspace", "acme", "-c", rt])
        assert code == 0 and out["cards"] == [], err
        # the environment's workspace and URL lose to the file's
        monkeypatch.setenv("MEMARC_WORKSPACE", "acme")
        monkeypatch.setenv("MEMARC_URL", f"http://127.0.0.1:{free_port()}")
        code, _, err = await cli(capsys, ["list", "-c", rt])
        assert code == 2 and err["code"] in ("forbidden", "not_found"), err
        # without a file, the environment's: its unreachable URL, then no token at all
        code, _, err = await cli(capsys, ["list"])
        assert code == 2 and err["code"] == "no_token"
        monkeypatch.setenv("MEMARC_TOKEN", "x")
        code, _, err = await cli(capsys, ["list"])
        assert code == 4 and err["code"] == "writer_unreachable"


@pytest.mark.parametrize("content, problem", [
    (None, "cannot be read"),
    ("url: [unclosed", "cannot be read"),
    ("- a list", "must be a mapping"),
    ("workspace: acme\nwrkspace: acme\n", "unknown key(s) wrkspace"),
    ("workspace: 12\n", "workspace must be a non-empty string"),
    ("workspace: ''\n", "workspace must be a non-empty string"),
    ("token: t\ntoken_file: t.txt\n", "not both"),
    ("token_file: missing.txt\n", "cannot be read"),
])
def test_a_runtime_file_that_cannot_be_used_exits_2_naming_why(tmp_path, capsys, content,
                                                                problem):
    from writer.cli import main

    path = tmp_path / "runtime.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["list", "-c", str(path)]) == 2
    err = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert err["code"] == "bad_config" and problem in err["error"], err
    assert err["allowed_keys"] == sorted(["url", "token", "token_file", "workspace", "database",
                                          "schema"])


def test_a_command_without_a_workspace_says_where_to_name_one(monkeypatch, capsys):
    from writer.cli import main

    monkeypatch.delenv("MEMARC_WORKSPACE", raising=False)
    assert main(["pending"]) == 2
    err = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert err["code"] == "no_workspace" and "MEMARC_WORKSPACE" in err["error"]


@pytest.mark.parametrize("argv, allowed", [
    (["list", "--workspace", "acme", "--filters", '{"famly": "sql_rule"}'], "per_page"),
    (["search", "--workspace", "acme", "q", "--filters", '{"tabel": "orders"}'], "scope"),
])
def test_an_unknown_filter_is_an_error_listing_the_allowed_ones(capsys, argv, allowed):
    from writer.cli import main

    assert main(argv) == 2
    err = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert err["code"] == "bad_input" and allowed in err["allowed"], err
    assert "unknown filter(s)" in err["error"] and allowed in err["error"]


def test_the_list_filters_are_the_list_apis_query_parameters():
    """``list --filters`` takes exactly the list route's query parameters, and ``search
    --filters`` exactly the recall body's ``filters`` fields (from the OpenAPI document)."""
    from shared.config import load_settings
    from writer.app import create_app
    from writer.cli.api_commands import LIST_FILTERS, SEARCH_FILTERS

    schema = create_app(load_settings({})).openapi_schema.to_schema()
    route = schema["paths"]["/api/workspaces/{workspace_id}/memory"]["get"]
    assert sorted(LIST_FILTERS) == sorted(p["name"] for p in route["parameters"]
                                          if p["in"] == "query")
    assert sorted(SEARCH_FILTERS) == sorted(schema["components"]["schemas"]["Filters"]
                                            ["properties"])


async def test_the_workflow_lines_run_as_written_inside_the_files_binding(
        make_env, tmp_path, monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch) as env:
        manage = env.token("acme")
        orders = {"family": "sql_rule", "title": "Count orders by id", "scope": "Sales",
                  "content": {"rule": "Count orders with COUNT(DISTINCT orders.id)."},
                  "dependencies": [{"database": "shop", "schema": "public", "table": "orders",
                                    "column": "id"}]}
        other = {**orders, "scope": "Finance", "title": "Count invoices by id",
                 "content": {"rule": "Count invoices with COUNT(DISTINCT orders.id)."}}
        solved = {"family": "solved_question", "title": "How many orders?",
                  "content": {"question": "How many orders are there?",
                              "sql": "SELECT COUNT(*) FROM orders"}}
        ids = []
        for card in (orders, other, solved):
            r = await env.client.post("/api/workspaces/acme/memory", json=card, headers=manage)
            assert r.status_code == 201, r.text
            ids.append(r.json()["card"]["id"])
        await env.drain()
        token = env.token("acme", "memory.read", "memory.propose", "memory.review")
        rt = runtime_file(tmp_path, monkeypatch, token=token["Authorization"].split()[1],
                          database="shop", schema="public")
        question = "count the orders"
        r = await env.client.post("/api/workspaces/acme/sessions/s1/decisions", headers=token,
                                  json={"decisions": [{"card_id": ids[1],
                                                       "decision": "rejected"}]})
        assert r.status_code in (200, 201), r.text
        code, out, err = await cli(capsys, spec(9, question=question, id="s1", runtime_yaml=rt))
        found = [x["card"]["id"] for x in out["results"]]
        assert code == 0 and ids[0] in found and ids[1] not in found, (out, err)
        code, out, err = await cli(capsys, spec(10, question=question, runtime_yaml=rt))
        assert code == 0 and [x["card"]["id"] for x in out["results"]] == [ids[0]], (out, err)
        code, out, err = await cli(capsys, spec(12, question=question, id="s1", runtime_yaml=rt))
        found = [x["card"]["id"] for x in out["results"]]
        assert code == 0 and ids[0] in found and ids[1] not in found, (out, err)
        code, out, err = await cli(capsys, spec(11, question="how many orders", runtime_yaml=rt))
        assert code == 0 and [x["card"]["id"] for x in out["results"]][:1] == [ids[2]], err
        # the file's binding is one filters cannot override
        bad = ["search", question, "--filters", '{"database": "crm"}', "-c", rt]
        code, _, err = await cli(capsys, bad)
        assert code == 2 and err["code"] == "outside_binding" and "-c file" in err["error"]
        proposals = write(tmp_path / "proposals.json", [{
            "key": "k1", "decisions": [{"id": "d1", "status": "approved"}],
            "family": "sql_rule", "title": "Net revenue",
            "content": {"rule": "Exclude refunds from revenue."},
            "dependencies": [{"table": "payments"}]}])  # the binding fills database, schema
        code, out, err = await cli(capsys, spec(13, id="s2", proposals_json=proposals,
                                                runtime_yaml=rt))
        assert code == 0, err
        code, out, err = await cli(capsys, spec(14, id="s2", runtime_yaml=rt))
        assert code == 0 and "Net revenue" in json.dumps(out), err
        review = write(tmp_path / "review.json", {"review_id": "rv-1", "selected": [{"key": "k1"}]})
        code, out, err = await cli(capsys, ["review-apply", "--session", "s2", "--data", review,
                                            "-c", rt])
        assert code == 0, err
        promoted = json.dumps(out)
        code, out, err = await cli(capsys, spec(15, session_id="s2", runtime_yaml=rt))
        assert code == 0 and out["cards"] and out["cards"][0]["card_id"] in promoted, (out, err)
        code, _, err = await cli(capsys, spec(15, session_id="nothing-reviewed", runtime_yaml=rt))
        assert code == 2 and err["code"] == "not_found"
        # the older flag form still works
        code, out, err = await cli(capsys, ["solved-index", "--session", "s2", "-c", rt])
        assert code == 0, err


async def test_admin_runs_a_protected_request_with_its_principal(make_env, tmp_path, monkeypatch,
                                                                 capsys):
    async with live_writer(make_env, monkeypatch) as env:
        env.workspace("beta")
        manage = tmp_path / "manage.token"
        manage.write_text(env.token("acme")["Authorization"].split()[1])
        monkeypatch.delenv("MEMARC_TOKEN")  # the request's principal, nothing else

        async def admin(request: dict, workspace: str = "acme") -> tuple[int, object, dict]:
            path = write(tmp_path / "protected-request.json", request)
            return await cli(capsys, spec(16, id=workspace, protected_request_json=path))

        principal = {"token_file": "manage.token"}
        code, out, err = await admin({"operation": "create", "principal": principal,
                                      "data": RULE})
        assert code == 0 and out["index_status"] == "pending", err
        cid = out["card"]["id"]
        code, out, err = await admin({"operation": "list", "principal": principal,
                                      "filters": {"family": ["sql_rule"], "q": "monday"}})
        assert code == 0 and [c["id"] for c in out["cards"]] == [cid], err
        code, out, _ = await admin({"operation": "show", "principal": principal,
                                    "card_id": cid})
        assert code == 0 and out["card"]["title"] == RULE["title"]
        code, out, err = await admin({"operation": "update", "principal": principal,
                                      "card_id": cid, "data": {**out, "card": {
                                          **out["card"], "title": "ISO weeks"}}})
        assert code == 0 and out["card"]["revision"] == 2, err
        code, out, _ = await admin({"operation": "pending", "principal": principal, "limit": 1})
        assert code == 0 and out["total"] == 2 and len(out["operations"]) == 1  # create, update
        assert out["operations"][0]["card_id"] == cid
        code, out, _ = await admin({"operation": "retry", "principal": principal, "card_id": cid})
        assert code == 0
        code, out, _ = await admin({"operation": "index", "principal": principal})
        assert code == 0 and out["status"] in ("queued", "running")
        code, out, err = await admin({"operation": "activity", "principal": principal,
                                      "filters": {"card_id": cid, "verb": "update"}})
        assert code == 0 and [a["verb"] for a in out["activity"]] == ["update"], out
        # the principal decides, not the document: a read token cannot delete, nor act on beta
        reader = {"token": env.token("acme", "memory.read")["Authorization"].split()[1]}
        code, _, err = await admin({"operation": "delete", "principal": reader, "card_id": cid})
        assert code == 2 and err["code"] == "forbidden", err
        code, _, err = await admin({"operation": "list", "principal": principal}, "beta")
        assert code == 2 and err["code"] in ("forbidden", "not_found"), err
        code, _, err = await admin({"operation": "list"})
        assert code == 2 and err["code"] == "no_token"
        code, out, err = await admin({"operation": "delete", "principal": principal,
                                      "card_id": cid})
        assert code == 0 and out["deleted"] == cid, err


@pytest.mark.parametrize("request_doc, problem", [
    ({"operation": "drop"}, "operation must be one of list, show, create"),
    ({"operation": "show"}, "missing: card_id"),
    ({"operation": "list", "card_id": "mem-x"}, "unknown: card_id"),
    ({"operation": "list", "url": "http://elsewhere:8000"}, "unknown: url"),
    ({"operation": "show", "card_id": "../x"}, "card_id must be a card id"),
    ({"operation": "list", "principal": {"user": "root"}}, "principal must be"),
    ({"operation": "list", "principal": {"token_file": "nope"}}, "cannot be read"),
    (["list"], "must be a JSON object"),
])
def test_a_protected_request_that_cannot_be_run_exits_2(tmp_path, capsys, request_doc, problem):
    from writer.cli import main

    path = write(tmp_path / "request.json", request_doc)
    assert main(["admin", "--workspace", "acme", "-c", path]) == 2
    err = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert err["code"] == "bad_request_document" and problem in err["error"], err

