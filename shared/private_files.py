"""Files only their owner may read (mode 0600): the explorer's signing secret and the demo's
token secrets, kept in the data dir next to the database files."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` with mode 0600, creating its folder: written to a
    sibling temporary file, then renamed over ``path``, so a reader sees the old or the new
    content, never a part.

    :raises OSError: the folder or the file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
