"""The workflow's binding (DESIGN §5): the database and schema the CLI's workflow calls
(``search``, ``rules``, ``solved-search``, ``propose``) are bound to, ``--database`` /
``--schema``, else ``MEMARC_WORKFLOW_DATABASE`` / ``MEMARC_WORKFLOW_SCHEMA``, and the physical
contexts (filters, dependency entries) held inside it.
"""

from __future__ import annotations

import argparse
from typing import Any

from writer.cli.command import CliError, arg
from writer.cli.runtime import runtime_value

#: The environment that binds the workflow's calls to a database and schema (DESIGN §5).
WORKFLOW_DATABASE_ENV = "MEMARC_WORKFLOW_DATABASE"
WORKFLOW_SCHEMA_ENV = "MEMARC_WORKFLOW_SCHEMA"
WORKFLOW_BINDING = (
    arg("--database", help=f"the workflow's database (default ${WORKFLOW_DATABASE_ENV}): "
                           "filters and dependencies that name none get it"),
    arg("--schema", help=f"the workflow's schema (default ${WORKFLOW_SCHEMA_ENV}), with "
                         "--database"),
)


def workflow_binding(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The database and schema the workflow's calls are bound to: ``--database`` / ``--schema``,
    else the runtime file's (``-c``), else ``MEMARC_WORKFLOW_DATABASE`` /
    ``MEMARC_WORKFLOW_SCHEMA`` (empty: unset).

    :raises CliError: ``bad_input``, a schema without a database.
    """
    database = getattr(args, "database", None) or runtime_value("database", WORKFLOW_DATABASE_ENV)
    schema = getattr(args, "schema", None) or runtime_value("schema", WORKFLOW_SCHEMA_ENV)
    if schema is not None and database is None:
        raise CliError({"error": f"a workflow schema needs its database (--database or "
                                 f"{WORKFLOW_DATABASE_ENV})", "code": "bad_input"})
    return database, schema


def bind_context(context: Any, binding: tuple[str | None, str | None], where: str, *,
                 fill_schema: bool) -> Any:
    """A physical context (a filter or a dependency entry: ``{database?, schema?, table?,
    column?}``) inside the workflow's ``binding``: a database it leaves out is the binding's;
    so is its schema when ``fill_schema`` (a filter always; a dependency only when it named no
    database either: ``{"database": D}`` alone is a database-wide dependency, kept as written).
    Anything but an object is returned unchanged (the API names what is wrong with it).

    :raises CliError: ``outside_binding``, the context names another database or schema than
        the binding's (as a token bound to them answers 403).
    """
    database, schema = binding
    if database is None or not isinstance(context, dict):
        return context
    out = dict(context)
    named_database = out.get("database") is not None
    for level, bound, fill in (("database", database, True), ("schema", schema, fill_schema)):
        have = out.get(level)
        if bound is None:
            continue
        if have is None:
            if fill or not named_database:
                out[level] = bound
        elif have != bound:
            raise CliError({"error": f"{where} names {level} {have!r}, but this workflow is bound "
                                     f"to {level} {bound!r} (--{level}, the -c file's "
                                     f"{level}, or MEMARC_WORKFLOW_{level.upper()})",
                            "code": "outside_binding"})
    return out
