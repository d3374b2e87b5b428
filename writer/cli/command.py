"""What every command module of the CLI uses: adding a command and its arguments, its error,
JSON in and out."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: A command's handler: the parsed arguments in, the JSON-able result out (``None``: print nothing).
Handler = Callable[[argparse.Namespace], Any]

#: An argument of a command: the flags and the keyword arguments of ``add_argument``.
Argument = tuple[tuple[str, ...], dict[str, Any]]


def arg(*flags: str, **kwargs: Any) -> Argument:
    """An :data:`Argument` written as a call of ``add_argument``."""
    return flags, kwargs


def add_arguments(parser: argparse.ArgumentParser, *arguments: Argument) -> None:
    """Add each of ``arguments`` to ``parser``, in order."""
    for flags, kwargs in arguments:
        parser.add_argument(*flags, **kwargs)


class CliError(Exception):
    """An error to print as JSON on stderr (``payload``) with an exit status (``status``: 2 usage
    or client error, 3 server error, 4 server unreachable)."""

    def __init__(self, payload: dict[str, Any], status: int = 2) -> None:
        super().__init__(payload.get("detail") or payload.get("error"))
        self.payload = payload
        self.status = status


def add_command(subparsers: argparse._SubParsersAction, name: str, help: str,
                handler: Handler | None, *, workspace: bool = False) -> argparse.ArgumentParser:
    """Add the command ``name`` (``help`` is its one-line help and description) that runs
    ``handler``; ``workspace`` adds the ``--workspace`` of card commands and ``-c`` (its runtime
    file, :mod:`writer.cli.runtime`, which can name the workspace instead). A command with
    subcommands passes ``handler=None`` and sets one on each subcommand."""
    parser = subparsers.add_parser(name, help=help, description=help)
    if handler is not None:
        parser.set_defaults(func=handler)
    if workspace:
        parser.add_argument("--workspace", help="workspace id (else the -c file's, else "
                                                "$MEMARC_WORKSPACE)")
        parser.add_argument("-c", "--config", metavar="RUNTIME_FILE",
                            help="YAML or JSON runtime file: url, token or token_file, "
                                 "workspace, database, schema (flags win over it, it wins over "
                                 "the environment)")
        parser.set_defaults(runtime_workspace=True)
    return parser


def emit(obj: Any) -> None:
    """Print ``obj`` as indented JSON on stdout (non-JSON values as ``str``)."""
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json_file(path: str) -> Any:
    """The JSON document in the file ``path`` (``-``: stdin).

    :raises CliError: ``bad_input``, the file cannot be read or is not JSON.
    """
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        return json.loads(text)
    except (OSError, json.JSONDecodeError) as exc:
        raise CliError({"error": f"cannot read JSON from {path}: {exc}",
                        "code": "bad_input"}) from exc
