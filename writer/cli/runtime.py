"""A command's runtime configuration (``-c FILE``): where the writer is, the token, the workspace
and the workflow's database and schema binding, read from a YAML or JSON file.

Each value is taken from the command's flag first (``--workspace``, ``--database``,
``--schema``), then from the file, then from the environment (``MEMARC_URL``, ``MEMARC_TOKEN``,
``MEMARC_WORKSPACE``, ``MEMARC_WORKFLOW_DATABASE``, ``MEMARC_WORKFLOW_SCHEMA``). The file of
the command being run is held in :data:`CURRENT` while it runs, so every client of the writer
(:class:`~writer.cli.client.ApiClient`) and the workflow's binding read the same values.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from writer.cli.command import CliError

#: The keys of a runtime file, with what each holds (docs/cli.md lists them).
RUNTIME_KEYS: dict[str, str] = {
    "url": "the writer's URL, http(s)://host[:port] (else MEMARC_URL)",
    "token": "an API token of the workspace (else MEMARC_TOKEN)",
    "token_file": "a file holding the token, instead of token (relative: to the runtime file)",
    "workspace": "the workspace id (--workspace wins; else MEMARC_WORKSPACE)",
    "database": "the workflow's database binding (--database wins; else "
                "MEMARC_WORKFLOW_DATABASE)",
    "schema": "the workflow's schema binding, with database (--schema wins; else "
              "MEMARC_WORKFLOW_SCHEMA)",
}

#: The environment variable naming the workspace when neither ``--workspace`` nor a runtime file
#: does.
WORKSPACE_ENV = "MEMARC_WORKSPACE"


@dataclass(frozen=True)
class Runtime:
    """The values of a runtime file (None: the file does not set it)."""

    url: str | None = None
    token: str | None = None
    workspace: str | None = None
    database: str | None = None
    schema: str | None = None


#: The runtime file of the command being run (empty without ``-c``).
CURRENT: ContextVar[Runtime] = ContextVar("memarc_runtime", default=Runtime())


def bad_config(path: str, problem: str) -> CliError:
    """The error of a runtime file that cannot be used (``bad_config``, exit status 2)."""
    return CliError({"error": f"runtime file {path}: {problem}", "code": "bad_config",
                     "allowed_keys": sorted(RUNTIME_KEYS)})


def read_document(path: str) -> Any:
    """The document in the file ``path``: JSON when its name ends in ``.json``, else YAML (which
    reads JSON too).

    :raises CliError: ``bad_config``, the file cannot be read or parsed.
    """
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
        return json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        raise bad_config(path, f"cannot be read: {exc}") from exc


def load_runtime(path: str) -> Runtime:
    """The runtime configuration in the YAML or JSON file ``path``: a mapping of
    :data:`RUNTIME_KEYS` to non-empty strings; ``token_file`` is read (whitespace around the
    token dropped).

    :raises CliError: ``bad_config``, the file cannot be read, is not a mapping, has a key
        outside :data:`RUNTIME_KEYS` (the error lists them), a value that is not a non-empty
        string, both ``token`` and ``token_file``, or a token file that cannot be read or is
        empty.
    """
    document = read_document(path)
    if not isinstance(document, dict):
        raise bad_config(path, f"must be a mapping of {', '.join(RUNTIME_KEYS)}, "
                               f"not {type(document).__name__}")
    unknown = sorted(str(k) for k in document if k not in RUNTIME_KEYS)
    if unknown:
        raise bad_config(path, f"unknown key(s) {', '.join(unknown)}; allowed: "
                               f"{', '.join(RUNTIME_KEYS)}")
    for key, value in document.items():
        if not isinstance(value, str) or not value.strip():
            raise bad_config(path, f"{key} must be a non-empty string, not {value!r}")
    values = dict(document)
    if "token_file" in values:
        if "token" in values:
            raise bad_config(path, "give token or token_file, not both")
        values["token"] = read_token_file(path, values.pop("token_file"))
    return Runtime(**values)


def read_token_file(config_path: str, token_file: str) -> str:
    """The token in ``token_file`` (relative to the runtime file's folder).

    :raises CliError: ``bad_config``, the file cannot be read or holds no token.
    """
    where = Path(config_path).parent / token_file
    try:
        token = where.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise bad_config(config_path, f"token_file {where} cannot be read: {exc}") from exc
    if not token:
        raise bad_config(config_path, f"token_file {where} is empty")
    return token


def resolve_workspace(args: argparse.Namespace, runtime: Runtime) -> None:
    """Set ``args.workspace`` to ``--workspace``, else the runtime file's, else
    ``MEMARC_WORKSPACE``.

    :raises CliError: ``no_workspace``, none of them names one.
    """
    args.workspace = (args.workspace or runtime.workspace
                      or os.environ.get(WORKSPACE_ENV) or None)
    if args.workspace is None:
        raise CliError({"error": f"name the workspace: --workspace, `workspace:` in the -c "
                                 f"file, or {WORKSPACE_ENV}", "code": "no_workspace"})


@contextmanager
def command_runtime(args: argparse.Namespace) -> Iterator[Runtime]:
    """While the block runs, :data:`CURRENT` holds the runtime file of ``args.config`` (a
    command without ``-c``: an empty one), and a command taking ``--workspace`` has it resolved
    (:func:`resolve_workspace`).

    :raises CliError: ``bad_config`` (:func:`load_runtime`), ``no_workspace``.
    """
    path = getattr(args, "config", None)
    runtime = load_runtime(path) if path else Runtime()
    if "workspace" in vars(args) and getattr(args, "runtime_workspace", False):
        resolve_workspace(args, runtime)
    token = CURRENT.set(runtime)
    try:
        yield runtime
    finally:
        CURRENT.reset(token)


def runtime_value(name: str, env: str) -> str | None:
    """The runtime file's ``name`` for the command being run, else the environment's ``env``
    (empty: unset)."""
    return getattr(CURRENT.get(), name) or os.environ.get(env) or None

