"""The ``memarc`` command line: the parser assembled from the command modules, and the entry point.

Each command's arguments and handler sit together in one module: :mod:`~writer.cli.api_commands`
(clients of the writer API, ``MEMARC_URL`` and ``MEMARC_TOKEN``, so they work while ``memarc up``
holds the embedded index), :mod:`~writer.cli.bootstrap_commands` (``migrate``, ``workspace
create``, ``token create|revoke``: PostgreSQL directly with the migrator credentials),
:mod:`~writer.cli.process_commands` (``up``, ``writer``, ``worker``, ``explorer``) and
:mod:`~writer.cli.dataset_commands` (``convert-bird``). Every command takes ``--json`` (its
output is JSON already); card commands take ``-c RUNTIME_FILE`` (:mod:`~writer.cli.runtime`).
Output is JSON on stdout; errors are JSON on stderr with a non-zero exit status (2 for usage and
client errors, 3 for server errors, 4 when the server is unreachable).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from writer.cli import (admin_commands, api_commands, bootstrap_commands, dataset_commands,
                        process_commands)
from writer.cli.command import CliError, emit
from writer.cli.runtime import command_runtime

#: The command modules, in the order of ``memarc --help``.
COMMAND_MODULES = (bootstrap_commands, admin_commands, process_commands, api_commands,
                   dataset_commands)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: every command carries help text and a handler (``func``)."""
    p = argparse.ArgumentParser(prog="memarc", description="``memarc``: the command line.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        for configure in module.PARSERS:
            configure(sub)
    for leaf in leaf_parsers(p):
        leaf.add_argument("--json", action="store_true",
                          help="accepted for scripts that ask for JSON: the output is JSON "
                               "already")
    return p


def leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers that run a handler: each command, or each subcommand of a command that has
    them."""
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not nested:
        return [parser]
    return [leaf for child in nested[0].choices.values() for leaf in leaf_parsers(child)]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The commands of ``parser`` (as :func:`build_parser` builds it), by name, in help order."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


#: Every command with its one-line help, read from the parser (tests check each has a manual
#: entry and, for the isolation audit, a classification).
COMMANDS: dict[str, str] = {name: sp.description or ""
                            for name, sp in subcommands(build_parser()).items()}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``memarc`` console script: run one command, print its result; returns
    the exit status (0, or 2/3/4 with the error as JSON on stderr, 130 on Ctrl-C)."""
    import logging
    import warnings

    # pgserver asks platformdirs for a runtime dir; without XDG_RUNTIME_DIR (root) it warns
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    logging.basicConfig(level=os.environ.get("MEMARC_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("arq").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK logs every HTTP request at INFO
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's own usage, not the top-level one argparse would print
        subcommands(parser)[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    from shared.errors import ArchiveError, BootstrapUnavailable

    try:
        with command_runtime(args):
            result = args.func(args)
    except CliError as exc:
        sys.stderr.write(json.dumps(exc.payload, ensure_ascii=False) + "\n")
        return exc.status
    except BootstrapUnavailable as exc:  # bootstrap commands: server unreachable
        sys.stderr.write(json.dumps({"error": exc.message, "code": "unavailable"}) + "\n")
        return 4
    except ArchiveError as exc:
        sys.stderr.write(json.dumps({"error": exc.message, "code": exc.code, **exc.extra},
                                    default=str) + "\n")
        return 2 if exc.status < 500 else 3
    except OSError as exc:  # bootstrap commands: server unreachable
        sys.stderr.write(json.dumps({"error": f"{type(exc).__name__}: {exc}",
                                     "code": "unavailable"}) + "\n")
        return 4
    except KeyboardInterrupt:
        return 130
    if result is not None:
        emit(result)
    return 0
