"""The CLI: every command with help and a handler, and card commands as clients of a live writer."""

from __future__ import annotations

import json

import pytest

from helpers import free_port, live_writer, run_cli

from writer.cli import COMMANDS, build_parser, subcommands


def test_every_command_has_help_and_a_handler():
    """(``tests/test_docs.py`` checks that ``docs/cli.md`` documents each command.)"""
    commands = subcommands(build_parser())
    assert set(commands) == set(COMMANDS)
    for name, sp in commands.items():
        assert COMMANDS[name].strip(), name
        assert sp.format_help().strip(), name


def test_every_command_line_reaches_a_handler():
    """Each command, and each subcommand of a command that has them, sets the handler ``main``
    runs (a command added without one would fail only when used)."""
    for name, sp in subcommands(build_parser()).items():
        nested = [a for a in sp._actions if a.__class__.__name__ == "_SubParsersAction"]
        leaves = [*nested[0].choices.values()] if nested else [sp]
        for leaf in leaves:
            assert callable(leaf.get_default("func")), (name, leaf.prog)


CARD = {"family": "sql_rule", "title": "Weeks start on Monday",
        "content": {"rule": "Use ISO weeks: weeks start on Monday."}}


async def _create(capsys, data) -> str:
    """``memarc create`` of :data:`CARD` (through the file ``data``); returns the card id."""
    data.write_text(json.dumps(CARD))
    code, created, _ = await run_cli(capsys, "create", "--workspace", "acme", "--data", str(data))
    assert code == 0 and created["index_status"] == "pending"
    return created["card"]["id"]


async def test_cli_creates_lists_and_recalls_a_card(make_env, tmp_path, monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch) as env:
        cid = await _create(capsys, tmp_path / "card.json")
        code, listed, _ = await run_cli(capsys, "list", "--workspace", "acme", "--q", "monday")
        assert code == 0 and [c["id"] for c in listed["cards"]] == [cid]
        # the text, not the JSON: "rule" is only the content's key
        code, listed, _ = await run_cli(capsys, "list", "--workspace", "acme", "--q", "rule")
        assert code == 0 and listed["cards"] == []
        code, pending, _ = await run_cli(capsys, "pending", "--workspace", "acme")
        assert code == 0 and pending["total"] == 1
        await env.drain()
        code, found, _ = await run_cli(capsys, "rules", "--workspace", "acme",
                                       "which day does a week start")
        assert code == 0 and [r["card"]["id"] for r in found["results"]] == [cid]
        assert found["expansion"] == {"truncated": False, "lookups": 0, "links_inspected": 0,
                                      "budgets": []}  # a card without links (issue 16)
        code, found, _ = await run_cli(capsys, "solved-search", "--workspace", "acme", "week start")
        assert code == 0 and found["results"] == []


async def test_cli_gives_feedback_on_a_recall_and_reads_it_back(make_env, tmp_path, monkeypatch,
                                                                capsys):
    async with live_writer(make_env, monkeypatch) as env:
        cid = await _create(capsys, tmp_path / "card.json")
        await env.drain()
        code, found, _ = await run_cli(capsys, "rules", "--workspace", "acme",
                                       "which day does a week start")
        recall_id = found["recall_id"]
        code, out, _ = await run_cli(capsys, "feedback", "--workspace", "acme", recall_id, cid,
                                     "--wrong", "--note", "weeks start on Sunday here")
        assert code == 0, out
        assert [(c["card_id"], c["verdict"], c["note"], c["change"]) for c in out["cards"]] == [
            (cid, "wrong", "weeks start on Sunday here", "created")]
        code, record, _ = await run_cli(capsys, "recalls", "--workspace", "acme", recall_id)
        assert code == 0 and record["results"][0]["card_id"] == cid
        assert [f["verdict"] for f in record["results"][0]["feedback"]] == ["wrong"]
        code, page, _ = await run_cli(capsys, "recalls", "--workspace", "acme", "--mode", "rules")
        assert code == 0 and [r["recall_id"] for r in page["recalls"]] == [recall_id]
        # a card the recall did not return: the API's 422, exit 2, nothing stored
        code, out, err = await run_cli(capsys, "feedback", "--workspace", "acme", recall_id,
                                       "mem-00000000-0000-0000-0000-000000000000", "--helpful")
        assert code == 2 and out is None and json.loads(err)["code"] == "invalid_input"


FAMILIES = "domain_clarification, explained_error, solved_question, sql_rule"


async def test_an_enum_error_names_the_allowed_values_in_the_api_and_the_cli(
        make_env, monkeypatch, capsys):
    """``Invalid enum value`` from a query parameter, a body field or a nested body item: the
    problem's detail and its error say what is allowed; the CLI prints that problem."""
    async with live_writer(make_env, monkeypatch) as env:
        h = env.token("acme")
        base = "/api/workspaces/acme/memory"
        for method, url, kwargs, key in (
                ("get", base, {"params": {"origin": "hand"}}, "origin"),
                ("get", f"{base}/export", {"params": {"family": "rules"}}, "family"),
                ("post", f"{base}/search", {"json": {"query": "x", "family": ["rules"]}}, "family[0]"),
                ("post", base, {"json": {"family": "rules", "title": "t", "content": {}}}, "family")):
            r = await getattr(env.client, method)(url, headers=h, **kwargs)
            allowed = "import, manual, workflow" if key == "origin" else FAMILIES
            assert r.status_code == 400, r.text
            assert r.json()["detail"].endswith(f"; allowed: {allowed}"), r.text
            assert r.json()["detail"].startswith(f"{key}: Invalid enum value"), r.text
            assert r.json()["errors"][0]["message"].endswith(f"; allowed: {allowed}")
        for argv in (("list", "--workspace", "acme", "--family", "rules"),
                     ("search", "--workspace", "acme", "x", "--family", "rules")):
            code, out, err = await run_cli(capsys, *argv)
            assert code == 2 and out is None
            assert json.loads(err)["detail"].endswith(f"Invalid enum value 'rules'; allowed: {FAMILIES}")


async def test_cli_updates_from_a_file_and_from_edited_show_output(
        make_env, tmp_path, monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch):
        data = tmp_path / "card.json"
        cid = await _create(capsys, data)
        data.write_text(json.dumps({"family": "sql_rule", "title": "Weeks start on Sunday",
                                    "content": {"rule": "US weeks start on Sunday."},
                                    "revision": 1}))
        code, updated, _ = await run_cli(capsys, "update", "--workspace", "acme", cid,
                                         "--data", str(data))
        assert code == 0 and updated["card"]["revision"] == 2
        code, _, err = await run_cli(capsys, "update", "--workspace", "acme", cid,
                                     "--data", str(data))
        assert code == 2 and json.loads(err)["code"] == "stale_revision"
        # `memarc show` output, edited, is a valid update file (read-only fields are dropped)
        code, shown, _ = await run_cli(capsys, "show", "--workspace", "acme", cid)
        shown["card"]["title"] = "Weeks start on Sunday (US)"
        data.write_text(json.dumps(shown))
        code, updated, _ = await run_cli(capsys, "update", "--workspace", "acme", cid,
                                         "--data", str(data))
        assert code == 0 and updated["card"]["revision"] == 3, updated
        assert updated["card"]["title"] == "Weeks start on Sunday (US)"
        data.write_text(json.dumps({**shown["card"], "revision": 3, "colour": "red"}))
        code, _, err = await run_cli(capsys, "update", "--workspace", "acme", cid,
                                     "--data", str(data))
        assert code == 2 and "colour" in err  # a typo is still named by the API


async def test_cli_deletes_only_with_confirmation(make_env, tmp_path, monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch):
        cid = await _create(capsys, tmp_path / "card.json")
        code, _, err = await run_cli(capsys, "delete", "--workspace", "acme", cid)
        assert code == 2 and json.loads(err)["code"] == "confirmation_required"
        code, deleted, _ = await run_cli(capsys, "delete", "--workspace", "acme", cid, "--yes")
        assert code == 0 and deleted["deleted"] == cid
        code, _, err = await run_cli(capsys, "show", "--workspace", "acme", cid)
        assert code == 2 and json.loads(err)["code"] == "not_found"


async def test_cli_without_a_reachable_writer_exits_4(make_env, monkeypatch, capsys):
    async with live_writer(make_env, monkeypatch):
        monkeypatch.setenv("MEMARC_URL", f"http://127.0.0.1:{free_port()}")
        code, _, err = await run_cli(capsys, "list", "--workspace", "acme")
        assert code == 4 and json.loads(err)["code"] == "writer_unreachable"
        # a URL that names no writer is a configuration error (2), not an unreachable one
        for bad in ("notaurl", "ftp://127.0.0.1:8000", "http://"):
            monkeypatch.setenv("MEMARC_URL", bad)
            code, _, err = await run_cli(capsys, "list", "--workspace", "acme")
            assert code == 2 and json.loads(err)["code"] == "bad_url", (bad, err)


def test_an_unknown_argument_prints_the_commands_usage(capsys):
    from writer.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["list", "--workspace", "acme", "--bogus"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: memarc list ") and "unrecognized arguments: --bogus" in err


async def test_cli_token_create_splits_the_reviewer_gate_and_warns_about_both(
        make_env, monkeypatch, capsys):
    """``memarc token create``: memory.propose and memory.review are separate choices; a token
    holding both is created when asked for (an administrator's choice), with a warning; the
    proposing token proposes and cannot review, through the API."""
    async with live_writer(make_env, monkeypatch) as env:
        monkeypatch.setenv("MEMARC_MIGRATOR_DATABASE_URL", env.migrator_url)
        create = ("token", "create", "--workspace", "acme")
        code, agent, _ = await run_cli(capsys, *create, "--permission", "memory.propose")
        assert code == 0 and agent["permissions"] == ["memory.propose"] and "warning" not in agent
        code, both, _ = await run_cli(capsys, *create, "--permission", "memory.review",
                                      "--permission", "memory.propose")
        assert code == 0 and both["permissions"] == ["memory.propose", "memory.review"]
        assert "apply its own proposals" in both["warning"]
        session = "/api/workspaces/acme/sessions/s"
        proposal = {"key": "k", "decisions": [{"id": "d", "status": "approved"}],
                    "family": "sql_rule", "title": "Net revenue",
                    "content": {"rule": "Exclude refunds from revenue."}}
        for token, review_status in ((agent, 403), (both, 200)):
            h = {"Authorization": f"Bearer {token['token']}"}
            r = await env.client.post(f"{session}-{review_status}/proposals", headers=h,
                                      json={"proposals": [proposal]})
            assert r.status_code == 201, r.text
            r = await env.client.post(f"{session}-{review_status}/review", headers=h,
                                      json={"review_id": f"rv-{review_status}",
                                            "selected": [{"key": "k"}]})
            assert r.status_code == review_status, r.text
