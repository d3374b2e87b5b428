"""Dataset commands: ``memarc convert-bird`` (the converter itself is :mod:`tools.bird_cards`)."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from writer.cli.command import add_command


def convert_bird_command(args: argparse.Namespace) -> dict[str, Any]:
    """Convert ``--datasets`` into the cards file ``--out``: ``{written, out, by_family}``.

    :raises OSError: a dataset file cannot be read or the output cannot be written.
    """
    from tools.bird_cards import convert, write_cards  # a dataset tool, not part of the runtime

    cards = convert(Path(args.datasets))
    write_cards(cards, Path(args.out))
    return {"written": len(cards), "out": args.out,
            "by_family": dict(sorted(Counter(c["family"] for c in cards).items()))}


def configure_convert_bird_parser(subparsers: argparse._SubParsersAction) -> None:
    cb = add_command(subparsers, "convert-bird",
                     "Convert the BIRD / BIRD-CRITIC / sqlfluff datasets into a cards file.",
                     convert_bird_command)
    cb.add_argument("--datasets", default="../shared/datasets", help="datasets folder")
    cb.add_argument("--out", default="shared/data/bird_cards.jsonl.gz", help="output file")


#: The dataset commands, in the order of ``memarc --help``.
PARSERS = (configure_convert_bird_parser,)
