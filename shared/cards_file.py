"""The cards file (the archive's import format): reading one, and the bundled BIRD cards file.

A cards file is JSON Lines (optionally gzip-compressed), one :class:`shared.models.ImportCard` per
line; ``POST …/import`` and ``memarc up --demo`` take it (idempotent by key), ``memarc convert-bird``
and ``memarc export`` (``GET …/export``) write one.
"""

from __future__ import annotations

import gzip
from importlib import resources as pkg_resources
from pathlib import Path

from shared.errors import InvalidInput
from shared.models import ImportCard, decode_json


def bundled_cards() -> Path:
    """Path of the BIRD cards file shipped with the package (``shared/data/bird_cards.jsonl.gz``,
    2,251 cards)."""
    return Path(str(pkg_resources.files("shared.data") / "bird_cards.jsonl.gz"))


def read_cards(path: Path) -> list[ImportCard]:
    """Decode a cards file (JSON Lines, gzip-compressed when the name ends in ``.gz``), blank
    lines skipped, in file order.

    :raises InvalidInput: a line is invalid (its number is named).
    :raises OSError: the file cannot be read.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    cards = []
    with opener(path, "rb") as fh:  # type: ignore[operator]
        for n, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    cards.append(decode_json(line, ImportCard))
                except Exception as exc:
                    raise InvalidInput(f"{path}:{n}: {exc}") from exc
    return cards
