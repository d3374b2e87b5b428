"""``memarc up --demo``: the demo workspace and its token, the cards import and its progress."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from shared.archive.cards import Archive
from shared.auth import Principal
from shared.cards_file import read_cards
from shared.config import Settings
from shared.private_files import write_private
from shared.store.bootstrap import (active_token, create_token, create_workspace,
                                    revoke_labelled_tokens)

#: Label of the tokens ``memarc up --demo`` prints; a start that makes new ones revokes the
#: previous ones.
DEMO_TOKEN_LABEL = "memarc up demo"
#: The file under the data dir that keeps the demo tokens' secrets (mode 0600), so that a
#: restart prints the same tokens: ``{workspace: {"token", "manage_token", "review_token"}}``.
DEMO_TOKENS_FILE = "demo_tokens.json"
#: The demo's tokens, least privilege (issue 25, case 8): the assistant's recalls and proposes
#: (it cannot write cards directly nor apply a review), the administrator's manages cards, the
#: reviewer's reviews; no one token can both propose and apply.
DEMO_PERMISSIONS = ("memory.read", "memory.propose")
DEMO_MANAGE_PERMISSIONS = ("memory.manage",)
DEMO_REVIEW_PERMISSIONS = ("memory.review",)


def admin_sign_in_link(settings: Settings, workspace: str, writer_url: str) -> str:
    """A one-time sign-in link to the administration pages of ``workspace`` (``memory.manage``,
    as ``memarc sign-in-link`` prints it; valid 15 minutes: print another with that command)."""
    from shared.archive.browser_sessions import create_sign_in_link

    link = create_sign_in_link(settings.migrator_database_url, settings.db_schema, workspace,
                               ["memory.manage"], session_hours=settings.admin_session_hours)
    return f"{writer_url}/admin/sign-in/link?code={link['code']}"


#: The demo's three tokens: the key each is returned under and its permissions.
DEMO_TOKENS = (("token", DEMO_PERMISSIONS), ("manage_token", DEMO_MANAGE_PERMISSIONS),
               ("review_token", DEMO_REVIEW_PERMISSIONS))


def demo_token(settings: Settings, workspace: str) -> dict[str, Any]:
    """Create ``workspace`` (language ``en``) if it does not exist and return its three demo
    tokens, least privilege (issue 25, case 8) and the reviewer gate kept (issue 16): the
    assistant's ``memory.read`` + ``memory.propose`` token, as
    :func:`shared.store.bootstrap.create_token` returns it (``{"token": secret, …}``), the
    administrator's ``memory.manage`` token under ``manage_token`` and the reviewer's
    ``memory.review`` token under ``review_token`` (the same form). The assistant can neither
    write cards directly nor apply its own proposals.

    The tokens of the previous start on this data dir (kept in ``data_dir/demo_tokens.json``,
    mode 0600, next to the database files themselves) are returned again while all three are
    active in this database with their label and permissions; otherwise every token of the
    label is revoked and three new ones are made and kept (one live set of demo tokens at a
    time).

    Uses the migrator credentials; raises what bootstrap raises
    (:class:`~shared.errors.BootstrapUnavailable`, ...) and :class:`OSError` when the file
    cannot be written.
    """
    url, schema = settings.migrator_database_url, settings.db_schema
    create_workspace(url, schema, workspace, "en")
    path = Path(settings.data_dir) / DEMO_TOKENS_FILE
    kept = _kept_tokens(path).get(workspace) or {}
    tokens = {key: _still_active(settings, workspace, kept.get(key), perms)
              for key, perms in DEMO_TOKENS}
    if not all(tokens.values()):
        revoke_labelled_tokens(url, schema, workspace, DEMO_TOKEN_LABEL)
        tokens = {key: create_token(url, schema, workspace, list(perms), label=DEMO_TOKEN_LABEL)
                  for key, perms in DEMO_TOKENS}
        _keep_tokens(path, workspace, {key: t["token"] for key, t in tokens.items()})
    token = tokens["token"]
    token.update(manage_token=tokens["manage_token"], review_token=tokens["review_token"])
    return token


def _still_active(settings: Settings, workspace: str, secret: Any,
                  permissions: tuple[str, ...]) -> dict[str, Any] | None:
    """The kept demo token ``secret`` as :func:`create_token` returns it, if it is active in
    this database, of ``workspace``, with the demo's label and exactly ``permissions``."""
    if not isinstance(secret, str):
        return None
    token = active_token(settings.migrator_database_url, settings.db_schema, secret)
    if (token is None or token.pop("label") != DEMO_TOKEN_LABEL or token["workspace"] != workspace
            or token["permissions"] != sorted(permissions) or token["database"] is not None):
        return None
    return token


def _kept_tokens(path: Path) -> dict[str, Any]:
    """The demo tokens file's content; ``{}`` when it is missing or unreadable as JSON."""
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def _keep_tokens(path: Path, workspace: str, secrets: dict[str, str]) -> None:
    """Write ``workspace``'s token secrets into the demo tokens file (the other workspaces'
    entries kept), mode 0600, replaced in one rename."""
    kept = _kept_tokens(path)
    kept[workspace] = secrets
    write_private(path, json.dumps(kept))


#: the quick start's first query: a BIRD question worded differently from the stored one
FIRST_QUESTION = ("count men clients residing in North Bohemia where the average salary is "
                  "above 8000")


def ready_block(info: dict[str, Any], admin_sign_in: str, explorer_sign_in: str,
                new_links: dict[str, str]) -> str:
    """The block ``memarc up --demo`` prints once the demo's cards are indexed (issue 26): where
    everything is, the tokens again, a fresh one-time administration sign-in link, and lines to
    copy: the environment of the CLI (``MEMARC_URL``, ``MEMARC_TOKEN`` and the ``memarc``
    command's folder on ``PATH``), a first recall by the CLI and by curl. ``info``: what
    ``memarc up`` printed at start (``writer``, ``explorer``, ``admin``, ``workspace``,
    ``token``, ``manage_token``, ``review_token``); ``admin_sign_in`` and ``explorer_sign_in``:
    fresh one-time links (those printed at start may be used up by now); ``new_links``: the
    commands that print new ones (:func:`writer.serving.new_link_commands`)."""
    bin_dir = Path(sys.executable).parent
    writer, ws, token = info["writer"], info["workspace"], info["token"]
    body = json.dumps({"query": FIRST_QUESTION, "mode": "solved", "top": 3})
    return "\n".join([
        "",
        f"Ready: the {ws!r} cards are indexed. Where everything is:",
        f"  writer (HTTP API)  {writer}    API reference: {writer}/schema",
        f"  explorer           {info['explorer']}",
        f"    sign in          {explorer_sign_in}",
        "                     (one-time, 15 minutes; another: the command below)",
        f"  administration     {info['admin']}",
        f"    sign in          {admin_sign_in}",
        "                     (one-time, 15 minutes; another: the command below)",
        f"  MCP                {writer}/mcp  (Authorization: Bearer <token>)",
        "New one-time sign-in links while this runs (no restart, no token revoked):",
        f"  {new_links['explorer']}",
        f"  {new_links['admin']}",
        "Tokens of workspace " + repr(ws) + " (the same at every start on this data directory "
        "while none is revoked):",
        f"  assistant, memory.read + memory.propose   {token}",
        f"  administrator, memory.manage              {info['manage_token']}",
        f"  reviewer, memory.review                   {info['review_token']}",
        "Try it (another terminal):",
        f"  export PATH=\"{bin_dir}:$PATH\" MEMARC_URL={writer} MEMARC_TOKEN={token}",
        f"  memarc solved-search \"{FIRST_QUESTION}\" --workspace {ws}",
        f"  curl -s -X POST {writer}/api/workspaces/{ws}/memory/search \\",
        f"    -H \"Authorization: Bearer {token}\" -H 'Content-Type: application/json' \\",
        f"    -d '{body}'",
        "",
    ])


async def load_demo_cards(archive: Archive, principal: Principal, workspace: str,
                          cards_path: Path, out: TextIO,
                          ready: Callable[[], str] | None = None) -> None:
    """Import ``cards_path`` into ``workspace`` (idempotent by key: the cards imported by an
    earlier start are skipped, one deleted since is imported again, other cards are left alone),
    then print the projection progress to ``out`` once a second until every card of the
    workspace is projected, ending with a JSON line ``{"demo_ready": true, "cards",
    "by_family", "seconds_to_import_and_project"}`` (with ``note`` when it imported nothing).
    A restart after a stop in the middle of the projection (nothing imported, some cards not
    indexed yet) waits for those too, so the ready block is never printed early; the operations
    the stopped process held are taken up again when their lease expires
    (``MEMARC_LEASE_SECONDS``). Then ``ready()``'s text, when given (the :func:`ready_block`).

    :raises InvalidInput: a line of the cards file is invalid (nothing is imported).
    """
    started = time.monotonic()
    result = await archive.transfer.import_cards(principal, workspace, read_cards(cards_path))
    print(json.dumps({"imported": result.created, "by_family": result.by_family,
                      "already_imported": result.skipped}), file=out, flush=True)
    last = -1
    status = await archive.status(principal, workspace)
    if result.created == 0 and status.current < status.cards:
        print(json.dumps({"note": f"{status.cards - status.current} cards are not indexed yet "
                                  "(an earlier start stopped before indexing them); waiting for "
                                  "them (operations the stopped process held resume when their "
                                  "lease expires)"}), file=out, flush=True)
    while True:
        if status.current != last:
            last = status.current
            print(f"projected {status.current}/{status.cards} cards "
                  f"({time.monotonic() - started:.1f} s)", file=out, flush=True)
        if status.current >= status.cards:
            break
        await asyncio.sleep(1.0)
        status = await archive.status(principal, workspace)
    done: dict[str, Any] = {"demo_ready": True, "workspace": workspace, "cards": status.cards,
                             "by_family": status.by_family,
                             "seconds_to_import_and_project": round(time.monotonic() - started, 1)}
    if not result.created:
        done["note"] = "every bundled card was imported already; nothing imported"
    print(json.dumps(done), file=out, flush=True)
    if ready is not None:
        print(ready(), file=out, flush=True)
