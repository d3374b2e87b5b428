"""The cards file (the archive's import format): reading one, and the bundled BIRD cards file.

A cards file is JSON Lines (optionally gzip-compressed), one :class:`shared.models.ImportCard` per
line; ``POST …/import`` and ``memarc up --demo`` take it (idempotent by key), ``memarc convert-bird``
and ``memarc export`` (``GET …/export``) write one.
"""

from __future__ import annotations

import gzip
from importlib import resources as pkg_resources
from collections.abc import Iterable
from pathlib import Path

from shared.errors import ArchiveError, InvalidInput
from shared.models import ImportCard, decode_json


def bundled_cards() -> Path:
    """Path of the BIRD cards file shipped with the package (``shared/data/bird_cards.jsonl.gz``,
    2,251 cards)."""
    return Path(str(pkg_resources.files("shared.data") / "bird_cards.jsonl.gz"))


def decode_cards(lines: Iterable[bytes], where: str = "line ") -> list[ImportCard]:
    """The cards of a cards file's ``lines`` (each one JSON object), blank lines skipped, in
    order: what ``POST …/import`` and :func:`read_cards` both read.

    :raises InvalidInput: a line is invalid, named ``{where}{number}: {why}`` (numbers from 1).
    """
    cards = []
    for n, line in enumerate(lines, start=1):
        if line.strip():
            try:
                cards.append(decode_json(line, ImportCard))
            except ArchiveError as exc:
                raise InvalidInput(f"{where}{n}: {exc.message}") from exc
    return cards


def read_cards(path: Path) -> list[ImportCard]:
    """Decode a cards file (JSON Lines, gzip-compressed when the name ends in ``.gz``), blank
    lines skipped, in file order (:func:`decode_cards`).

    :raises InvalidInput: a line is invalid (``<path>:<number>: …``).
    :raises OSError: the file cannot be read.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:  # type: ignore[operator]
        return decode_cards(fh, where=f"{path}:")
