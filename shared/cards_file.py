"""The cards file (the archive's import format): reading one, and the bundled BIRD cards file.

A cards file is JSON Lines (optionally gzip-compressed), one :class:`shared.models.ImportCard` per
line, and optionally curated evaluation cases, one :class:`shared.models.CaseLine`
(``{"evaluation_case": {...}}``) per line; ``POST …/import`` and ``memarc up --demo`` take it (idempotent by key), ``memarc convert-bird``
and ``memarc export`` (``GET …/export``) write one.
"""

from __future__ import annotations

import gzip
from importlib import resources as pkg_resources
from collections.abc import Iterable
from pathlib import Path

from shared.errors import ArchiveError, InvalidInput
import msgspec

from shared.models import CaseLine, ImportCard, decode_json


def bundled_cards() -> Path:
    """Path of the BIRD cards file shipped with the package (``shared/data/bird_cards.jsonl.gz``,
    2,251 cards)."""
    return Path(str(pkg_resources.files("shared.data") / "bird_cards.jsonl.gz"))


def decode_cards(lines: Iterable[bytes], where: str = "line ") -> list[ImportCard]:
    """The cards of a cards file's ``lines`` (each one JSON object), blank lines skipped, in
    order: what :func:`read_cards` reads (:func:`decode_cards_file` without cases).

    :raises InvalidInput: a line is invalid, or holds an evaluation case, named
        ``{where}{number}: {why}`` (numbers from 1).
    """
    cards, cases = decode_cards_file(lines, where)
    if cases:
        raise InvalidInput(f"{where}{cases[0][0]}: an evaluation case, where cards are read")
    return cards


def _is_case(line: bytes) -> bool:
    try:
        value = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return False
    return isinstance(value, dict) and "evaluation_case" in value


def decode_cards_file(lines: Iterable[bytes], where: str = "line "
                      ) -> tuple[list[ImportCard], list[tuple[int, CaseLine]]]:
    """The cards and the curated evaluation cases (with their line numbers) of a cards file's
    ``lines``, blank lines skipped, in order: what ``POST …/import`` reads. A line is a card
    unless it is an object with an ``evaluation_case`` member.

    :raises InvalidInput: a line is invalid, named ``{where}{number}: {why}`` (numbers from 1).
    """
    cards: list[ImportCard] = []
    cases: list[tuple[int, CaseLine]] = []
    for n, line in enumerate(lines, start=1):
        if line.strip():
            try:
                try:
                    cards.append(decode_json(line, ImportCard))
                except InvalidInput:
                    if not _is_case(line):
                        raise
                    cases.append((n, decode_json(line, CaseLine)))
            except ArchiveError as exc:
                raise InvalidInput(f"{where}{n}: {exc.message}") from exc
    return cards, cases


def read_cards(path: Path) -> list[ImportCard]:
    """Decode a cards file (JSON Lines, gzip-compressed when the name ends in ``.gz``), blank
    lines skipped, in file order (:func:`decode_cards`).

    :raises InvalidInput: a line is invalid (``<path>:<number>: …``).
    :raises OSError: the file cannot be read.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:  # type: ignore[operator]
        return decode_cards(fh, where=f"{path}:")
