"""``memarc up --demo``: the demo workspace and its token, the cards import and its progress."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, TextIO

from shared.archive.cards import Archive
from shared.auth import Principal
from shared.cards_file import read_cards
from shared.config import Settings
from shared.store.bootstrap import create_token, create_workspace, revoke_labelled_tokens

#: Label of the token each ``memarc up --demo`` prints; a new start revokes the previous one.
DEMO_TOKEN_LABEL = "memarc up demo"
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


def demo_token(settings: Settings, workspace: str) -> dict[str, Any]:
    """Create ``workspace`` (language ``en``) if it does not exist, revoke the tokens of the
    previous demo start and create three new ones, least privilege (issue 25, case 8) and the
    reviewer gate kept (issue 16): the assistant's ``memory.read`` + ``memory.propose`` token,
    returned as :func:`shared.store.bootstrap.create_token` returns it (``{"token": secret,
    …}``), the administrator's ``memory.manage`` token under ``manage_token`` and the reviewer's
    ``memory.review`` token under ``review_token`` (the same form). The assistant can neither
    write cards directly nor apply its own proposals.

    Uses the migrator credentials; raises what bootstrap raises (:class:`~shared.errors.BootstrapUnavailable`, ...).
    """
    create_workspace(settings.migrator_database_url, settings.db_schema, workspace, "en")
    # one live set of demo tokens at a time: the previous start's are revoked, these printed
    revoke_labelled_tokens(settings.migrator_database_url, settings.db_schema, workspace,
                           DEMO_TOKEN_LABEL)
    token = create_token(settings.migrator_database_url, settings.db_schema, workspace,
                         list(DEMO_PERMISSIONS), label=DEMO_TOKEN_LABEL)
    for key, permissions in (("manage_token", DEMO_MANAGE_PERMISSIONS),
                             ("review_token", DEMO_REVIEW_PERMISSIONS)):
        token[key] = create_token(settings.migrator_database_url, settings.db_schema, workspace,
                                  list(permissions), label=DEMO_TOKEN_LABEL)
    return token


async def load_demo_cards(archive: Archive, principal: Principal, workspace: str,
                          cards_path: Path, out: TextIO) -> None:
    """Import ``cards_path`` into ``workspace`` (idempotent by key: the cards imported by an
    earlier start are skipped, one deleted since is imported again, other cards are left alone),
    then, when it created cards, print the projection progress to ``out`` once a second until
    every card is projected, ending with a JSON line ``{"demo_ready": true, "cards",
    "by_family", "seconds_to_import_and_project"}``; when it created none, that line at once
    with ``current`` (projected cards) and a ``note``.

    :raises InvalidInput: a line of the cards file is invalid (nothing is imported).
    """
    started = time.monotonic()
    result = await archive.transfer.import_cards(principal, workspace, read_cards(cards_path))
    print(json.dumps({"imported": result.created, "by_family": result.by_family,
                      "already_imported": result.skipped}), file=out, flush=True)
    last = -1
    while True:
        status = await archive.status(principal, workspace)
        if result.created == 0:  # nothing new to wait for (as before import keys: no wait)
            break
        if status.current != last:
            last = status.current
            print(f"projected {status.current}/{status.cards} cards "
                  f"({time.monotonic() - started:.1f} s)", file=out, flush=True)
        if status.current >= status.cards:
            break
        await asyncio.sleep(1.0)
    ready: dict[str, Any] = {"demo_ready": True, "workspace": workspace, "cards": status.cards,
                             "by_family": status.by_family}
    if result.created:
        ready["seconds_to_import_and_project"] = round(time.monotonic() - started, 1)
    else:
        ready.update(current=status.current,
                     note="every bundled card was imported already; nothing imported")
    print(json.dumps(ready), file=out, flush=True)
