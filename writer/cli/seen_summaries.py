"""The summaries a person looked at with ``memarc summary``, remembered for ``memarc
review-apply`` (issue 36): the version of the summary and the proposals it showed open, per
writer, workspace and session, so that a review carries the version of what its reviewer saw
without copying it.

The file is ``summaries.json`` in ``MEMARC_STATE_DIR`` (default ``$XDG_STATE_HOME/memarc``,
else ``~/.local/state/memarc``), readable by its owner only, written whole (a temporary file
renamed over it), at most :data:`KEEP` entries (the oldest go first). A file that cannot be
read is treated as empty: it only ever saves the person a copy.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: How many sessions' summaries are remembered at most.
KEEP = 200


@dataclass(frozen=True)
class Seen:
    """A summary as ``memarc summary`` showed it: its version and the keys it showed open."""

    version: str
    open: tuple[str, ...]


def state_file() -> Path:
    """Where the summaries are remembered (read from the environment at each call)."""
    base = os.environ.get("MEMARC_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "memarc")
    return Path(base) / "summaries.json"


def open_keys(summary: dict[str, Any]) -> tuple[str, ...]:
    """The keys of the proposals a summary document (``GET …/summary``) shows not reviewed yet."""
    return tuple(p["key"] for p in summary.get("proposals", ()) if p.get("reviewed") is None)


def _key(url: str, workspace: str, session: str) -> str:
    return json.dumps([url, workspace, session])


def _load() -> dict[str, Any]:
    try:
        data = json.loads(state_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(data: dict[str, Any]) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    newest = sorted(data.items(), key=lambda kv: kv[1].get("at", 0))[-KEEP:]
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".summaries-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:  # mkstemp: mode 0600
        json.dump(dict(newest), f)
    os.replace(tmp, path)


def remember(url: str, workspace: str, session: str, summary: dict[str, Any]) -> None:
    """Remember ``summary`` (its ``version`` and open proposals) as the one shown for
    ``session``; a summary without a version (an older writer) is not remembered."""
    if not summary.get("version"):
        return
    data = _load()
    data[_key(url, workspace, session)] = {"version": summary["version"],
                                           "open": list(open_keys(summary)), "at": time.time()}
    _save(data)


def recall(url: str, workspace: str, session: str) -> Seen | None:
    """The summary last shown for ``session`` by ``memarc summary``, or None."""
    entry = _load().get(_key(url, workspace, session))
    if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
        return None
    return Seen(entry["version"], tuple(entry.get("open") or ()))

