"""The CLI: every command documented, and card commands as clients of a live writer."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from conftest import free_port, start_server, stop_server

from writer.app import create_app
from writer.cli import COMMANDS, build_parser, main, subcommands

ROOT = Path(__file__).resolve().parents[1]


def readme_cli_section() -> str:
    """The README's CLI section: from its "## CLI" heading to the next heading of that level."""
    readme = (ROOT / "README.md").read_text()
    return readme.split("\n## CLI", 1)[1].split("\n## ", 1)[0]


def test_every_command_has_help_a_handler_and_a_readme_entry():
    commands = subcommands(build_parser())
    assert set(commands) == set(COMMANDS)
    section = readme_cli_section()
    for name, sp in commands.items():
        assert COMMANDS[name].strip(), name
        assert sp.format_help().strip(), name
        assert re.search(rf"`memarc {re.escape(name)}\b", section), \
            f"the README's CLI section lacks `memarc {name}`"


def test_every_command_line_reaches_a_handler():
    """Each command, and each subcommand of a command that has them, sets the handler ``main``
    runs (a command added without one would fail only when used)."""
    for name, sp in subcommands(build_parser()).items():
        nested = [a for a in sp._actions if a.__class__.__name__ == "_SubParsersAction"]
        leaves = [*nested[0].choices.values()] if nested else [sp]
        for leaf in leaves:
            assert callable(leaf.get_default("func")), (name, leaf.prog)



async def test_card_commands_against_a_live_writer(make_env, tmp_path, monkeypatch, capsys):
    async with make_env() as env:
        env.workspace("acme")
        token = env.token("acme", "memory.manage")["Authorization"].split()[1]
        server, task, url = await start_server(create_app(env.settings, env.resources))
        monkeypatch.setenv("MEMARC_URL", url)
        monkeypatch.setenv("MEMARC_TOKEN", token)

        async def cli(*argv: str) -> tuple[int, dict | None, str]:
            capsys.readouterr()
            code = await asyncio.to_thread(main, list(argv))
            out = capsys.readouterr()
            return code, (json.loads(out.out) if out.out.strip() else None), (out.err.strip().splitlines() or [""])[-1]

        try:
            data = tmp_path / "card.json"
            data.write_text(json.dumps({"family": "sql_rule", "title": "Weeks start on Monday",
                                        "content": {"rule": "Use ISO weeks: weeks start on Monday."}}))
            code, created, _ = await cli("create", "--workspace", "acme", "--data", str(data))
            assert code == 0 and created["index_status"] == "pending"
            cid = created["card"]["id"]
            code, listed, _ = await cli("list", "--workspace", "acme", "--q", "monday")
            assert code == 0 and [c["id"] for c in listed["cards"]] == [cid]
            code, pending, _ = await cli("pending", "--workspace", "acme")
            assert code == 0 and pending["total"] == 1
            await env.drain()
            code, found, _ = await cli("rules", "--workspace", "acme", "which day does a week start")
            assert code == 0 and [r["card"]["id"] for r in found["results"]] == [cid]
            code, found, _ = await cli("solved-search", "--workspace", "acme", "week start")
            assert code == 0 and found["results"] == []
            data.write_text(json.dumps({"family": "sql_rule", "title": "Weeks start on Sunday",
                                        "content": {"rule": "US weeks start on Sunday."},
                                        "revision": 1}))
            code, updated, _ = await cli("update", "--workspace", "acme", cid, "--data", str(data))
            assert code == 0 and updated["card"]["revision"] == 2
            code, _, err = await cli("update", "--workspace", "acme", cid, "--data", str(data))
            assert code == 2 and json.loads(err)["code"] == "stale_revision"
            # `memarc show` output, edited, is a valid update file (read-only fields are dropped)
            code, shown, _ = await cli("show", "--workspace", "acme", cid)
            shown["card"]["title"] = "Weeks start on Sunday (US)"
            data.write_text(json.dumps(shown))
            code, updated, _ = await cli("update", "--workspace", "acme", cid, "--data", str(data))
            assert code == 0 and updated["card"]["revision"] == 3, updated
            assert updated["card"]["title"] == "Weeks start on Sunday (US)"
            data.write_text(json.dumps({**shown["card"], "revision": 3, "colour": "red"}))
            code, _, err = await cli("update", "--workspace", "acme", cid, "--data", str(data))
            assert code == 2 and "colour" in err  # a typo is still named by the API
            code, _, err = await cli("delete", "--workspace", "acme", cid)
            assert code == 2 and json.loads(err)["code"] == "confirmation_required"
            code, deleted, _ = await cli("delete", "--workspace", "acme", cid, "--yes")
            assert code == 0 and deleted["deleted"] == cid
            code, _, err = await cli("show", "--workspace", "acme", cid)
            assert code == 2 and json.loads(err)["code"] == "not_found"
        finally:
            await stop_server(server, task)

        monkeypatch.setenv("MEMARC_URL", f"http://127.0.0.1:{free_port()}")
        code, _, err = await cli("list", "--workspace", "acme")
        assert code == 4 and json.loads(err)["code"] == "writer_unreachable"
